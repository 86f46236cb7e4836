"""The `foreachBatch` sink: each micro-batch of Kafka records becomes one deltacommit, exactly once.

Per batch: decode (bad records fail the batch, are skipped, or go to the quarantine table, as
the table's policy says), apply the SQL transform, upsert through the table engine, and complete
the commit with the Kafka offsets consumed and the streaming query id + batch id. Spark replays
the last batch after a crash; a replay of a batch the table already holds is skipped, and Spark
only records a batch as done after this sink has returned, that is after the commit.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from streamer.batch_tally import BatchTally, BatchTallyParam
from streamer.checkpoint import (
    EMPTY_CHECKPOINT,
    HUDI_STREAMER_CHECKPOINT_KEY,
    StreamCheckpoint,
    checkpoint_key,
    planned_offsets,
    planned_ranges,
    table_checkpoint,
)
from streamer.config.choices import BadRecordPolicy
from streamer.decode.columns import ERROR, EVOLVING, RAW_KEY, RAW_VALUE, SKIPPED
from streamer.decode.debezium import TRUNCATE
from streamer.decode.evolution import VALUE_SCHEMA_KEY, SchemaEvolution
from streamer.decode.record_decoder import RecordDecoder
from streamer.decode_step import DecodeStep
from streamer.driver_write import DriverWrites, SourcePlan, write_in_driver
from streamer.errors import BadRecordError, SchemaEvolutionError, StopRequestedError, TableWriteError
from streamer.kafka.options import SourceOptions
from streamer.kafka.planning import OffsetRange
from streamer.quarantine import QuarantineTable
from table import DeltaCommit, LayoutStats, MorTable, TableWriter, WriteConflictError, reach_failpoint
from table.spark import DataFrameWriteResult, released_accumulator, write_dataframe

log = logging.getLogger(__name__)

BATCH_STATS_KEY = "mor.streamer.batch"
#: extraMetadata key of a commit that did not go on from the table's offsets because Kafka no
#: longer held them (`source.fail_on_data_loss: false`): [{topic, partition, from, to}].
DATA_LOSS_KEY = "mor.streamer.data_loss"


#: Rounds of schema evolution one batch may take before the batch fails.
MAX_EVOLUTIONS = 3
#: The query id an initial load's commit records: no streaming query wrote it.
INITIAL_LOAD_QUERY_ID = "initial-load"


#: OS errors of storage that refuses writes, as opposed to any other failure of a batch.
_REFUSED_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}
_OS_ERROR_LINE = re.compile(r"^\w*Error: (\[Errno (\d+)\] .*)$", re.MULTILINE)


def refused_write(error: BaseException) -> str | None:
    """The OS error of a write the storage refused, raised here or in a Spark task (where only
    its text comes back); None for any other failure."""
    if isinstance(error, OSError) and error.errno in _REFUSED_WRITE_ERRNOS:
        return str(error)
    for match in reversed(list(_OS_ERROR_LINE.finditer(str(error)))):
        if int(match.group(2)) in _REFUSED_WRITE_ERRNOS:
            return match.group(1)
    return None


@dataclass(frozen=True)
class OffsetJumpCheck:
    """What the sink needs to tell Kafka's data loss apart from a deliberate start elsewhere."""

    earliest_offsets: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]
    started_from_table: bool  # this run's query began at the table's offsets (no Spark checkpoint)


