"""The initial load: the backlog of an empty table's topics taken in one commit.

A new table whose query starts without a Spark checkpoint may face millions of records. Read
`max_offsets_per_trigger` at a time, each micro-batch after the first would append log files to
the file groups the first one created. Taken at once (up to `source.initial_load_max_records`),
every file group of the backlog gets its base file in one commit, as a bulk insert would write
it, and the per-batch costs are paid once.

- `kafka-arrow`: the query's first micro-batch reads that much (the source's
  `initialBatchMaxOffsets`). It is an ordinary batch: Spark's checkpoint and the table's commit
  make it exactly once like any other.
- `kafka` (Spark's own source, whose rate limit cannot change after the first batch): one batch
  query reads the backlog before the stream starts. Its commit records the offsets it read up
  to (query id `initial-load`), and the stream starts from there, as after any run whose Spark
  checkpoint is gone. A crash during that load leaves an inflight commit, rolled back at the
  next start, which loads again: the table is still empty.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streamer.config.choices import StartingOffsets
from streamer.config.model import JobConfig
from streamer.kafka.admin import earliest_offsets
from streamer.kafka.offsets import KafkaProgress
from streamer.kafka.options import EARLIEST, LATEST, SourceOptions
from streamer.kafka.planning import offsets_from_json, rate_limit
from streamer.sink import BatchReport, UpsertSink
from table import MorTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backlog:
    """Offset ranges to load: topic -> partition -> offset, from `start` (inclusive) to `end`."""

    start: dict[str, dict[int, int]]
    end: dict[str, dict[int, int]]

    @property
    def records(self) -> int:
        return sum(max(0, end - self.start[t][p]) for t, parts in self.end.items() for p, end in parts.items())


def wanted(config: JobConfig, table: MorTable, has_spark_checkpoint: bool) -> bool:
    """Whether the query starts on a backlog it should take at once: an empty table, no Spark
    checkpoint, and a first batch allowed more than `max_offsets_per_trigger`."""
    source = config.source
    return bool(
        source.max_offsets_per_trigger
        and source.initial_load_max_records > source.max_offsets_per_trigger
        and not has_spark_checkpoint
        and source.starting_offsets != StartingOffsets.LATEST
        and not table.timeline().completed_writes()
    )


def backlog(config: JobConfig, kafka: KafkaProgress) -> Backlog | None:
    """The backlog to load with a batch query first, or None when the stream should just start."""
    source = config.source
    limit = source.initial_load_max_records
    ends = kafka.end_offsets()
    starts = _starting_offsets(config, ends)
    whole = Backlog(starts, ends)
    if source.max_offsets_per_trigger is None or whole.records <= source.max_offsets_per_trigger:
        return None  # the first micro-batch takes it all anyway
    end = rate_limit(
        limit,
        {(t, p): o for t, parts in starts.items() for p, o in parts.items()},
        {(t, p): o for t, parts in ends.items() for p, o in parts.items()},
        lambda tps: {},
    )
    return Backlog(starts, _by_topic(end))


def run(config: JobConfig, spark: SparkSession, sink: UpsertSink, work: Backlog) -> BatchReport:
    """Read the backlog with one batch query and write it as one commit."""
    source = config.source
    options = source.reader_options(_offsets_json(work.start))
    options.pop("maxOffsetsPerTrigger", None)
    options["endingOffsets"] = _offsets_json(work.end)
    started = time.monotonic()
    log.info(
        "%s: initial load of %s records from %s", config.table.name, f"{work.records:,}", ", ".join(sorted(work.end))
    )
    report = sink.load(spark.read.format(source.format).options(**options).load(), work.end)
    seconds = time.monotonic() - started
    log.info(
        "%s: initial load done: %s records in %.1fs (%s records/s)",
        config.table.name,
        f"{report.records:,}",
        seconds,
        f"{report.records / max(seconds, 1e-9):,.0f}",
    )
    return report


def _starting_offsets(config: JobConfig, ends: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """`source.starting_offsets` resolved to offsets for every partition that has an end."""
    spec = config.source.starting_offsets
    wanted = {(t, p) for t, parts in ends.items() for p in parts}
    configured = (
        offsets_from_json(json.loads(config.source.reader_options()["startingOffsets"]))
        if isinstance(spec, dict)
        else {}
    )
    earliest_needed = [tp for tp in wanted if configured.get(tp, EARLIEST) == EARLIEST]
    earliest = (
        earliest_offsets(SourceOptions.parse(config.source.reader_options()), earliest_needed)
        if earliest_needed
        else {}
    )
    starts = {}
    for tp in wanted:
        chosen = configured.get(tp, EARLIEST)
        starts[tp] = earliest[tp] if chosen == EARLIEST else ends[tp[0]][tp[1]] if chosen == LATEST else chosen
    return _by_topic(starts)


def _by_topic(offsets: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[partition] = offset
    return out


def _offsets_json(offsets: dict[str, dict[int, int]]) -> str:
    return json.dumps({t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())})
