"""Clustering plans on the timeline: what a pending replacecommit rewrites, and how buckets change.

`<r>.replacecommit.requested` holds Hudi's HoodieRequestedReplaceMetadata (operation CLUSTER)
whose HoodieClusteringPlan lists input groups. With the consistent-hashing index each group is
one bucket change, as Hudi's consistent-bucket plan strategy records it: the file slices it
rewrites (one for a split or a sort, several adjacent ones for a merge) and, in the group's
extraMetadata, the partition, the children's hashing nodes (JSON, tagged REPLACE or DELETE)
and the sequence number of the hashing metadata the children apply to.

Readers of this module: writers (dual writes to the children while the plan is pending),
compaction and cleaning (leave planned groups alone), the executor, and `streamer table`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from table.file_group.fs_view import FileSlice
from table.index import consistent_hashing as ring
from table.storage.file_io import Storage
from table.timeline.instant_avro import deserialize_plan, serialize_plan
from table.timeline.timeline import Action, Instant, Timeline
from table.units import MIB

PLAN_SCHEMA = "HoodieRequestedReplaceMetadata"
CLUSTER_OPERATION = "CLUSTER"
PLAN_VERSION = 1
#: Hudi's execution strategy for consistent-hashing tables, named in the plan for Hudi's executors.
EXECUTION_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkConsistentBucketClusteringExecutionStrategy"
SORT_COLUMNS_PARAM = "hoodie.clustering.plan.strategy.sort.columns"
PARTITION_KEY = "clustering.group.partition"
CHILD_NODES_KEY = "clustering.group.child.node"
SEQUENCE_NUMBER_KEY = "clustering.group.sequence.no"


@dataclass(frozen=True)
class PlannedSlice:
    """One input file slice (HoodieSliceInfo): its files by name, whatever was written since."""

    partition_path: str
    file_id: str
    base_file: str | None
    log_files: tuple[str, ...]

    @classmethod
    def of(cls, file_slice: FileSlice) -> PlannedSlice:
        return cls(
            file_slice.partition_path,
            file_slice.file_id,
            file_slice.base_file.name.format() if file_slice.base_file else None,
            tuple(f.name.format() for f in file_slice.sorted_log_files()),
        )


@dataclass(frozen=True)
class ClusteringGroup:
    """One bucket change in one partition: the slices it rewrites and the children replacing them."""

    partition_path: str
    slices: tuple[PlannedSlice, ...]
    children: tuple[ring.HashingNode, ...]
    seq_no: int
    input_bytes: int = 0

    @property
    def kind(self) -> str:
        """split, merge or sort (one bucket rewritten in place)."""
        if len(self.slices) > 1:
            return "merge"
        return "split" if len(self.children) > 1 else "sort"

    @property
    def file_ids(self) -> list[str]:
        return [s.file_id for s in self.slices]

    @property
    def child_file_ids(self) -> list[str]:
        return [c.file_id for c in self.children if c.file_id_prefix]

    @property
    def output_file_groups(self) -> int:
        return len(self.child_file_ids)


@dataclass(frozen=True)
class ClusteringPlan:
    instant: str
    groups: tuple[ClusteringGroup, ...]
    sort_columns: tuple[str, ...] = ()

    @property
    def partition_paths(self) -> list[str]:
        return sorted({g.partition_path for g in self.groups})

    def children_by_partition(self) -> dict[str, list[ring.HashingNode]]:
        out: dict[str, list[ring.HashingNode]] = {}
        for g in self.groups:
            out.setdefault(g.partition_path, []).extend(g.children)
        return out

    def file_groups(self) -> set[tuple[str, str]]:
        """(partition, file id) of every input group: the groups the plan replaces."""
        return {(g.partition_path, f) for g in self.groups for f in g.file_ids}

    def child_file_groups(self) -> set[tuple[str, str]]:
        return {(g.partition_path, f) for g in self.groups for f in g.child_file_ids}

    # ---- Avro, as Hudi writes it ---------------------------------------------------------------

    def serialize(self, storage: Storage) -> bytes:
        strategy_params = {SORT_COLUMNS_PARAM: ",".join(self.sort_columns)} if self.sort_columns else {}
        plan = {
            "inputGroups": [_group_record(storage, g) for g in self.groups],
            "strategy": {"strategyClassName": EXECUTION_STRATEGY, "strategyParams": strategy_params, "version": 1},
            "extraMetadata": {},
            "version": PLAN_VERSION,
            "preserveHoodieMetadata": True,
        }
        return serialize_plan(
            PLAN_SCHEMA,
            {"operationType": CLUSTER_OPERATION, "clusteringPlan": plan, "extraMetadata": {}, "version": PLAN_VERSION},
        )

    @classmethod
    def deserialize(cls, instant: str, content: bytes) -> ClusteringPlan | None:
        """The plan, or None for a replacecommit that is not a clustering (insert overwrite)."""
        requested = deserialize_plan(PLAN_SCHEMA, content) if content else None
        plan = requested["clusteringPlan"] if requested else None
        if not plan:
            return None
        params = (plan.get("strategy") or {}).get("strategyParams") or {}
        sort_columns = tuple(c.strip() for c in (params.get(SORT_COLUMNS_PARAM) or "").split(",") if c.strip())
        return cls(instant, tuple(_group_of(g) for g in plan["inputGroups"] or ()), sort_columns)


def _group_record(storage: Storage, group: ClusteringGroup) -> dict[str, Any]:
    def full(name: str) -> str:
        return storage.full_path(f"{group.partition_path}/{name}" if group.partition_path else name)

    read_mb = group.input_bytes // MIB
    return {
        "slices": [
            {
                "dataFilePath": full(s.base_file) if s.base_file else "",
                "deltaFilePaths": [full(n) for n in s.log_files],
                "fileId": s.file_id,
                "partitionPath": s.partition_path,
                "bootstrapFilePath": "",
                "version": 1,
            }
            for s in group.slices
        ],
        "metrics": {
            "TOTAL_IO_READ_MB": float(read_mb),
            "TOTAL_IO_WRITE_MB": float(read_mb),
            "TOTAL_IO_MB": float(2 * read_mb),
            "TOTAL_LOG_FILES": float(sum(len(s.log_files) for s in group.slices)),
        },
        "numOutputFileGroups": group.output_file_groups,
        "extraMetadata": {
            PARTITION_KEY: group.partition_path,
            CHILD_NODES_KEY: ring.children_to_json(group.children),
            SEQUENCE_NUMBER_KEY: str(group.seq_no),
        },
        "version": 1,
    }


def _group_of(record: dict[str, Any]) -> ClusteringGroup:
    extra = record.get("extraMetadata") or {}
    slices = tuple(
        PlannedSlice(
            s["partitionPath"] or "",
            s["fileId"],
            _file_name(s["dataFilePath"]) if s["dataFilePath"] else None,
            tuple(_file_name(p) for p in s["deltaFilePaths"] or ()),
        )
        for s in record["slices"] or ()
    )
    partition = extra.get(PARTITION_KEY, slices[0].partition_path if slices else "")
    metrics = record.get("metrics") or {}
    return ClusteringGroup(
        partition,
        slices,
        tuple(ring.children_from_json(extra.get(CHILD_NODES_KEY))),
        int(extra.get(SEQUENCE_NUMBER_KEY) or 0),
        int(metrics.get("TOTAL_IO_READ_MB", 0)) * MIB,
    )


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# ---- plans on the timeline ---------------------------------------------------------------------


def read_clustering_plan(timeline: Timeline, instant: str) -> ClusteringPlan | None:
    return ClusteringPlan.deserialize(
        instant, timeline.read_content(Instant(instant, Action.REPLACE_COMMIT, "requested"))
    )
