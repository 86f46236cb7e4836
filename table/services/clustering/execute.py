"""Clustering execution with the consistent-hashing index: a pending plan's buckets rewritten into
their children (Hudi RFC-42 and RFC-19).

`table.services.clustering.planner` schedules the plan, `<r>.replacecommit.requested`; writers
dual-write to the children while it is pending. Then:

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
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.errors import ClusteringConflictError, HashingMetadataError, TimelineStateError
from table.file_group.fs_view import FileSlice
from table.file_group.parquet_options import parquet_options
from table.index import consistent_hashing as ring
from table.plans.clustering import (
    CLUSTER_OPERATION,
    ClusteringGroup,
    ClusteringPlan,
    PlannedSlice,
    read_clustering_plan,
)
from table.read.merge import MergeRule
from table.read.reader import SliceReadSpec, read_file_slices, table_schema_with_meta
from table.schema import FILE_NAME, RECORD_KEY, avro_schema_json
from table.services.execution import PlanExecution
from table.storage.file_io import Storage
from table.storage.layout import BaseFileName, LogFileName, partition_file_path, write_token
from table.storage.markers import IOType, MarkedFile
from table.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, ReplaceCommitMetadata, WriteStat
from table.timeline.rollback import rollback
from table.timeline.timeline import Action, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable
    from table.write.writer import TableWriter

log = logging.getLogger(__name__)

REPLACE_COMMIT = Action.REPLACE_COMMIT


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
        return (
            f"clustered {counts} at {self.instant}: {len(self.write_stats)} file group(s) of "
            f"{sum(s.num_writes for s in self.write_stats)} record(s), {self.bytes_written} bytes written"
        )


# -- execute -------------------------------------------------------------------------------------


def executor_lease_path(instant: str) -> str:
    return ClusteringExecution.lease_path(instant)


def execute_clustering(table: MorTable, instant: str) -> ClusteringResult:
    """Run the pending clustering at `instant` to completion.

    Raises ClusteringConflictError when another live executor runs it, ValueError when no
    clustering is pending at `instant`.
    """
    execution = ClusteringExecution(table, instant)
    stats = execution.run()
    return ClusteringResult(instant, execution.plan, stats)


class ClusteringExecution(PlanExecution):
    """Each planned group's slices rewritten into its children's base files at the instant, each
    partition's new ring saved; `<r>.replacecommit` completes naming the replaced groups, then the
    rings' commit markers are written."""

    service = "clustering"
    action = REPLACE_COMMIT
    conflict = ClusteringConflictError

    def read_plan(self, timeline: Timeline) -> None:
        plan = read_clustering_plan(timeline, self.instant)
        if plan is None:
            raise TimelineStateError(f"replacecommit {self.instant} of {self.table.base_uri} has no clustering plan")
        self.plan = plan
        self.schema = self.table.schema(timeline)
        self.completed = timeline.completed_timestamps()
        self.spec = SliceReadSpec(
            self.completed.up_to(self.instant),
            self.table.config.precombine_field,
            table_schema_with_meta(self.schema),
            merge_rule=MergeRule.of(self.table.config.payload_class),
        )
        self.rings: list[ring.HashingMetadata] = []

    def planned_files(self) -> list[MarkedFile]:
        """The children's base files, one task id each in plan order, as `write_groups` writes them."""
        children = [
            (g.partition_path, child)
            for partition in self.plan.children_by_partition()
            for g in self.plan.groups
            if g.partition_path == partition
            for child in g.child_file_ids
        ]
        return [
            MarkedFile(partition, _base_file_name(child, self.instant, task_id), IOType.CREATE)
            for task_id, (partition, child) in enumerate(children)
        ]

    def write_groups(self) -> Iterator[list[WriteStat]]:
        storage, instant, plan = self.table.storage, self.instant, self.plan
        key_fields = tuple(self.table.config.record_key_fields)
        log.info("clustering %s of %s: %d group(s)", instant, self.table.name, len(plan.groups))
        task_id = 0
        for partition, children in plan.children_by_partition().items():
            current = ring.load_latest(storage, partition, self.completed.active)
            groups = [g for g in plan.groups if g.partition_path == partition]
            stale = [g for g in groups if current is None or g.seq_no != current.seq_no]
            if current is None or stale:  # each partition has groups: no ring leaves them all stale
                raise TimelineStateError(
                    f"clustering {instant} was planned on hashing metadata seqNo {stale[0].seq_no} of "
                    f"partition '{partition}', which is now at "
                    f"{current.seq_no if current else 'none'}; roll the plan back"
                )
            new_ring = ring.apply_children(current, children, instant)
            router = ring.Router(new_ring, key_fields)
            for group in groups:
                stats = _rewrite(storage, group, router, instant, self.spec, plan.sort_columns, task_id)
                task_id += len(stats)
                yield stats
            ring.save(storage, new_ring)
            self.rings.append(new_ring)

    def log_progress(self, groups_done: int, stats: list[WriteStat]) -> None:
        log.info("clustering %s of %s: %d file group(s) written", self.instant, self.table.name, len(stats))

    def completed_metadata(self, stats: list[WriteStat]) -> CommitMetadata:
        replaced: dict[str, list[str]] = {}
        for group in self.plan.groups:
            replaced.setdefault(group.partition_path, []).extend(group.file_ids)
        extra = {SCHEMA_KEY: avro_schema_json(self.schema, self.table.name, with_meta_fields=False)}
        return replace(
            ReplaceCommitMetadata.for_write(stats, extra, operation_type=CLUSTER_OPERATION),
            partition_to_replace_file_ids=replaced,
        )

    def on_files_written(self) -> None:
        failpoints.reach("clustering.files_written")

    def on_completed(self) -> None:
        failpoints.reach("clustering.completed")
        for new_ring in self.rings:
            ring.write_commit_marker(self.table.storage, new_ring.partition_path, self.instant)


