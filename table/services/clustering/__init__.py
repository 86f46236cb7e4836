"""Clustering with the consistent-hashing index: `planner` schedules bucket splits, merges and
sorts; `execute` runs a plan, or rolls it back."""

from table.services.clustering.execute import ClusteringResult, execute_clustering, rollback_clustering
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering

__all__ = ["ClusteringPolicy", "ClusteringResult", "execute_clustering", "rollback_clustering", "schedule_clustering"]