@dataclass
class BatchReport:
    """What one micro-batch did, for the log line and for listeners."""

    table: str
    batch_id: int
    records: int = 0
    upserted: int = 0
    deleted: int = 0
    files_written: int = 0
    bad: int = 0
    bad_policy: BadRecordPolicy = BadRecordPolicy.FAIL
    ignored: dict[str, int] = field(default_factory=dict)  # records that write nothing, by kind
    instant: str | None = None
    replayed: bool = False
    seconds: float = 0.0
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)  # topic -> records behind, after this batch
    freshness: tuple[float, float] | None = None  # seconds from the Kafka timestamps of its newest
    # and oldest record to the commit that shows them
    phases: dict[str, float] = field(default_factory=dict)  # see `_phases`
    committed_at: float = 0.0  # when its commit completed, seconds since the epoch
    layout: LayoutStats | None = None  # the buckets' latest slices after its commit
    conflicts: int = 0  # its writes refused for another writer's commit, then written again
    by_driver: bool = False  # written by the driver itself (`streamer.driver_write`), not by Spark's tasks

    def phase_line(self) -> str:
        phases = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.phases.items())
        fresh = f"; freshness {self.freshness[0]:.2f}s to {self.freshness[1]:.2f}s" if self.freshness else ""
        return f"{self.table} {self.what} phases: {phases}{fresh}"

    @property
    def what(self) -> str:
        return "initial load" if self.batch_id < 0 else f"batch {self.batch_id}"

    def line(self) -> str:
        if self.replayed:
            return f"{self.table} {self.what}: already committed by this query, skipped (replay)"
        dropped = "quarantined" if self.bad_policy == BadRecordPolicy.QUARANTINE else "skipped"
        bad = f", {self.bad:,} {dropped}" if self.bad else ""
        ignored = (
            ", ignored: " + ", ".join(f"{n:,} {kind}" for kind, n in sorted(self.ignored.items()))
            if self.ignored
            else ""
        )
        lag = "; lag " + ", ".join(f"{t} {n:,}" for t, n in sorted(self.lag.items())) if self.lag else ""
        return (
            f"{self.table} {self.what}: {self.records:,} records, {self.upserted:,} upserted, "
            f"{self.deleted:,} deleted{bad}{ignored}, {self.files_written} files -> deltacommit "
            f"{self.instant} in {self.seconds:.2f}s{' by the driver' if self.by_driver else ''}{lag}"
        )


@dataclass
class BatchTotals:
    """The sink's batches summed as they complete: a job runs for weeks, so its reports are
    logged and dropped, not kept."""

    batches: int = 0
    records: int = 0
    bad: int = 0
    last_instant: str | None = None
    failed: BatchReport | None = None  # the batch that failed, with its counts when it was read

    def add(self, report: BatchReport) -> None:
        if report.replayed:
            return
        self.batches += 1
        self.records += report.records
        self.bad += report.bad
        self.last_instant = report.instant


@dataclass(frozen=True)
class SinkSettings:
    table_name: str
    value_columns: tuple[str, ...]
    on_error: BadRecordPolicy
    transform: str | None
    checkpoint_location: str | None = None  # the query's: where Spark logs each batch's offsets
    source: SourceOptions | None = None  # `kafka-arrow`'s: the sink reads the offset ranges it plans
    conflict_retries: int = 0  # under optimistic concurrency: a batch refused for a conflict, written again
    checkpoint_id: str | None = None  # names the stream's checkpoint when several feed the table
    driver_writes: DriverWrites = field(default_factory=DriverWrites)  # the batches the driver writes itself