def _planned_slice(storage: Storage, planned: PlannedSlice) -> FileSlice:
    """The slice as planned: exactly these files, whatever was written to the group since."""
    base_instant = (
        BaseFileName.of(planned.base_file).instant
        if planned.base_file
        else LogFileName.of(planned.log_files[0]).base_instant
        if planned.log_files
        else ""
    )
    return FileSlice.of_files(
        storage, planned.partition_path, planned.file_id, base_instant, planned.base_file, planned.log_files
    )


def _rewrite(
    storage: Storage,
    group: ClusteringGroup,
    router: ring.Router,
    instant: str,
    spec: SliceReadSpec,
    sort_columns: tuple[str, ...],
    first_task: int,
) -> list[WriteStat]:
    """One group's records, as of the plan, into one base file per child (an empty one for a
    child that gets no record, so that every child has the base its dual-written logs attach to)."""
    parts = list(read_file_slices(storage, [_planned_slice(storage, s) for s in group.slices], spec))
    rows = pa.concat_tables(parts) if parts else spec.schema.empty_table()
    file_ids = router.file_ids(rows[RECORD_KEY]) if rows.num_rows else pa.array([], pa.string())
    unexpected = set(pc.unique(file_ids).to_pylist()) - set(group.child_file_ids)
    if unexpected:
        raise HashingMetadataError(
            f"records of {group.file_ids} route to {sorted(unexpected)}, not to the plan's children"
        )
    stats = []
    for task_id, child in enumerate(group.child_file_ids, start=first_task):
        child_rows = rows.filter(pc.equal(file_ids, child)) if rows.num_rows else rows
        keys = [(c, "ascending") for c in (*sort_columns, RECORD_KEY)]
        stats.append(_write_base(storage, group.partition_path, child, child_rows.sort_by(keys), instant, task_id))
    return stats


def _write_base(
    storage: Storage, partition: str, file_id: str, rows: pa.Table, instant: str, task_id: int
) -> WriteStat:
    name = _base_file_name(file_id, instant, task_id)
    path = partition_file_path(partition, name)
    rows = rows.set_column(
        rows.schema.get_field_index(FILE_NAME), FILE_NAME, pa.repeat(pa.scalar(name, pa.string()), rows.num_rows)
    )
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, **parquet_options(rows))
    storage.create(path, buffer.getvalue())
    size = len(buffer.getvalue())
    return WriteStat(
        file_id=file_id,
        path=path,
        partition_path=partition,
        prev_commit="null",
        num_writes=rows.num_rows,
        num_inserts=rows.num_rows,
        num_update_writes=0,
        num_deletes=0,
        total_write_bytes=size,
        file_size_in_bytes=size,
    )


def _base_file_name(file_id: str, instant: str, task_id: int) -> str:
    return BaseFileName(file_id, write_token(task_id, 0, 0), instant).format()


# -- roll back -----------------------------------------------------------------------------------


def rollback_clustering(writer: TableWriter, instant: str) -> str:
    """Remove the pending clustering plan at `instant`, its children's files (dual-written logs,
    base files of a partial execution) and its hashing metadata; returns the rollback's instant.
    The writer's lease keeps deltacommits out meanwhile, the executor lease any execution."""
    writer.check_held()
    table = writer.table
    storage = table.storage
    lease = ClusteringExecution(table, instant).acquire_lease()
    try:
        timeline = table.timeline()
        pending = {i.timestamp: i for i in timeline.pending(REPLACE_COMMIT)}
        if instant not in pending:
            raise TimelineStateError(f"no pending clustering at {instant} in {table.base_uri}")
        plan = read_clustering_plan(timeline, instant)
        files = []
        for partition, file_id in plan.child_file_groups() if plan else set():
            files += [e.path for e in storage.list_dir(partition) if not e.is_dir and _file_id_of(e.name) == file_id]
        for partition in plan.partition_paths if plan else []:
            meta = ring.metadata_path(partition, instant)
            if storage.exists(meta):
                files.append(meta)
        return rollback(storage, timeline, pending[instant], files)
    finally:
        lease.release()


def _file_id_of(name: str) -> str | None:
    parsed: BaseFileName | LogFileName | None = None
    if name.endswith(".parquet"):
        parsed = BaseFileName.parse(name)
    elif ".log." in name:
        parsed = LogFileName.parse(name)
    return parsed.file_id if parsed else None
