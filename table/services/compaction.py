"""Compaction: folding the log files of merge-on-read file slices into new base files.

Two steps, as Hudi's async compaction (implementation notes, "Async Compaction Design"):

- Schedule, on the writer (it holds the lease, so no deltacommit is in flight): a strategy picks
  latest file slices that have log files, and `<c>.compaction.requested` records them as a
  HoodieCompactionPlan. From then on a write to a planned file group starts a slice at base
  instant c (`TableWriter.targets`); until c's base file exists, readers merge those logs with
  the previous slice, so nothing written meanwhile is hidden.
- Execute, in any process and without the writer lease (one executor per plan, by a lease file
  in `.hoodie/.aux/`): each planned slice, base file plus the blocks of completed instants, is
  merged into `<fileId>_<token>_<c>.parquet` keeping every record's meta columns, then
  `<c>.commit` completes. A crashed execution is retried from the plan: the files its markers
  name go first, so a file group never holds two base files at c (hudi-rs rejects that).

A pending compaction is never rolled back: the writer's restart leaves it for an executor.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import failpoints
from table.config.choices import CompactionStrategyKind
from table.errors import CompactionConflictError, InvalidRequestError, WriteInProgressError
from table.file_group.fs_view import FileSlice
from table.file_group.parquet_options import parquet_options, read_parquet
from table.plans.compaction import COMPACTION, PLAN_SCHEMA, PLAN_VERSION, CompactionOperation, read_compaction_plan
from table.plans.pending import pending_clustering_file_groups, pending_compaction_file_groups
from table.read.merge import MergeRule
from table.read.reader import SliceReadSpec, read_file_slices, table_schema_with_meta
from table.schema import COMMIT_TIME, FILE_NAME, RECORD_KEY, avro_schema_json
from table.services.execution import PlanExecution
from table.storage.file_io import Storage
from table.storage.layout import BaseFileName, partition_file_path, write_token
from table.storage.markers import IOType, MarkedFile
from table.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, RuntimeStats, WriteStat
from table.timeline.instant_avro import serialize_plan
from table.timeline.timeline import Instant, Timeline
from table.units import MIB

if TYPE_CHECKING:
    from table.mor_table import MorTable
    from table.write.writer import TableWriter

log = logging.getLogger(__name__)

#: hoodie.compaction.daybased.target.partitions
DEFAULT_RECENT_PARTITIONS = 10


@dataclass(frozen=True)
class CompactionStrategy:
    """Which latest file slices (with log files) a plan takes; Hudi's strategies of the same idea:

    - log_file_count (LogFileNumBased): slices with at least `min_log_files` log files, most first;
    - log_file_size (LogFileSizeBased): at least `min_log_bytes` of log files, largest first;
    - bounded_io (BoundedIO): largest log bytes first;
    - recent_partitions (DayBased): every slice of the `recent_partitions` greatest partition
      paths (names compared without `key=`), 10 when unset.

    The first three stop adding slices once their base + log bytes reach `max_io_bytes`.
    """

    kind: CompactionStrategyKind = CompactionStrategyKind.LOG_FILE_COUNT
    min_log_files: int = 1
    min_log_bytes: int = 0
    max_io_bytes: int = 500 * MIB
    recent_partitions: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", CompactionStrategyKind.parse(self.kind, "compaction strategy"))
        if self.min_log_files < 1 or self.min_log_bytes < 0 or self.max_io_bytes < 1:
            raise InvalidRequestError("min_log_files must be >= 1, min_log_bytes >= 0 and max_io_bytes >= 1")
        if self.recent_partitions is not None and self.recent_partitions < 1:
            raise InvalidRequestError("recent_partitions must be >= 1")

    def select(self, slices: list[FileSlice], partition_paths: list[str]) -> list[FileSlice]:
        """The slices to compact, in plan order (ties by partition path and file id)."""
        slices = sorted(slices, key=lambda s: (s.partition_path, s.file_id))
        if self.kind == CompactionStrategyKind.RECENT_PARTITIONS:
            recent = sorted(partition_paths, key=_partition_values, reverse=True)
            chosen = set(recent[: self.recent_partitions or DEFAULT_RECENT_PARTITIONS])
            return [s for s in slices if s.partition_path in chosen]
        if self.kind == CompactionStrategyKind.LOG_FILE_COUNT:
            ranked = sorted(
                (s for s in slices if len(s.log_files) >= self.min_log_files), key=lambda s: -len(s.log_files)
            )
        elif self.kind == CompactionStrategyKind.LOG_FILE_SIZE:
            ranked = sorted((s for s in slices if _log_bytes(s) >= self.min_log_bytes), key=lambda s: -_log_bytes(s))
        else:
            ranked = sorted(slices, key=lambda s: -_log_bytes(s))
        return self._within_io(ranked)

    def _within_io(self, ranked: list[FileSlice]) -> list[FileSlice]:
        chosen, io_bytes = [], 0
        for s in ranked:
            if io_bytes >= self.max_io_bytes:
                break
            chosen.append(s)
            io_bytes += s.total_size
        return chosen


@dataclass(frozen=True)
class CompactionResult:
    instant: str
    write_stats: list[WriteStat]

    def __str__(self) -> str:
        records = sum(s.num_writes for s in self.write_stats)
        return (
            f"compacted {len(self.write_stats)} file group(s) at {self.instant} into base files of {records} record(s)"
        )


# -- plans on the timeline -----------------------------------------------------------------------


# -- schedule ------------------------------------------------------------------------------------


def schedule_compaction(writer: TableWriter, strategy: CompactionStrategy) -> str | None:
    """Write a compaction plan of the slices `strategy` picks; its instant, or None (and nothing
    written) when no slice qualifies. File groups already in a pending compaction or clustering
    plan are left out."""
    writer.check_held()
    table = writer.table
    timeline = table.timeline()
    writing = timeline.pending("deltacommit")
    if writing:
        raise WriteInProgressError("compaction", writing[0].timestamp)
    planned = pending_compaction_file_groups(timeline) | pending_clustering_file_groups(timeline)
    view = writer.file_system_view(timeline)
    candidates = [s for s in view.latest_slices() if s.log_files and (s.partition_path, s.file_id) not in planned]
    chosen = strategy.select(candidates, view.partition_paths())
    if not chosen:
        return None
    instant = timeline.new_instant_time()
    plan = {
        "operations": [_plan_operation(s) for s in chosen],
        "extraMetadata": None,
        "version": PLAN_VERSION,
    }
    timeline.create_requested(Instant(instant, COMPACTION, "requested"), serialize_plan(PLAN_SCHEMA, plan))
    failpoints.reach("compaction.requested")
    return instant


def _plan_operation(file_slice: FileSlice) -> dict[str, Any]:
    op = CompactionOperation.of_slice(file_slice)
    return {
        "baseInstantTime": op.base_instant,
        "deltaFilePaths": list(op.log_files),
        "dataFilePath": op.base_file,
        "fileId": op.file_id,
        "partitionPath": op.partition_path,
        "metrics": _slice_metrics(file_slice),
        "bootstrapFilePath": None,
    }


def _slice_metrics(file_slice: FileSlice) -> dict[str, float]:
    """CompactionStrategy.captureMetrics: sizes in whole MiB, log size in bytes."""
    base_bytes = file_slice.base_file.size if file_slice.base_file else 0
    log_bytes = _log_bytes(file_slice)
    read_mb = (base_bytes + log_bytes) // MIB
    write_mb = base_bytes // MIB
    return {
        "TOTAL_IO_READ_MB": float(read_mb),
        "TOTAL_IO_WRITE_MB": float(write_mb),
        "TOTAL_IO_MB": float(read_mb + write_mb),
        "TOTAL_LOG_FILES_SIZE": float(log_bytes),
        "TOTAL_LOG_FILES": float(len(file_slice.log_files)),
    }


def _log_bytes(file_slice: FileSlice) -> int:
    return sum(f.size for f in file_slice.log_files)


def _partition_values(partition_path: str) -> str:
    """`year=2024/month=05` -> `2024/05`, as DayBasedCompactionStrategy compares partitions."""
    return "/".join(part.split("=", 1)[-1] for part in partition_path.split("/"))


# -- execute -------------------------------------------------------------------------------------


def executor_lease_path(instant: str) -> str:
    return CompactionExecution.lease_path(instant)


def execute_compaction(table: MorTable, instant: str) -> CompactionResult:
    """Run the pending compaction at `instant` to completion.

    Raises CompactionConflictError when another live executor runs it, ValueError when no
    compaction is pending at `instant`.
    """
    return CompactionResult(instant, CompactionExecution(table, instant).run())


class CompactionExecution(PlanExecution):
    """Each planned slice merged into its base file at the instant; `<c>.commit` completes."""

    service = "compaction"
    action = COMPACTION
    conflict = CompactionConflictError

    def read_plan(self, timeline: Timeline) -> None:
        self.operations, self.plan_metadata = read_compaction_plan(timeline, self.instant)
        self.schema = self.table.schema(timeline)
        self.spec = SliceReadSpec(
            visible_instants=timeline.completed_timestamps().up_to(self.instant),  # the compaction itself is pending
            ordering_field=self.table.config.precombine_field,
            schema=table_schema_with_meta(self.schema),
            merge_rule=MergeRule.of(self.table.config.payload_class),
        )

    def planned_files(self) -> list[MarkedFile]:
        return [
            MarkedFile(op.partition_path, _base_file_name(op, self.instant, task_id), IOType.CREATE)
            for task_id, op in enumerate(self.operations)
        ]

    def write_groups(self) -> Iterator[list[WriteStat]]:
        log.info("compaction %s of %s: %d file groups", self.instant, self.table.name, len(self.operations))
        storage = self.table.storage
        slices = [op.file_slice(storage) for op in self.operations]
        merged = read_file_slices(storage, slices, self.spec)  # neighbouring groups' logs decode together
        for task_id, (op, file_slice) in enumerate(zip(self.operations, slices)):
            started = time.monotonic()
            rows = next(merged)
            yield [_compact(storage, op, file_slice, rows, time.monotonic() - started, self.instant, task_id)]

    def log_progress(self, groups_done: int, stats: list[WriteStat]) -> None:
        log.info(
            "compaction %s of %s: %d of %d file groups done",
            self.instant,
            self.table.name,
            groups_done,
            len(self.operations),
        )

    def completed_metadata(self, stats: list[WriteStat]) -> CommitMetadata:
        extra = {
            SCHEMA_KEY: avro_schema_json(self.schema, self.table.name, with_meta_fields=False),
            **self.plan_metadata,
        }
        return CommitMetadata.for_write(stats, extra, operation_type="COMPACT", compacted=True)

    def on_files_written(self) -> None:
        failpoints.reach("compaction.files_written")

    def on_completed(self) -> None:
        failpoints.reach("compaction.completed")


def _compact(
    storage: Storage,
    op: CompactionOperation,
    file_slice: FileSlice,
    merged: pa.Table,
    scan_seconds: float,
    instant: str,
    task_id: int,
) -> WriteStat:
    """One planned slice's `merged` rows into its base file at `instant`; the file appears whole
    or not at all."""
    scanned = time.monotonic()
    merged = merged.sort_by(RECORD_KEY)
    name = _base_file_name(op, instant, task_id)
    path = partition_file_path(op.partition_path, name)
    rows = merged.set_column(
        merged.schema.get_field_index(FILE_NAME), FILE_NAME, pa.repeat(pa.scalar(name, pa.string()), merged.num_rows)
    )
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, **parquet_options(rows))
    storage.create(path, buffer.getvalue())
    runtime = RuntimeStats(
        total_scan_time=int(scan_seconds * 1000), total_upsert_time=int((time.monotonic() - scanned) * 1000)
    )
    return _write_stat(storage, op, file_slice, rows, path, len(buffer.getvalue()), runtime)


def _base_file_name(op: CompactionOperation, instant: str, task_id: int) -> str:
    return BaseFileName(op.file_id, write_token(task_id, 0, 0), instant).format()


def _write_stat(
    storage: Storage,
    op: CompactionOperation,
    file_slice: FileSlice,
    rows: pa.Table,
    path: str,
    size: int,
    runtime: RuntimeStats,
) -> WriteStat:
    """Records from the logs are those committed after the slice's base instant; an update
    replaces a key of the old base file, an insert does not, a delete removed one."""
    base_keys = _base_record_keys(storage, file_slice)
    in_base = pc.is_in(rows[RECORD_KEY], value_set=base_keys)
    from_logs = pc.greater(rows[COMMIT_TIME], op.base_instant)
    updated = _count(pc.and_(from_logs, in_base))
    inserted = _count(pc.and_(from_logs, pc.invert(in_base)))
    return WriteStat(
        file_id=op.file_id,
        path=path,
        prev_commit=op.base_instant,
        num_writes=rows.num_rows,
        num_deletes=len(base_keys) - _count(in_base),
        num_update_writes=updated,
        num_inserts=inserted,
        total_write_bytes=size,
        partition_path=op.partition_path,
        total_log_files_compacted=len(file_slice.log_files),
        total_log_size_compacted=_log_bytes(file_slice),
        total_updated_records_compacted=updated + inserted,
        file_size_in_bytes=size,
        runtime_stats=runtime,
    )


def _base_record_keys(storage: Storage, file_slice: FileSlice) -> pa.Array:
    if file_slice.base_file is None:
        return pa.array([], pa.string())
    keys = read_parquet(storage.open_input(file_slice.base_file.path), columns=[RECORD_KEY])[RECORD_KEY]
    return keys.combine_chunks()


def _count(mask: pa.ChunkedArray | pa.Array) -> int:
    return pc.sum(mask).as_py() or 0
