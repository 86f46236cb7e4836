"""Clustering with the consistent-hashing index: buckets split, merge and get sorted while
writers keep writing (Hudi RFC-42 and RFC-19).

A bucket-indexed table keeps one file group per bucket, so clustering rewrites buckets:

- split: a bucket whose file slice (base + logs) passed the split threshold becomes two
  children, cut at the middle of its hash range or, with `split_point="distribution"`, at the
  median hash of its records so that each child gets about half;
- merge: adjacent buckets whose combined size stays under the merge threshold become one (the
  bucket index's way of stitching small files);
- sort: with sort columns, a bucket whose base file is not sorted by them yet is rewritten
  sorted, into a new file group of the same hash range.

Three steps:

- Schedule, on the writer (no deltacommit in flight): `<r>.replacecommit.requested` records the
  groups (see `table.services.clustering.plan`). From then on every record routed to a planned
  bucket is written to the old file group and to its child (dual write), the child's logs
  starting a slice at r; readers keep seeing only the old groups.
- Execute, in any process (one executor per plan, by a lease file): every planned slice, as of
  r, is read and routed by the new ring into the children's base files at r (sorted by the sort
  columns, else by record key); the new ring is saved as `<r>.hashing_meta`; `<r>.replacecommit`
  completes naming the replaced groups; then the metadata's `<r>.commit` marker. From the
  completion on, readers see the children (base at r plus the dual-written logs) and writers
  route to them only. A crashed execution is retried from the plan.
- Clean: the replaced groups go with the cleaner's retention, as any replaced file group.

A pending plan can be rolled back by the writer: the plan and every file of its children go.
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.config.choices import SplitPoint
from table.file_group.base_file import parquet_options
from table.file_group.fs_view import FileSlice
from table.index import consistent_hashing as ring
from table.read.reader import SliceReadSpec, read_file_slice, table_schema_with_meta
from table.schema import FILE_NAME, RECORD_KEY, avro_schema_json
from table.services.clustering.plan import (
    ClusteringGroup,
    ClusteringPlan,
    PlannedSlice,
    pending_clustering_plans,
    read_clustering_plan,
)
from table.services.compaction import pending_compaction_file_groups
from table.services.rollback import rollback
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR, BaseFileName, LogFileName, partition_file_path, write_token
from table.storage.lease import WriterLease, acquire_executor_lease
from table.storage.markers import create_marker, delete_markers, marked_files
from table.timeline.commit_metadata import SCHEMA_KEY, ReplaceCommitMetadata, WriteStat
from table.timeline.timeline import Action, Instant, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable
    from table.write.writer import TableWriter

log = logging.getLogger(__name__)

REPLACE_COMMIT = Action.REPLACE_COMMIT
CLUSTER_OPERATION = "CLUSTER"
MIB = 1024 * 1024
PROGRESS_INTERVAL_SECONDS = 10.0
HASH_SPACE = ring.HASH_VALUE_MASK + 1


class ClusteringConflictError(RuntimeError):
    """Another live executor is running the same clustering plan."""


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
            raise ValueError("the merge threshold must be below the split threshold, or buckets would "
                             "merge back what a split made")
        if not 1 <= self.min_buckets <= self.max_buckets:
            raise ValueError(f"need 1 <= min_buckets <= max_buckets, got {self.min_buckets} and {self.max_buckets}")
        if self.max_partitions is not None and self.max_partitions < 1:
            raise ValueError("max_partitions must be >= 1")
        if self.max_bytes is not None and self.max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")


@dataclass(frozen=True)
class ClusteringResult:
    instant: str
    plan: ClusteringPlan
    write_stats: list[WriteStat]

    @property
    def bytes_read(self) -> int:
        return sum(g.input_bytes for g in self.plan.groups)

    @property
    def bytes_written(self) -> int:
        return sum(s.file_size_in_bytes for s in self.write_stats)

    def __str__(self) -> str:
        kinds = [g.kind for g in self.plan.groups]
        counts = ", ".join(f"{kinds.count(k)} {k}(s)" for k in ("split", "merge", "sort") if k in kinds)
        return (f"clustered {counts} at {self.instant}: {len(self.write_stats)} file group(s) of "
                f"{sum(s.num_writes for s in self.write_stats)} record(s), {self.bytes_written} bytes written")


# -- plans on the timeline -----------------------------------------------------------------------


def pending_clusterings(table: MorTable) -> list[str]:
    """Instants of the requested or inflight clustering plans, oldest first."""
    return [p.instant for p in pending_clustering_plans(table.timeline())]


# -- schedule ------------------------------------------------------------------------------------


def schedule_clustering(writer: TableWriter, policy: ClusteringPolicy) -> str | None:
    """Write a clustering plan of the bucket changes `policy` calls for; its instant, or None
    (and nothing written) when no bucket needs one. A partition with a pending plan, and a file
    group in a pending compaction plan, are left out."""
    writer.check_held()
    table = writer.table
    timeline = table.timeline()
    if timeline.pending(Action.DELTA_COMMIT):
        raise ValueError("cannot schedule a clustering while a deltacommit is pending")
    clustering = {p for plan in pending_clustering_plans(timeline) for p in plan.partition_paths}
    compacting = pending_compaction_file_groups(timeline)
    sorted_instants = _sorted_base_instants(timeline, policy.sort_columns)
    view = table.file_system_view(timeline=timeline)
    completed = timeline.completed_timestamps()
    spec = SliceReadSpec(completed, table.config.precombine_field, table_schema_with_meta(table.schema(timeline)),
                         (RECORD_KEY,))
    key_fields = tuple(table.config.record_key_fields)
    groups: list[ClusteringGroup] = []
    budget = _Budget(policy)
    for partition in view.partition_paths():
        if partition in clustering or budget.partitions_full():
            continue
        metadata = ring.load_latest(table.storage, partition, completed.active)
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
    timeline.create_requested(Instant(instant, REPLACE_COMMIT, "requested"), plan.serialize(table.storage))
    failpoints.reach("clustering.requested")
    log.info("clustering %s of %s scheduled: %s", instant, table.name,
             ", ".join(f"{g.kind} {g.partition_path or '(root)'} {'+'.join(g.file_ids)}" for g in groups))
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


def _buckets(metadata: ring.HashingMetadata, groups: dict, compacting: dict) -> list[_Bucket]:
    """The partition's buckets in ring order, each with its latest file slice."""
    out = []
    for node in metadata.nodes:
        group = groups.get(node.file_id)
        out.append(_Bucket(node, group.latest_slice() if group else None,
                           (metadata.partition_path, node.file_id) not in compacting))
    return out


