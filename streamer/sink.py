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
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamer.decode import ERROR, KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC, RAW_KEY, RAW_VALUE
from streamer.quarantine import QuarantineTable
from streamer.schema_evolution import VALUE_SCHEMA_KEY, SchemaEvolution
from table import failpoints
from table.mor_table import CHECKPOINT_KEY, MorTable, TableWriter
from table.spark_write import upsert_dataframe

log = logging.getLogger(__name__)

#: extraMetadata key of Hudi's own streamer checkpoint ("topic,partition:offset,...").
HUDI_STREAMER_CHECKPOINT_KEY = "deltastreamer.checkpoint.key"
BATCH_STATS_KEY = "mor.streamer.batch"
#: extraMetadata key of a commit that did not go on from the table's offsets because Kafka no
#: longer held them (`source.fail_on_data_loss: false`): [{topic, partition, from, to}].
DATA_LOSS_KEY = "mor.streamer.data_loss"


class BadRecordError(RuntimeError):
    """A record could not be decoded and the table's policy is `fail`."""


class StopRequested(RuntimeError):
    """The application is stopping; the batch is abandoned before anything is written."""


class TableWriteError(RuntimeError):
    """The table's storage refused a write (full, read-only, no permission); the batch was not
    committed."""


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


@dataclass(frozen=True)
class StreamCheckpoint:
    """What the table's last commit says about the stream: who wrote it and how far it read."""

    query_id: str
    batch_id: int
    offsets: dict[str, dict[int, int]]  # topic -> partition -> next offset to read

    def to_json(self) -> str:
        return json.dumps({
            "queryId": self.query_id,
            "batchId": self.batch_id,
            "offsets": self.offsets_json_object(),
        }, sort_keys=True)

    @staticmethod
    def from_json(obj: dict) -> "StreamCheckpoint":
        offsets = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in obj.get("offsets", {}).items()}
        return StreamCheckpoint(obj.get("queryId", ""), int(obj.get("batchId", -1)), offsets)

    def offsets_json_object(self) -> dict[str, dict[str, int]]:
        return {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(self.offsets.items())}

    def starting_offsets_json(self) -> str:
        """The source's `startingOffsets` that resumes where this checkpoint ends."""
        return json.dumps(self.offsets_json_object(), sort_keys=True)

    def hudi_streamer_checkpoint(self) -> str | None:
        """Hudi's streamer checkpoint string, which only has room for one topic."""
        if len(self.offsets) != 1:
            return None
        (topic, parts), = self.offsets.items()
        return ",".join([topic] + [f"{p}:{o}" for p, o in sorted(parts.items())])

    def advanced(self, query_id: str, batch_id: int, read: dict[str, dict[int, int]]) -> "StreamCheckpoint":
        offsets = {t: dict(parts) for t, parts in self.offsets.items()}
        for topic, parts in read.items():
            offsets.setdefault(topic, {}).update(parts)
        return StreamCheckpoint(query_id, batch_id, offsets)

    def covers(self, query_id: str, batch_id: int) -> bool:
        """True when the batch was already committed by this same streaming query."""
        return self.query_id == query_id and self.batch_id >= batch_id


EMPTY_CHECKPOINT = StreamCheckpoint("", -1, {})


def table_checkpoint(table: MorTable) -> StreamCheckpoint | None:
    raw = table.checkpoint()
    return StreamCheckpoint.from_json(raw) if raw is not None else None


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
    bad_policy: str = "fail"
    instant: str | None = None
    replayed: bool = False
    seconds: float = 0.0
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)  # topic -> records behind, after this batch

    def line(self) -> str:
        if self.replayed:
            return f"{self.table} batch {self.batch_id}: already committed by this query, skipped (replay)"
        bad = f", {self.bad:,} {'quarantined' if self.bad_policy == 'quarantine' else 'skipped'}" if self.bad else ""
        lag = "; lag " + ", ".join(f"{t} {n:,}" for t, n in sorted(self.lag.items())) if self.lag else ""
        return (f"{self.table} batch {self.batch_id}: {self.records:,} records, {self.upserted:,} upserted, "
                f"{self.deleted:,} deleted{bad}, {self.files_written} files -> deltacommit {self.instant} "
                f"in {self.seconds:.1f}s{lag}")


