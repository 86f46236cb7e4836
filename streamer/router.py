"""One streaming query for many tables: each micro-batch's offset ranges split by table.

The `kafka-arrow` source plans a batch as offset ranges of every topic the query reads. The
router gives each table the ranges of its own topics, starting where the table's last commit
says it goes on (`streamer.checkpoint`), and has the table's sink write them as one deltacommit.
So each table is exactly-once on its own: after a crash between two tables' commits, the table
that committed skips what it holds, the other reads it; a table that stopped catches up from its
own offsets at the next start, however far the query has gone since. A table without records in
a batch costs nothing in it; tables with records are written `TABLES_AT_ONCE` at a time.

A table that cannot go on (a bad record under `fail`, a schema change it cannot take, storage
that refuses writes) stops alone, as its own query would; `stream.on_failure: stop_application`
stops the query. Topics no table reads yet are offered to `discover` (a mirror's new tables).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from streamer.config.choices import QueryFailurePolicy
from streamer.errors import StopRequestedError
from streamer.job import TableJob
from streamer.kafka.planning import OffsetRange, spans_of, split_ranges
from streamer.kafka.schema import OFFSET_RANGES_SCHEMA
from streamer.last_error import record_error
from streamer.logs.failures import failure_line

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: What a batch plans for a topic-partition: [from, until).
Span = tuple[int, int]
#: Tables whose parts of a batch are written at once. A small table's commit is mostly the
#: driver's waiting (its Spark job's scheduling, its commit's files), which others' fill.
TABLES_AT_ONCE = 4


@dataclass
class TableFailure:
    """A table the router stopped, and why (one line)."""

    job: TableJob
    error: str


@dataclass(frozen=True)
class NotRouted:
    """Why a topic has no table: `reported` when that is a refusal the run's summary lists (not
    a topic left out on purpose)."""

    reason: str
    reported: bool = True


@dataclass
class Routes:
    """Which tables read which topic (by name, or by a table's `topic_pattern`); topics no table
    takes, with the reason."""

    named: dict[str, list[TableJob]] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern[str], TableJob]] = field(default_factory=list)
    refused: dict[str, NotRouted] = field(default_factory=dict)
    _resolved: dict[str, list[TableJob]] = field(default_factory=dict)

    def add(self, job: TableJob) -> None:
        source = job.config.source
        for topic in source.topics or ():
            self.named.setdefault(topic, []).append(job)
        if source.topic_pattern is not None:
            self.patterns.append((re.compile(source.topic_pattern), job))
        self._resolved.clear()

    def tables_of(self, topic: str) -> list[TableJob]:
        """The tables that read `topic`; none when no table does (yet)."""
        found = self._resolved.get(topic)
        if found is None:
            found = self.named.get(topic, []) + [job for pattern, job in self.patterns if pattern.fullmatch(topic)]
            self._resolved[topic] = found
        return found


class TableRouter:
    """The `foreachBatch` function of a query shared by `jobs` (all reading through `kafka-arrow`)."""

    def __init__(
        self,
        jobs: list[TableJob],
        discover: Callable[[str], TableJob | NotRouted] | None = None,
    ):
        self.jobs = list(jobs)
        self.routes = Routes()
        for job in jobs:
            self.routes.add(job)
        self.discover = discover  # a topic's new table, or why it has none
        self.failures: dict[str, TableFailure] = {}
        self.stop_application: TableFailure | None = None
        self._query_id: str | None = None
        self._added = threading.Lock()

    def bind(self, query_id: str) -> None:
        """Called once the query has started: its id is part of every table's commits."""
        self._query_id = query_id
        for job in self.jobs:
            job.sink.bind(query_id)

    def quiesce(self, timeout: float) -> bool:
        """Let the table write in progress finish and refuse the rest of the batch (see
        `UpsertSink.quiesce`); False if it did not finish in time."""
        finished = [job.sink.quiesce(timeout) for job in self.jobs]  # every sink told, none skipped
        return all(finished)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        planned = _planned_spans(df)
        spark = df.sparkSession
        work = [
            (job, ranges)
            for job, spans in self._by_table(planned).items()
            if job.name not in self.failures and (ranges := _ranges_from_the_table(job, spans))
        ]
        if len(work) <= 1:
            for job, ranges in work:
                self._write(spark, job, ranges, batch_id)
            return
        with ThreadPoolExecutor(min(TABLES_AT_ONCE, len(work)), thread_name_prefix="table-write") as pool:
            futures = [pool.submit(self._write, spark, job, ranges, batch_id) for job, ranges in work]
            for future in futures:
                future.result()  # a stop request, or stop_application, ends the batch

    def _write(self, spark: SparkSession, job: TableJob, ranges: list[OffsetRange], batch_id: int) -> None:
        """One table's part of the batch as its deltacommit; its failure stops the table alone."""
        rows = [(topic, partition, start, end) for (topic, partition), start, end in ranges]
        ends: dict[str, dict[int, int]] = {}
        for (topic, partition), _, end in ranges:
            ends.setdefault(topic, {})[partition] = end
        try:
            job.sink.take(spark.createDataFrame(rows, OFFSET_RANGES_SCHEMA), batch_id, ends, ranges)
        except StopRequestedError:
            raise  # the batch is left to the next run, whose tables go on from their own offsets
        except Exception as e:  # noqa: BLE001 - the table stops alone; the others go on
            self._stopped(job, e)

    def _by_table(self, planned: dict[TopicPartition, Span]) -> dict[TableJob, dict[TopicPartition, Span]]:
        by_table: dict[TableJob, dict[TopicPartition, Span]] = {}
        for tp, span in planned.items():
            for job in self._tables_of(tp[0]):
                by_table.setdefault(job, {})[tp] = span
        return by_table

    def _tables_of(self, topic: str) -> list[TableJob]:
        jobs = self.routes.tables_of(topic)
        if jobs or topic in self.routes.refused or self.discover is None:
            return jobs
        found = self.discover(topic)
        if isinstance(found, NotRouted):
            self.routes.refused[topic] = found
            return []
        with self._added:
            self.jobs.append(found)
            self.routes.add(found)
        if self._query_id is not None:
            found.sink.bind(self._query_id)
        return [found]

    def _stopped(self, job: TableJob, error: BaseException) -> None:
        line = failure_line(error)
        failure = TableFailure(job, line)
        with self._added:
            self.failures[job.name] = failure
        job.metrics.query_failed(line)
        log.error("%s: stopped with an error: %s", job.name, line)
        try:
            record_error(job.config.table.path, line, job.config.table.storage_options)
        except OSError as e:
            log.warning("%s: could not record the error with the table: %s", job.name, e)
        if job.config.stream.on_failure == QueryFailurePolicy.STOP_APPLICATION:
            self.stop_application = failure
            raise StopRequestedError(f"{job.name}: stream.on_failure is stop_application: stopping every table")
        log.info(
            "%s: the other tables of the query go on; this one resumes from its own offsets at the next start", job.name
        )


def _planned_spans(df: DataFrame) -> dict[TopicPartition, Span]:
    """The batch's ranges, one per topic-partition (the source may split a partition's among
    several tasks)."""
    return spans_of(((topic, partition), start, end) for topic, partition, start, end in df.collect())


def _ranges_from_the_table(job: TableJob, spans: dict[TopicPartition, Span]) -> list[OffsetRange]:
    """The table's part of the batch: each partition from the offset the table goes on from
    (where its commits name one) up to the batch's end, split into tasks as the source splits."""
    committed = job.sink.checkpoint.offsets
    ranges = []
    for (topic, partition), (start, end) in sorted(spans.items()):
        own = committed.get(topic, {}).get(partition)
        begin = start if own is None else own
        if end > begin:
            ranges.append(((topic, partition), begin, end))
    source = job.sink.settings.source
    if source is None:
        return ranges
    return split_ranges(ranges, source.min_partitions, source.max_records_per_partition)