class _PartitionPlanner:
    """Hudi's consistent-bucket plan strategy for one partition: splits first, then merges of
    what did not split, then sorts of what is left."""

    def __init__(self, storage: Storage, metadata: ring.HashingMetadata, buckets: list[_Bucket],
                 policy: ClusteringPolicy, budget: _Budget, spec: SliceReadSpec, key_fields: tuple[str, ...]):
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

    def _group(self, buckets: list[_Bucket], children) -> ClusteringGroup:
        self.taken.update(b.node.file_id for b in buckets)
        return ClusteringGroup(self.partition, tuple(b.planned(self.partition) for b in buckets), tuple(children),
                               self.metadata.seq_no, sum(b.size for b in buckets))

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
            if not bucket.eligible or s is None or bucket.node.file_id in self.taken or s.base_instant in sorted_instants:
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
    for commit in timeline.completed(REPLACE_COMMIT):
        try:
            plan = read_clustering_plan(timeline, commit.timestamp)
        except FileNotFoundError:  # the plan of an archived instant
            continue
        if plan is not None and plan.sort_columns == sort_columns:
            out.add(commit.timestamp)
    return out


# -- execute -------------------------------------------------------------------------------------


def executor_lease_path(instant: str) -> str:
    return f"{METADATA_DIR}/.aux/{instant}.replacecommit.lease"