@dataclass(frozen=True)
class SinkSettings:
    table_name: str
    value_columns: tuple[str, ...]
    on_error: str  # fail | skip | quarantine
    transform: str | None


class UpsertSink:
    """The foreachBatch function of one table's streaming query; its batches arrive decoded
    (columns of `RecordDecoder.output_schema`)."""

    def __init__(self, settings: SinkSettings, table: MorTable, writer: TableWriter,
                 quarantine: QuarantineTable | None = None, after_commit: Callable[[], None] | None = None,
                 progress: Callable[[StreamCheckpoint], dict[str, int]] | None = None,
                 evolution: SchemaEvolution | None = None, offset_jumps: OffsetJumpCheck | None = None):
        self.settings = settings
        self.offset_jumps = offset_jumps
        self.evolution = evolution
        self.table = table
        self.writer = writer
        self.quarantine = quarantine
        self.after_commit = after_commit
        self.progress = progress
        self.reports: list[BatchReport] = []
        self.failure: BaseException | None = None
        self._query_id: str | None = None
        self._bound = threading.Event()
        self._busy = threading.Lock()
        self._stopping = threading.Event()
        self._checkpoint = table_checkpoint(table) or EMPTY_CHECKPOINT

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
        self._bound.wait()
        with self._busy:
            if self._stopping.is_set():
                # Returning would let Spark record the batch as done; raising leaves it to be
                # replayed by the next run.
                self.failure = StopRequested(f"{self.settings.table_name}: stopping, batch {batch_id} left for the next run")
                raise self.failure
            try:
                report = self._process(df, batch_id)
            except BaseException as e:
                refused = refused_write(e)
                if refused is None:
                    self.failure = e
                    raise
                self.failure = TableWriteError(
                    f"{self.settings.table_name}: batch {batch_id} could not be written to {self.table.base_uri}: "
                    f"{refused}; nothing of it was committed, and the next run rolls back what it left")
                raise self.failure from e
            self.reports.append(report)
            log.info(report.line())
            if self.after_commit is not None and not report.replayed:
                self.after_commit()

    def _process(self, df: DataFrame, batch_id: int) -> BatchReport:
        started = time.monotonic()
        s = self.settings
        report = BatchReport(s.table_name, batch_id, bad_policy=s.on_error)
        query_id = self._query_id or ""
        if self._checkpoint.covers(query_id, batch_id):
            report.replayed = True
            return report
        batch = decoded = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if self.evolution is not None:  # records of newer writer schemas: the table's schema evolves
                decoded = self.evolution.resolve(batch).persist(StorageLevel.MEMORY_AND_DISK)
            per_partition = decoded.groupBy(KAFKA_TOPIC, KAFKA_PARTITION).agg(
                F.min(KAFKA_OFFSET).alias("first"), F.max(KAFKA_OFFSET).alias("last"),
                F.count(F.lit(1)).alias("n"), F.count(ERROR).alias("bad"),
            ).collect()
            read: dict[str, dict[int, int]] = {}
            first: dict[tuple[str, int], int] = {}
            for r in per_partition:
                read.setdefault(r[KAFKA_TOPIC], {})[r[KAFKA_PARTITION]] = r["last"] + 1
                first[(r[KAFKA_TOPIC], r[KAFKA_PARTITION])] = r["first"]
                report.records += r["n"]
                report.bad += r["bad"]
            bad_rows = decoded.filter(F.col(ERROR).isNotNull())
            if report.bad:
                self._handle_bad(bad_rows, query_id, batch_id, report.bad)
            good = decoded.filter(F.col(ERROR).isNull()).drop(ERROR, RAW_KEY, RAW_VALUE)
            rows = self._table_rows(good)
            checkpoint = self._checkpoint.advanced(query_id, batch_id, read)
            extra = {CHECKPOINT_KEY: checkpoint.to_json(),
                     BATCH_STATS_KEY: json.dumps({"records": report.records, "bad": report.bad,
                                                  "badPolicy": s.on_error})}
            if self.evolution is not None:
                extra[VALUE_SCHEMA_KEY] = self.evolution.reader_schema
            lost = self._lost_offsets(query_id, first)
            if lost:
                extra[DATA_LOSS_KEY] = json.dumps(lost)
                log.warning("%s batch %d: Kafka no longer held the offsets the table goes on from; went on "
                            "from the earliest it holds (source.fail_on_data_loss is false): %s",
                            s.table_name, batch_id, "; ".join(
                                f"{j['topic']}[{j['partition']}] {j['from']} -> {j['to']}" for j in lost))
            hudi_checkpoint = checkpoint.hudi_streamer_checkpoint()
            if hudi_checkpoint:
                extra[HUDI_STREAMER_CHECKPOINT_KEY] = hudi_checkpoint
            instant = upsert_dataframe(self.writer, rows, extra) or self.writer.commit_empty(extra)
            failpoints.reach("sink.batch_committed")
            self._count_writes(report)
            self._checkpoint = checkpoint
            report.instant = instant
            report.offsets = read
        finally:
            decoded.unpersist()
            batch.unpersist()
        report.seconds = time.monotonic() - started
        if self.progress is not None:
            report.lag = self.progress(self._checkpoint)
        return report

    def _lost_offsets(self, query_id: str, first: dict[tuple[str, int], int]) -> list[dict]:
        """Partitions this batch did not read from the table's next offset because Kafka no
        longer held it: `from` the offset the table wanted, `to` the first one read. A batch
        going back (a topic recreated) always is; one going forward is when the wanted offset is
        below the partition's earliest now (not a gap such as a transaction marker)."""
        check = self.offset_jumps
        if check is None or (self._checkpoint.query_id != query_id and not check.started_from_table):
            return []  # a new query that started where its config says, not at the table's offsets
        wanted = {(t, p): o for t, parts in self._checkpoint.offsets.items() for p, o in parts.items()}
        jumps = {tp: (wanted[tp], read_from) for tp, read_from in first.items()
                 if tp in wanted and read_from != wanted[tp]}
        ahead = [tp for tp, (want, got) in jumps.items() if got > want]
        earliest: dict[tuple[str, int], int] = {}
        if ahead:
            try:
                earliest = check.earliest_offsets(ahead)
            except Exception as e:  # the batch is good; only the record of the jump is at stake
                log.warning("%s: could not ask Kafka whether offsets were skipped at %s: %s",
                            self.settings.table_name, sorted(ahead), e)
        return [{"topic": t, "partition": p, "from": want, "to": got}
                for (t, p), (want, got) in sorted(jumps.items()) if got < want or earliest.get((t, p), want) > want]

    def _count_writes(self, report: BatchReport) -> None:
        stats = self.writer.last_commit.write_stats()
        report.upserted = sum(s.num_writes for s in stats)
        report.deleted = sum(s.num_deletes for s in stats)
        report.files_written = len(stats)

    def _table_rows(self, good: DataFrame) -> DataFrame:
        transform = self.settings.transform
        if not transform:
            return good.select(*(self.evolution.value_columns if self.evolution else self.settings.value_columns))
        good.createOrReplaceTempView("source")  # the batch's own session: queries never share it
        return good.sparkSession.sql(transform)

    def _handle_bad(self, bad_rows: DataFrame, query_id: str, batch_id: int, count: int) -> None:
        policy = self.settings.on_error
        if policy == "fail":
            sample = (bad_rows.select(KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, ERROR)
                      .orderBy(KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET).limit(3).collect())
            where = "; ".join(f"{r[KAFKA_TOPIC]}[{r[KAFKA_PARTITION]}]@{r[KAFKA_OFFSET]}: {r[ERROR]}" for r in sample)
            raise BadRecordError(
                f"{self.settings.table_name}: {count} record(s) of batch {batch_id} could not be decoded "
                f"(decode.on_error is 'fail'; nothing of this batch was written): {where}")
        if policy == "quarantine":
            assert self.quarantine is not None
            self.quarantine.write(bad_rows, query_id, batch_id)
            failpoints.reach("sink.quarantine_committed")
