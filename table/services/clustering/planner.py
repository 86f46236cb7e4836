"""Clustering plans with the consistent-hashing index: which buckets split, merge or get sorted
(Hudi RFC-42 and RFC-19).

A bucket-indexed table keeps one file group per bucket, so clustering rewrites buckets:

- split: a bucket whose file slice (base + logs) passed the split threshold becomes two
  children, cut at the middle of its hash range or, with `split_point="distribution"`, at the
  median hash of its records so that each child gets about half;
- merge: adjacent buckets whose combined size stays under the merge threshold become one (the
  bucket index's way of stitching small files);
- sort: with sort columns, a bucket whose base file is not sorted by them yet is rewritten
  sorted, into a new file group of the same hash range.

Scheduling runs on the writer (no deltacommit in flight): `<r>.replacecommit.requested` records
the groups (see `table.plans.clustering`). From then on every record routed to a planned
bucket is written to the old file group and to its child (dual write), the child's logs starting
a slice at r; readers keep seeing only the old groups. `table.services.clustering.execute` runs
the plan.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from table import failpoints
from table.config.choices import SplitPoint
from table.errors import InvalidRequestError, WriteInProgressError
from table.file_group.fs_view import FileGroup, FileSlice
from table.index import consistent_hashing as ring
from table.plans.clustering import (
    ClusteringGroup,
    ClusteringPlan,
    PlannedSlice,
    read_clustering_plan,
)
from table.plans.pending import pending_clustering_plans, pending_compaction_file_groups
from table.read.merge import MergeRule
from table.read.reader import SliceReadSpec, read_file_slice, table_schema_with_meta
from table.schema import RECORD_KEY
from table.storage.file_io import Storage
from table.timeline.timeline import Action, Instant, Timeline

if TYPE_CHECKING:
    from table.write.writer import TableWriter

log = logging.getLogger(__name__)

HASH_SPACE = ring.HASH_VALUE_MASK + 1


@dataclass(frozen=True)
class ClusteringPolicy:
    """What a plan may do (Hudi's bucket index resize settings and clustering plan limits).

    Sizes are a bucket's latest file slice: base file plus log files. `min_buckets` and
    `max_buckets` bound each partition's bucket count; `max_partitions` and `max_bytes` bound
    one plan (the first group is taken whatever its size, so a large bucket still splits).
    """

    split_threshold_bytes: int
    merge_threshold_bytes: int
    min_buckets: int = 1
    max_buckets: int = 1024
    split_point: SplitPoint = SplitPoint.MIDDLE
    max_partitions: int | None = None
    max_bytes: int | None = None
    sort_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "split_point", SplitPoint.parse(self.split_point, "split point"))
        if not 0 <= self.merge_threshold_bytes < self.split_threshold_bytes:
            raise InvalidRequestError(
                "the merge threshold must be below the split threshold, or buckets would merge back what a split made"
            )
        if not 1 <= self.min_buckets <= self.max_buckets:
            raise InvalidRequestError(
                f"need 1 <= min_buckets <= max_buckets, got {self.min_buckets} and {self.max_buckets}"
            )
        if self.max_partitions is not None and self.max_partitions < 1:
            raise InvalidRequestError("max_partitions must be >= 1")
        if self.max_bytes is not None and self.max_bytes < 1:
            raise InvalidRequestError("max_bytes must be >= 1")


def schedule_clustering(writer: TableWriter, policy: ClusteringPolicy) -> str | None:
    """Write a clustering plan of the bucket changes `policy` calls for; its instant, or None
    (and nothing written) when no bucket needs one. A partition with a pending plan, and a file
    group in a pending compaction plan, are left out."""
    writer.check_held()
    table = writer.table
    timeline = table.timeline()
    writing = timeline.pending(Action.DELTA_COMMIT)
    if writing:
        raise WriteInProgressError("clustering", writing[0].timestamp)
    clustering = {p for plan in pending_clustering_plans(timeline) for p in plan.partition_paths}
    compacting = pending_compaction_file_groups(timeline)
    sorted_instants = _sorted_base_instants(timeline, policy.sort_columns)
    view = writer.file_system_view(timeline)
    rings = writer.rings(timeline)
    completed = timeline.completed_timestamps()
    spec = SliceReadSpec(
        completed,
        table.config.precombine_field,
        table_schema_with_meta(writer.table_schema(timeline)),
        (RECORD_KEY,),
        merge_rule=MergeRule.of(table.config.payload_class),
    )
    key_fields = tuple(table.config.record_key_fields)
    groups: list[ClusteringGroup] = []
    budget = _Budget(policy)
    for partition in view.partition_paths():
        if partition in clustering or budget.partitions_full():
            continue
        metadata = rings.get(partition)
        if metadata is None:
            continue
        buckets = _buckets(metadata, view.file_groups(partition), compacting)
        planner = _PartitionPlanner(table.storage, metadata, buckets, policy, budget, spec, key_fields)
        found = planner.splits() + planner.merges() + planner.sorts(sorted_instants)
        if found:
            budget.partitions += 1
            groups.extend(found)
    if not groups:
        return None
    instant = timeline.new_instant_time()
    plan = ClusteringPlan(instant, tuple(groups), policy.sort_columns)
    timeline.create_requested(Instant(instant, Action.REPLACE_COMMIT, "requested"), plan.serialize(table.storage))
    failpoints.reach("clustering.requested")
    log.info(
        "clustering %s of %s scheduled: %s",
        instant,
        table.name,
        ", ".join(f"{g.kind} {g.partition_path or '(root)'} {'+'.join(g.file_ids)}" for g in groups),
    )
    return instant


@dataclass
class _Bucket:
    node: ring.HashingNode
    file_slice: FileSlice | None  # None: nothing written to the bucket yet
    eligible: bool  # not in a pending compaction

    @property
    def size(self) -> int:
        return self.file_slice.total_size if self.file_slice else 0

    def planned(self, partition: str) -> PlannedSlice:
        if self.file_slice is not None:
            return PlannedSlice.of(self.file_slice)
        return PlannedSlice(partition, self.node.file_id, None, ())


class _Budget:
    def __init__(self, policy: ClusteringPolicy):
        self.policy = policy
        self.partitions = 0
        self.bytes = 0
        self.groups = 0

    def partitions_full(self) -> bool:
        return self.policy.max_partitions is not None and self.partitions >= self.policy.max_partitions

    def take(self, size: int) -> bool:
        """Whether a group of `size` input bytes fits the plan; counts it when it does."""
        limit = self.policy.max_bytes
        if self.groups and limit is not None and self.bytes + size > limit:
            return False
        self.bytes += size
        self.groups += 1
        return True


def _buckets(
    metadata: ring.HashingMetadata, groups: dict[str, FileGroup], compacting: dict[tuple[str, str], str]
) -> list[_Bucket]:
    """The partition's buckets in ring order, each with its latest file slice."""
    out = []
    for node in metadata.nodes:
        group = groups.get(node.file_id)
        out.append(
            _Bucket(
                node, group.latest_slice() if group else None, (metadata.partition_path, node.file_id) not in compacting
            )
        )
    return out


class _PartitionPlanner:
    """Hudi's consistent-bucket plan strategy for one partition: splits first, then merges of
    what did not split, then sorts of what is left."""

    def __init__(
        self,
        storage: Storage,
        metadata: ring.HashingMetadata,
        buckets: list[_Bucket],
        policy: ClusteringPolicy,
        budget: _Budget,
        spec: SliceReadSpec,
        key_fields: tuple[str, ...],
    ):
        self.storage = storage
        self.metadata = metadata
        self.buckets = buckets
        self.policy = policy
        self.budget = budget
        self.spec = spec
        self.key_fields = key_fields
        self.taken: set[str] = set()
        self.added = 0  # buckets the plan adds to the partition (splits minus merges)

    @property
    def partition(self) -> str:
        return self.metadata.partition_path

    def _group(self, buckets: list[_Bucket], children: Sequence[ring.HashingNode]) -> ClusteringGroup:
        self.taken.update(b.node.file_id for b in buckets)
        return ClusteringGroup(
            self.partition,
            tuple(b.planned(self.partition) for b in buckets),
            tuple(children),
            self.metadata.seq_no,
            sum(b.size for b in buckets),
        )

    def splits(self) -> list[ClusteringGroup]:
        out = []
        for bucket in sorted(self.buckets, key=lambda b: -b.size):
            if len(self.buckets) + self.added >= self.policy.max_buckets:
                break
            if not bucket.eligible or bucket.size <= self.policy.split_threshold_bytes:
                continue
            split_value = self._split_value(bucket)
            children = ring.split_node(self.metadata, bucket.node, split_value)
            if children is None or not self.budget.take(bucket.size):
                continue
            self.added += 1
            out.append(self._group([bucket], children))
        return out

    def _split_value(self, bucket: _Bucket) -> int | None:
        """None: the middle of the range. Else the median hash of the bucket's records, so each
        child gets about half (the middle when that median would leave a child empty)."""
        if self.policy.split_point == SplitPoint.MIDDLE or bucket.file_slice is None:
            return None
        keys = read_file_slice(self.storage, bucket.file_slice, self.spec)[RECORD_KEY]
        if len(keys) < 2:
            return None
        start, end = ring.Router(self.metadata).range_of(bucket.node)
        offsets = np.sort((ring.hash_values(keys, self.key_fields) - start - 1) % HASH_SPACE)
        split = int((start + 1 + offsets[(len(offsets) - 1) // 2]) % HASH_SPACE)
        width = (end - start) % HASH_SPACE or HASH_SPACE
        return split if 0 < (split - start) % HASH_SPACE < width else None

    def merges(self) -> list[ClusteringGroup]:
        """Runs of adjacent buckets whose total stays within the merge threshold, walking the ring
        once from just after a bucket that cannot merge (so a run may wrap past the top)."""
        limit = self.policy.merge_threshold_bytes
        slots = len(self.buckets) + self.added - self.policy.min_buckets
        n = len(self.buckets)
        if n < 2 or slots <= 0:
            return []

        def mergeable(b: _Bucket) -> bool:
            return b.eligible and b.node.file_id not in self.taken and b.size <= limit

        blocked = [i for i, b in enumerate(self.buckets) if not mergeable(b)]
        start = (blocked[0] + 1) if blocked else 0
        out: list[ClusteringGroup] = []
        run: list[_Bucket] = []
        total = 0

        def close_run() -> None:
            nonlocal slots
            if len(run) >= 2 and self.budget.take(total):
                slots -= len(run) - 1
                self.added -= len(run) - 1
                out.append(self._group(list(run), ring.merge_nodes(self.metadata, [b.node for b in run])))

        for bucket in (self.buckets[(start + k) % n] for k in range(n)):
            if run and mergeable(bucket) and total + bucket.size <= limit and len(run) <= slots:
                run.append(bucket)
                total += bucket.size
                continue
            close_run()
            run, total = ([bucket], bucket.size) if mergeable(bucket) else ([], 0)
        close_run()
        return out

    def sorts(self, sorted_instants: set[str]) -> list[ClusteringGroup]:
        """With sort columns: each bucket whose base file is not sorted by them (never clustered, or
        compacted since), rewritten in place."""
        if not self.policy.sort_columns:
            return []
        out = []
        for bucket in self.buckets:
            s = bucket.file_slice
            if (
                not bucket.eligible
                or s is None
                or bucket.node.file_id in self.taken
                or s.base_instant in sorted_instants
            ):
                continue
            if not self.budget.take(bucket.size):
                break
            child = ring.HashingNode(bucket.node.value, ring.new_file_id_prefix(), ring.NodeTag.REPLACE)
            out.append(self._group([bucket], [child]))
        return out


def _sorted_base_instants(timeline: Timeline, sort_columns: tuple[str, ...]) -> set[str]:
    """Instants of completed clusterings whose base files are sorted by `sort_columns`."""
    if not sort_columns:
        return set()
    out = set()
    for commit in timeline.completed(Action.REPLACE_COMMIT):
        try:
            plan = read_clustering_plan(timeline, commit.timestamp)
        except FileNotFoundError:  # the plan of an archived instant
            continue
        if plan is not None and plan.sort_columns == sort_columns:
            out.add(commit.timestamp)
    return out