def execute_clustering(table: MorTable, instant: str) -> ClusteringResult:
    """Run the pending clustering at `instant` to completion.

    Raises ClusteringConflictError when another live executor runs it, ValueError when no
    clustering is pending at `instant`.
    """
    lease = _executor_lease(table, instant)
    try:
        return _execute(table, instant, lease)
    finally:
        lease.release()


def _executor_lease(table: MorTable, instant: str) -> WriterLease:
    return acquire_executor_lease(table.storage, f"clustering {instant}", executor_lease_path(instant),
                                  ClusteringConflictError)


def _execute(table: MorTable, instant: str, lease: WriterLease) -> ClusteringResult:
    storage = table.storage
    timeline = table.timeline()
    requested = Instant(instant, REPLACE_COMMIT, "requested")
    if timeline.contains(requested):
        timeline.transition_to_inflight(requested)
    elif timeline.contains(requested.inflight()):
        _remove_previous_attempt(storage, instant)
    else:
        raise ValueError(f"no pending clustering at {instant} in {table.base_uri}")
    plan = read_clustering_plan(timeline, instant)
    if plan is None:
        raise ValueError(f"replacecommit {instant} of {table.base_uri} has no clustering plan")
    schema = table.schema(timeline)
    completed = timeline.completed_timestamps()
    spec = SliceReadSpec(completed.up_to(instant), table.config.precombine_field, table_schema_with_meta(schema))
    key_fields = tuple(table.config.record_key_fields)
    log.info("clustering %s of %s: %d group(s)", instant, table.name, len(plan.groups))
    stats: list[WriteStat] = []
    rings: list[ring.HashingMetadata] = []
    task_id = 0
    reported = time.monotonic()
    for partition, children in plan.children_by_partition().items():
        current = ring.load_latest(storage, partition, completed.active)
        groups = [g for g in plan.groups if g.partition_path == partition]
        stale = [g for g in groups if current is None or g.seq_no != current.seq_no]
        if stale:
            raise ValueError(f"clustering {instant} was planned on hashing metadata seqNo {stale[0].seq_no} of "
                             f"partition '{partition}', which is now at "
                             f"{current.seq_no if current else 'none'}; roll the plan back")
        new_ring = ring.apply_children(current, children, instant)
        router = ring.Router(new_ring, key_fields)
        for group in groups:
            for stat in _rewrite(storage, group, router, instant, spec, plan.sort_columns, task_id):
                stats.append(stat)
                task_id += 1
            if time.monotonic() - reported >= PROGRESS_INTERVAL_SECONDS:
                log.info("clustering %s of %s: %d file group(s) written", instant, table.name, len(stats))
                reported = time.monotonic()
        ring.save(storage, new_ring)
        rings.append(new_ring)
    replaced = {}
    for group in plan.groups:
        replaced.setdefault(group.partition_path, []).extend(group.file_ids)
    extra = {SCHEMA_KEY: avro_schema_json(schema, table.name, with_meta_fields=False)}
    metadata = replace(ReplaceCommitMetadata.for_write(stats, extra, operation_type=CLUSTER_OPERATION),
                       partition_to_replace_file_ids=replaced)
    failpoints.reach("clustering.files_written")
    lease.check_held()
    timeline.complete(requested.inflight(), metadata.to_json().encode())
    failpoints.reach("clustering.completed")
    for new_ring in rings:
        ring.write_commit_marker(storage, new_ring.partition_path, instant)
    delete_markers(storage, instant)
    return ClusteringResult(instant, plan, stats)


def _remove_previous_attempt(storage: Storage, instant: str) -> None:
    """Delete what a crashed execution wrote, before writing it again."""
    for path in marked_files(storage, instant):
        storage.delete(path)
    delete_markers(storage, instant)