class UpsertSink:
    """The foreachBatch function of one table's streaming query; its batches are Kafka records
    (key, value, topic, partition, offset, timestamp), decoded in the write's single pass."""

    def __init__(
        self,
        settings: SinkSettings,
        table: MorTable,
        writer: TableWriter,
        decoder: RecordDecoder,
        quarantine: QuarantineTable | None = None,
        after_commit: Callable[[], None] | None = None,
        progress: Callable[[StreamCheckpoint], dict[str, int]] | None = None,
        evolution: SchemaEvolution | None = None,
        offset_jumps: OffsetJumpCheck | None = None,
        observe: Callable[[BatchReport, float], None] | None = None,
    ):
        self.settings = settings
        self.observe = observe  # each committed batch's report and its seconds, services included
        self.offset_jumps = offset_jumps
        self.evolution = evolution
        self.table = table
        self.writer = writer
        self.decoder = decoder
        self.quarantine = quarantine
        self.after_commit = after_commit
        self.progress = progress
        self.totals = BatchTotals()
        self.failure: BaseException | None = None
        self._query_id: str | None = None
        self._bound = threading.Event()
        self._busy = threading.Lock()
        self._stopping = threading.Event()
        self._checkpoint = table_checkpoint(table, checkpoint_id=settings.checkpoint_id) or EMPTY_CHECKPOINT

    @property
    def checkpoint(self) -> StreamCheckpoint:
        """What the table's last commit says about the stream."""
        return self._checkpoint

    def bind(self, query_id: str) -> None:
        """Called once the query has started: its id is part of every commit."""
        self._query_id = query_id
        self._bound.set()

    def quiesce(self, timeout: float) -> bool:
        """Let the batch in progress finish and refuse new ones; False if it did not finish in
        time (the caller then abandons it: nothing partial ever becomes visible)."""
        self._stopping.set()
        acquired = self._busy.acquire(timeout=timeout)
        if acquired:
            self._busy.release()
        return acquired

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        ends = self._planned(batch_id)
        location = self.settings.checkpoint_location
        ranges = None
        if ends is not None and location and self.settings.driver_writes.max_records:
            ranges = planned_ranges(location, batch_id, ends)
        self.take(df, batch_id, ends, ranges)

    def take(
        self,
        df: DataFrame,
        batch_id: int,
        planned_ends: dict[str, dict[int, int]] | None,
        ranges: list[OffsetRange] | None = None,
    ) -> None:
        """Write one micro-batch of the query this sink is bound to: `df` holds the table's
        records (or offset ranges), `planned_ends` how far it reads each partition (None: as far
        as its records say), `ranges` the offset ranges `df` holds, when known without it."""
        self._bound.wait()
        with self._busy:
            if self._stopping.is_set():
                # Returning would let Spark record the batch as done; raising leaves it to be
                # replayed by the next run.
                self.failure = StopRequestedError(
                    f"{self.settings.table_name}: stopping, batch {batch_id} left for the next run"
                )
                raise self.failure
            started = time.monotonic()
            report = self._reported(
                lambda: self._process(df, self._query_id or "", batch_id, planned_ends, ranges), f"batch {batch_id}"
            )
            if report.replayed:
                return
            if self.after_commit is not None:
                services_started = time.monotonic()
                self.after_commit()
                report.phases["services"] = time.monotonic() - services_started
            log.debug(report.phase_line())
            if self.observe is not None:
                self.observe(report, time.monotonic() - started)

    def load(self, df: DataFrame, ends: dict[str, dict[int, int]]) -> BatchReport:
        """Write a backlog that one batch query read up to `ends` (the initial load of an empty
        table) as one deltacommit, whose checkpoint says to go on from `ends`."""
        with self._busy:
            started = time.monotonic()
            report = self._reported(lambda: self._process(df, INITIAL_LOAD_QUERY_ID, -1, ends), "initial load")
            if self.after_commit is not None:
                self.after_commit()
            if self.observe is not None:
                self.observe(report, time.monotonic() - started)
            return report

    def _planned(self, batch_id: int) -> dict[str, dict[int, int]] | None:
        location = self.settings.checkpoint_location
        return planned_offsets(location, batch_id) if location else None

    def _reported(self, process: Callable[[], BatchReport], what: str) -> BatchReport:
        """Run one write, turning storage that refuses writes into `TableWriteError`, and log it."""
        try:
            report = process()
        except BaseException as e:
            refused = refused_write(e)
            if refused is None:
                self.failure = e
                raise
            self.failure = TableWriteError(
                f"{self.settings.table_name}: {what} could not be written to {self.table.base_uri}: "
                f"{refused}; nothing of it was committed, and the next run rolls back what it left"
            )
            raise self.failure from e
        self.totals.add(report)
        log.info(report.line())
        return report

    def _process(
        self,
        df: DataFrame,
        query_id: str,
        batch_id: int,
        planned_ends: dict[str, dict[int, int]] | None = None,
        ranges: list[OffsetRange] | None = None,
    ) -> BatchReport:
        started = time.monotonic()
        s = self.settings
        report = BatchReport(s.table_name, batch_id, bad_policy=s.on_error)
        if self._checkpoint.covers(query_id, batch_id):
            report.replayed = True
            return report
        self.totals.failed = report  # until it is committed
        plan = None
        if not s.transform and s.source is not None and s.driver_writes.max_records:
            if ranges is None:  # only the source's plan says this batch's ranges: asked first
                plan = SourcePlan(df)
                ranges = list(plan.ranges)
            if not s.driver_writes.takes(ranges):
                plan = None
            elif plan is None:
                plan = SourcePlan(df, ranges)
        report.by_driver = plan is not None
        while True:
            commit, written, tally = self._write(df, plan.ranges if plan is not None else None)
            planned = time.monotonic() - written.wall_seconds
            try:
                disagrees = plan is not None and not plan.agrees()
                if not disagrees:
                    read, checkpoint, extra = self._commit_metadata(report, tally, query_id, batch_id, planned_ends)
            except BaseException:
                _abandon_quietly(commit)
                raise
            if plan is not None and disagrees:
                _abandon_quietly(commit)
                log.warning(
                    "%s %s: the source planned other offset ranges than Spark's offset log says (%s); "
                    "writing it again through Spark's tasks",
                    s.table_name,
                    report.what,
                    ", ".join(f"{t}[{p}] {a}-{b}" for (t, p), a, b in plan.ranges),
                )
                report.by_driver, plan = False, None
                continue
            committing = time.monotonic()
            try:
                instant = commit.complete(written.stats, extra)  # a failure here leaves it to the next run's rollback
                break
            except WriteConflictError as conflict:  # rolled back: its records are read and written again
                if report.conflicts >= s.conflict_retries:
                    raise
                report.conflicts += 1
                log.warning(
                    "%s %s: %s; writing it again (%d of %d)",
                    s.table_name,
                    report.what,
                    conflict,
                    report.conflicts,
                    s.conflict_retries,
                )
        self.totals.failed = None
        reach_failpoint("sink.batch_committed")
        report.phases = _phases(written, tally, planned - started, time.monotonic() - committing)
        self._count_writes(report)
        self._checkpoint = checkpoint
        report.instant = instant
        report.offsets = read
        report.committed_at = time.time()
        report.layout = self.writer.last_layout
        stamps = tally.timestamps()
        if stamps is not None:
            report.freshness = (report.committed_at - stamps[1] / 1e6, report.committed_at - stamps[0] / 1e6)
        report.seconds = time.monotonic() - started
        if self.progress is not None:
            report.lag = self.progress(self._checkpoint)
            report.phases["progress"] = time.monotonic() - started - report.seconds
        return report

    def _commit_metadata(
        self,
        report: BatchReport,
        tally: BatchTally,
        query_id: str,
        batch_id: int,
        planned_ends: dict[str, dict[int, int]] | None,
    ) -> tuple[dict[str, dict[int, int]], StreamCheckpoint, dict[str, str]]:
        """What the batch read, the checkpoint after it and its commit's extra metadata; bad records
        go to the quarantine table on the way (an upsert by their offsets: once however often)."""
        s = self.settings
        report.records, report.bad, report.ignored = tally.records, tally.bad, tally.skipped
        read = tally.offsets_read() if planned_ends is None else planned_ends
        if report.bad:
            self._handle_bad(tally, query_id, batch_id, report.what)
        if report.ignored.get(TRUNCATE):
            log.warning(
                "%s %s: %d truncate event(s) ignored: the table keeps the rows the database "
                "truncated (a mirror deletes row by row; see 'Mirroring a database' in the docs)",
                s.table_name,
                report.what,
                report.ignored[TRUNCATE],
            )
        checkpoint = self._checkpoint.advanced(query_id, batch_id, read)
        stats = {"records": report.records, "bad": report.bad, "badPolicy": s.on_error}
        if report.ignored:
            stats["ignored"] = report.ignored
        extra = {checkpoint_key(s.checkpoint_id): checkpoint.to_json(), BATCH_STATS_KEY: json.dumps(stats)}
        if self.evolution is not None:
            extra[VALUE_SCHEMA_KEY] = self.evolution.reader_schema
        lost = self._lost_offsets(query_id, tally.first_offsets())
        if lost:
            extra[DATA_LOSS_KEY] = json.dumps(lost)
            log.warning(
                "%s %s: Kafka no longer held the offsets the table goes on from; went on "
                "from the earliest it holds (source.fail_on_data_loss is false): %s",
                s.table_name,
                report.what,
                "; ".join(f"{j['topic']}[{j['partition']}] {j['from']} -> {j['to']}" for j in lost),
            )
        hudi_checkpoint = checkpoint.hudi_streamer_checkpoint()
        if hudi_checkpoint and not s.checkpoint_id:  # Hudi's key has room for one stream
            extra[HUDI_STREAMER_CHECKPOINT_KEY] = hudi_checkpoint
        return read, checkpoint, extra

    def _write(
        self, df: DataFrame, driver_ranges: Sequence[OffsetRange] | None
    ) -> tuple[DeltaCommit, DataFrameWriteResult, BatchTally]:
        """Decode, key, route and write the batch in one pass, by the driver when given the
        ranges it reads; again, with the evolved reader schema, when records of a newer writer
        schema evolve the table's schema."""
        for _ in range(MAX_EVOLUTIONS + 1):
            decoder = self.evolution.decoder if self.evolution is not None else self.decoder
            with released_accumulator(df.sparkSession.sparkContext, BatchTally(), BatchTallyParam()) as tally:
                commit, written = self._write_decoded(df, driver_ranges, decoder, tally)
            evolving = tally.value.evolving
            if not evolving:
                return commit, written, tally.value
            _abandon_quietly(commit)
            if self.evolution is None or not self.evolution.evolve(
                evolving, tally.value.writer_schemas, tally.value.evolving_at
            ):
                break
        raise SchemaEvolutionError(
            f"{self.settings.table_name}: records of writer schema id(s) "
            f"{sorted(evolving)} evolve the table's schema, but it could not be evolved"
        )

    def _write_decoded(
        self, df: DataFrame, driver_ranges: Sequence[OffsetRange] | None, decoder: RecordDecoder, tally
    ) -> tuple[DeltaCommit, DataFrameWriteResult]:
        """A deltacommit begun and its files written: by the driver (`streamer.driver_write`)
        when given the ranges it reads, else by Spark's tasks. One whose write fails stays
        inflight: tasks Spark is still cancelling may yet write files, and the next run's
        rollback deletes whatever its markers name."""
        keep_bad_rows = self.settings.on_error == BadRecordPolicy.QUARANTINE
        value_columns = self.evolution.value_columns if self.evolution is not None else self.settings.value_columns
        transform = self.settings.transform
        if not transform:
            step = DecodeStep(decoder, value_columns, keep_bad_rows, tally, self.settings.source)
            schema = pa.schema([decoder.output_schema.field(c) for c in value_columns])
            commit = self.writer.begin_delta_commit(self.writer.check_schema(schema))
            with commit.writing():
                if driver_ranges is not None:
                    threads = self.settings.driver_writes.threads
                    return commit, write_in_driver(commit, driver_ranges, step, schema, threads)
                return commit, write_dataframe(commit, df, step, planned=self.settings.source is not None)
        decoded_schema = pa.schema(
            [f for f in decoder.output_schema if f.name not in (ERROR, RAW_KEY, RAW_VALUE, EVOLVING, SKIPPED)]
        )
        step = DecodeStep(decoder, tuple(decoded_schema.names), keep_bad_rows, tally, self.settings.source)
        decoded = df.mapInArrow(step.decoded_batches, from_arrow_schema(decoded_schema))
        decoded.createOrReplaceTempView("source")  # the batch's own session: queries never share it
        rows = decoded.sparkSession.sql(transform)
        incoming = to_arrow_schema(rows.schema, timezone="UTC", prefers_large_types=False)
        commit = self.writer.begin_delta_commit(self.writer.check_schema(incoming))
        with commit.writing():
            return commit, write_dataframe(commit, rows)

    def _lost_offsets(self, query_id: str, first: dict[tuple[str, int], int]) -> list[dict]:
        """Partitions this batch did not read from the table's next offset because Kafka no
        longer held it: `from` the offset the table wanted, `to` the first one read. A batch
        going back (a topic recreated) always is; one going forward is when the wanted offset is
        below the partition's earliest now (not a gap such as a transaction marker)."""
        check = self.offset_jumps
        if check is None or (self._checkpoint.query_id != query_id and not check.started_from_table):
            return []  # a new query that started where its config says, not at the table's offsets
        wanted = {(t, p): o for t, parts in self._checkpoint.offsets.items() for p, o in parts.items()}
        jumps = {
            tp: (wanted[tp], read_from) for tp, read_from in first.items() if tp in wanted and read_from != wanted[tp]
        }
        ahead = [tp for tp, (want, got) in jumps.items() if got > want]
        earliest: dict[tuple[str, int], int] = {}
        if ahead:
            try:
                earliest = check.earliest_offsets(ahead)
            except Exception as e:  # noqa: BLE001 - the batch is good; only the record of the jump is at stake
                log.warning(
                    "%s: could not ask Kafka whether offsets were skipped at %s: %s",
                    self.settings.table_name,
                    sorted(ahead),
                    e,
                )
        return [
            {"topic": t, "partition": p, "from": want, "to": got}
            for (t, p), (want, got) in sorted(jumps.items())
            if got < want or earliest.get((t, p), want) > want
        ]

    def _count_writes(self, report: BatchReport) -> None:
        committed = self.writer.last_commit
        if committed is None:
            raise TableWriteError(f"{self.settings.table_name}: the commit left no metadata to count its writes by")
        stats = committed.write_stats()
        report.upserted = sum(s.num_writes for s in stats)
        report.deleted = sum(s.num_deletes for s in stats)
        report.files_written = len(stats)

    def _handle_bad(self, tally: BatchTally, query_id: str, batch_id: int, what: str) -> None:
        policy = self.settings.on_error
        if policy == BadRecordPolicy.FAIL:
            samples = tally.first_samples()
            where = "; ".join(f"{t}[{p}]@{o}: {reason}" for t, p, o, reason in samples)
            more = f"; and {tally.bad - len(samples):,} more" if tally.bad > len(samples) else ""
            raise BadRecordError(
                f"{self.settings.table_name}: {tally.bad:,} record(s) of {what} could not be decoded "
                f"(decode.on_error is 'fail'; nothing of this batch was written): {where}{more}"
            )
        if policy == BadRecordPolicy.QUARANTINE:
            assert self.quarantine is not None
            self.quarantine.write(tally.bad_table(), query_id, batch_id)
            reach_failpoint("sink.quarantine_committed")


def _abandon_quietly(commit: DeltaCommit) -> None:
    """Roll back a commit that will not complete; when storage refuses that too, the next run does."""
    try:
        commit.abandon()
    except Exception as e:  # noqa: BLE001 - the next run rolls it back
        log.warning("could not roll back deltacommit %s now (the next run will): %s", commit.instant, e)


def _phases(
    written: DataFrameWriteResult, tally: BatchTally, plan_seconds: float, commit_seconds: float
) -> dict[str, float]:
    """Where a batch's time went: the driver's planning (deltacommit begun, routing), the
    task-seconds of each step of the pass (reading or waiting for records, decoding, keying and
    routing) and of the file writes, the wall time of the Spark jobs that ran them, and the
    driver's commit; `progress` (Kafka lag) and `services` are added after."""
    m = written.metrics
    fetch = tally.fetch_seconds
    return {
        "plan": plan_seconds,
        "fetch": m.input_seconds + fetch,
        "decode": m.to_rows_seconds - fetch,
        "route": m.route_seconds,
        "write": written.write_seconds,
        "jobs": written.wall_seconds,
        "commit": commit_seconds,
    }
