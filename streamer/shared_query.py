"""Which tables share one streaming query, and that query.

Tables that read through `kafka-arrow` from the same brokers, with the same client settings and
trigger, share one query: each trigger plans every topic once, and `streamer.router` hands each
table its own ranges. A directory of table configs runs so without being rewritten; a mirror
(`streamer.mirror`) always does, and its query also takes the tables that appear while it runs.

The shared query does not keep a Spark checkpoint between runs: every table's commits say where
it goes on, so each start plans from those (and from `source.starting_offsets` for a table
without commits). Its checkpoint is a scratch directory of the run, removed when it ends.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from streamer import initial_load
from streamer.config.choices import SourceFormat, StartingOffsets
from streamer.config.model import SourceSettings
from streamer.job import TableJob
from streamer.router import NotRouted, TableRouter

log = logging.getLogger(__name__)


def sharing_key(job: TableJob) -> tuple | None:
    """What tables must agree on to share a query; None for a table that runs its own (Spark's
    `kafka` source plans for itself)."""
    source = job.config.source
    if source.format != SourceFormat.KAFKA_ARROW:
        return None
    return (
        source.bootstrap_servers,
        json.dumps(source.options, sort_keys=True, default=str),
        source.max_offsets_per_trigger,
        source.fail_on_data_loss,
        source.max_broker_outage_seconds,
        job.config.stream.trigger_interval,
    )


def shared_groups(jobs: list[TableJob]) -> tuple[list[list[TableJob]], list[TableJob]]:
    """The groups of two or more tables that share a query, and the tables that run their own."""
    groups: dict[tuple, list[TableJob]] = {}
    alone: list[TableJob] = []
    for job in jobs:
        key = sharing_key(job)
        if key is None:
            alone.append(job)
        else:
            groups.setdefault(key, []).append(job)
    shared = []
    for group in groups.values():
        if len(group) == 1:
            alone.extend(group)
        else:
            shared.append(group)
    return shared, alone


class SharedQuery:
    """One streaming query writing many tables through a `TableRouter`."""

    def __init__(
        self,
        name: str,
        jobs: list[TableJob],
        source: SourceSettings | None = None,
        discover: Callable[[str], TableJob | NotRouted] | None = None,
        trigger_interval: str | None = None,
    ):
        self.name = name
        self.router = TableRouter(jobs, discover)
        # The brokers and client settings the query plans with; a mirror's subscribes to its pattern.
        self.source = source or jobs[0].config.source
        self._pattern = self.source.topic_pattern if source is not None else None
        self.trigger_interval = trigger_interval or jobs[0].config.stream.trigger_interval
        self.query: StreamingQuery | None = None
        self._checkpoint = tempfile.mkdtemp(prefix="mor-streamer-query-")

    @property
    def jobs(self) -> list[TableJob]:
        return self.router.jobs

    def start(self, spark: SparkSession, once: bool) -> StreamingQuery:
        jobs = self.jobs
        options = self.source.reader_options(_starting_offsets(jobs))
        options.pop("subscribe", None)
        options.pop("subscribePattern", None)
        options["subscribePattern"] = self.topic_pattern()
        options["offsetRangesInOneTask"] = "true"  # the router reads the plan on the driver
        loads = [
            j.config.source.initial_load_max_records
            for j in jobs
            if initial_load.wanted(j.config, j.table, has_spark_checkpoint=False)
        ]
        if loads:
            options["initialBatchMaxOffsets"] = str(max(loads))
        stream = spark.readStream.format(SourceFormat.KAFKA_ARROW.value).options(**options).load()
        stream = stream.observe(self.name, F.sum(F.col("until_offset") - F.col("from_offset")).alias("records"))
        writer = (
            stream.writeStream.foreachBatch(self.router)
            .queryName(self.name)
            .option("checkpointLocation", self._checkpoint)
        )
        writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=self.trigger_interval)
        self.query = writer.start()
        self.router.bind(str(self.query.id))
        for job in jobs:
            job.query = self.query
        return self.query

    def topic_pattern(self) -> str:
        """The topics of every table, as one pattern (tables may name topics or a pattern), or
        the mirror's."""
        if self._pattern is not None:
            return self._pattern
        parts: set[str] = set()
        for job in self.jobs:
            s = job.config.source
            parts.update(re.escape(t) for t in s.topics or ())
            if s.topic_pattern is not None:
                parts.add(s.topic_pattern)
        return "|".join(f"(?:{p})" for p in sorted(parts))

    def close(self) -> None:
        shutil.rmtree(self._checkpoint, ignore_errors=True)


def _starting_offsets(jobs: list[TableJob]) -> str:
    """Where the query starts: each table's topics where its last commit goes on from, else as
    its `source.starting_offsets` says (partitions not named start at the earliest)."""
    offsets: dict[str, dict[str, int]] = {}
    for job in jobs:
        committed = job.sink.checkpoint.offsets
        source = job.config.source
        topics = list(source.topics or ())
        if committed:
            for topic, parts in committed.items():
                offsets.setdefault(topic, {}).update({str(p): o for p, o in parts.items()})
        elif source.starting_offsets == StartingOffsets.LATEST:
            for topic, parts in job.kafka.end_offsets(topics).items():
                offsets.setdefault(topic, {}).update({str(p): o for p, o in parts.items()})
        elif isinstance(source.starting_offsets, dict):  # -2 earliest, -1 latest: the source's own
            for topic, parts in source.starting_offsets.items():
                offsets.setdefault(topic, {}).update({str(p): o for p, o in parts.items()})
    return json.dumps(offsets, sort_keys=True)