def _planned_slice(storage: Storage, planned: PlannedSlice) -> FileSlice:
    """The slice as planned: exactly these files, whatever was written to the group since."""
    base_instant = (BaseFileName.parse(planned.base_file).instant if planned.base_file
                    else LogFileName.parse(planned.log_files[0]).base_instant if planned.log_files else "")
    return FileSlice.of_files(storage, planned.partition_path, planned.file_id, base_instant,
                              planned.base_file, planned.log_files)


def _rewrite(storage: Storage, group: ClusteringGroup, router: ring.Router, instant: str, spec: SliceReadSpec,
             sort_columns: tuple[str, ...], first_task: int) -> list[WriteStat]:
    """One group's records, as of the plan, into one base file per child (an empty one for a
    child that gets no record, so that every child has the base its dual-written logs attach to)."""
    parts = [read_file_slice(storage, _planned_slice(storage, s), spec) for s in group.slices]
    rows = pa.concat_tables(parts) if parts else spec.schema.empty_table()
    file_ids = router.file_ids(rows[RECORD_KEY]) if rows.num_rows else pa.array([], pa.string())
    unexpected = set(pc.unique(file_ids).to_pylist()) - set(group.child_file_ids)
    if unexpected:
        raise ValueError(f"records of {group.file_ids} route to {sorted(unexpected)}, not to the plan's children")
    stats = []
    for task_id, child in enumerate(group.child_file_ids, start=first_task):
        child_rows = rows.filter(pc.equal(file_ids, child)) if rows.num_rows else rows
        keys = [(c, "ascending") for c in (*sort_columns, RECORD_KEY)]
        stats.append(_write_base(storage, group.partition_path, child, child_rows.sort_by(keys), instant, task_id))
    return stats


def _write_base(storage: Storage, partition: str, file_id: str, rows: pa.Table, instant: str, task_id: int) -> WriteStat:
    name = BaseFileName(file_id, write_token(task_id, 0, 0), instant).format()
    path = partition_file_path(partition, name)
    rows = rows.set_column(rows.schema.get_field_index(FILE_NAME), FILE_NAME,
                           pa.repeat(pa.scalar(name, pa.string()), rows.num_rows))
    create_marker(storage, instant, partition, name, "CREATE")
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, **parquet_options(rows))
    storage.create(path, buffer.getvalue())
    size = len(buffer.getvalue())
    return WriteStat(file_id=file_id, path=path, partition_path=partition, prev_commit="null",
                     num_writes=rows.num_rows, num_inserts=rows.num_rows, num_update_writes=0, num_deletes=0,
                     total_write_bytes=size, file_size_in_bytes=size)


# -- roll back -----------------------------------------------------------------------------------


def rollback_clustering(writer: TableWriter, instant: str) -> str:
    """Remove the pending clustering plan at `instant`, its children's files (dual-written logs,
    base files of a partial execution) and its hashing metadata; returns the rollback's instant.
    The writer's lease keeps deltacommits out meanwhile, the executor lease any execution."""
    writer.check_held()
    table = writer.table
    storage = table.storage
    lease = _executor_lease(table, instant)
    try:
        timeline = table.timeline()
        pending = {i.timestamp: i for i in timeline.pending(REPLACE_COMMIT)}
        if instant not in pending:
            raise ValueError(f"no pending clustering at {instant} in {table.base_uri}")
        plan = read_clustering_plan(timeline, instant)
        files = []
        for partition, file_id in (plan.child_file_groups() if plan else set()):
            files += [e.path for e in storage.list_dir(partition) if not e.is_dir and _file_id_of(e.name) == file_id]
        for partition in (plan.partition_paths if plan else []):
            meta = ring.metadata_path(partition, instant)
            if storage.exists(meta):
                files.append(meta)
        return rollback(storage, timeline, pending[instant], files)
    finally:
        lease.release()


def _file_id_of(name: str) -> str | None:
    if name.endswith(".parquet"):
        parsed = BaseFileName.parse(name)
    elif ".log." in name:
        parsed = LogFileName.parse(name)
    else:
        return None
    return parsed.file_id if parsed else None
