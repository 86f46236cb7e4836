"""Kafka stream source for Spark Structured Streaming, written as a PySpark Python data source.

Spark's own ``kafka`` format needs the ``spark-sql-kafka-0-10`` jar, which is not always
available. This source reads Kafka with confluent-kafka (librdkafka) instead and hands Spark
Arrow record batches. Register it once per session and use it like Spark's Kafka source::

    from streamer.kafka.datasource import register_kafka_source
    register_kafka_source(spark)                     # short name: "kafka-arrow"
    df = (spark.readStream.format("kafka-arrow")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "100000")
          .load())

Its options are described in `streamer.kafka.options`, its output schema in
`streamer.kafka.schema`. The driver plans each micro-batch (`streamer.kafka.admin` asks the
brokers, `streamer.kafka.planning` cuts the batch and its tasks); each task reads its offset range
with `streamer.kafka.reader`.

Admission control: with PySpark >= 4.2 the engine calls ``latestOffset(start, limit)`` with the
:class:`ReadLimit` returned by ``getDefaultReadLimit()`` (``ReadMaxRows(maxOffsetsPerTrigger)``
when set, else ``ReadAllAvailable``) and with ``ReadAllAvailable`` for ``Trigger.Once``; the
reader implements ``SupportsTriggerAvailableNow`` so ``Trigger.AvailableNow`` reads up to the
offsets current at query start in rate-limited batches. With PySpark 4.0/4.1 (no admission
control) ``latestOffset()`` is called without arguments; the reader then rate-limits from the
last offsets it planned, best effort.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (  # admission control, Trigger.AvailableNow: PySpark >= 4.2
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from streamer.config.secrets import redact_options
from streamer.errors import KafkaSourceError
from streamer.kafka.admin import KafkaMetadata
from streamer.kafka.data_loss import data_loss
from streamer.kafka.options import EARLIEST, LATEST, OffsetMap, SourceOptions, describe_partition
from streamer.kafka.planning import offsets_from_json, offsets_to_json, rate_limit, split_ranges
from streamer.kafka.reader import read_partition
from streamer.kafka.schema import (
    KAFKA_SCHEMA,
    KAFKA_SCHEMA_WITHOUT_HEADERS,
    OFFSET_RANGES_SCHEMA,
    offset_ranges_batch,
)
from streamer.logs.clients import configure_worker_logging

log = logging.getLogger(__name__)

#: The format's short name, `SourceFormat.KAFKA_ARROW` of the config. Spark imports this module
#: in processes of its own to plan reads, so it and what it imports leave the engine (`table`)
#: out: each such process holds about 25 MiB less.
SOURCE_NAME = "kafka-arrow"


def _fmt_held(earliest: int, end: int) -> str:
    """What a partition holds, for data-loss messages."""
    if earliest >= end:
        return f"no records (its end offset is {end})"
    return f"offsets {earliest} to {end - 1}"


class KafkaInputPartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


class RangesInputPartition(InputPartition):
    """One Spark task whose rows are every planned range (`offsetRangesInOneTask`)."""

    def __init__(self, ranges: list[tuple[tuple[str, int], int, int]]):
        super().__init__(ranges)
        self.ranges = ranges

    def __repr__(self) -> str:
        return f"RangesInputPartition({len(self.ranges)} ranges)"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch stream reader. Offsets: ``{"topic": {"partition": nextOffsetToRead}}``."""

    def __init__(self, opts: SourceOptions):
        configure_worker_logging()  # made in a Python process of Spark's, not the driver's
        self.opts = opts
        self._md: KafkaMetadata | None = None
        self._available_now_target: OffsetMap | None = None
        self._latest_seen: OffsetMap | None = None
        self._last_planned_end: OffsetMap | None = None
        self._initial: OffsetMap | None = None
        self._first_batch_max: int | None = None  # a query's first batch may read more
        self._first_batch_planned = False

    def __getstate__(self):
        # Sent to executors for read(): no client handles, no driver state.
        return {"opts": self.opts}

    def __setstate__(self, state):
        KafkaStreamReader.__init__(self, state["opts"])

    def __repr__(self) -> str:
        return f"KafkaStreamReader({self.opts!r})"

    @property
    def md(self) -> KafkaMetadata:
        if self._md is None:
            self._md = KafkaMetadata(self.opts)
        return self._md

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        tps, _ = self.md.discover()
        spec = self.opts.starting_offsets
        if spec == "earliest":
            offsets = self.md.earliest(tps)
        elif spec == "latest":
            offsets = self.md.latest(tps)
        else:
            assert isinstance(spec, dict)
            present = set(tps)
            missing = sorted(tp for tp in spec if tp not in present)
            if missing:
                data_loss(
                    self.opts.fail_on_data_loss,
                    "option 'startingOffsets' names partitions that do not exist: "
                    + ", ".join(describe_partition(tp) for tp in missing)
                    + ".",
                )
            want_earliest = [tp for tp in tps if spec.get(tp, EARLIEST) == EARLIEST]
            want_latest = [tp for tp in tps if spec.get(tp) == LATEST]
            offsets = {tp: spec[tp] for tp in tps if spec.get(tp, EARLIEST) >= 0}
            offsets.update(self.md.earliest(want_earliest))
            offsets.update(self.md.latest(want_latest))
        self._initial = offsets
        if not self._first_batch_planned:  # Spark may ask for the initial offsets again later
            self._first_batch_max = self.opts.initial_batch_max_offsets
        log.info("Kafka source initial offsets: %s", offsets_to_json(offsets))
        return offsets_to_json(offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        tps, _ = self.md.discover()
        self._available_now_target = self.md.latest(tps)
        log.info("Trigger.AvailableNow: reading up to %s", offsets_to_json(self._available_now_target))

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _fetch_latest(self, start: OffsetMap) -> OffsetMap:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        tps, uncertain = self.md.discover()
        latest = self.md.latest(tps)
        for tp, off in start.items():  # metadata hiccup: carry the start offset over
            if tp[0] in uncertain and tp not in latest:
                latest[tp] = off
        return latest

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:  # PySpark < 4.2: no start, no read limit
            start_map = self._last_planned_end or self._initial or {}
            limit = self.getDefaultReadLimit() if start_map else ReadAllAvailable()
        else:
            start_map = offsets_from_json(start)
        latest = self._fetch_latest(start_map)

        gone = sorted(tp for tp in start_map if tp not in latest)
        if gone:
            data_loss(
                self.opts.fail_on_data_loss,
                "Partitions are gone: "
                + ", ".join(f"{describe_partition(tp)} (the offset to read next is {start_map[tp]})" for tp in gone)
                + " (the topic was deleted or is no longer assigned).",
            )
        backwards = sorted(tp for tp, off in start_map.items() if tp in latest and latest[tp] < off)
        if backwards and self._available_now_target is None:
            # A new leader may briefly report an older end offset: ask once more before failing.
            time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
            latest.update(self.md.latest(backwards))
            backwards = [tp for tp in backwards if latest[tp] < start_map[tp]]
        if backwards:
            earliest = self.md.earliest(backwards)
            data_loss(
                self.opts.fail_on_data_loss,
                "; ".join(
                    f"{describe_partition(tp)}: the offset to read next is {start_map[tp]} but the broker holds "
                    f"{_fmt_held(earliest[tp], latest[tp])} (the topic was recreated or the partition "
                    "truncated)"
                    for tp in backwards
                )
                + ".",
            )
            start_map = {**start_map, **earliest}  # tolerated: `partitions` reads from the earliest

        self._latest_seen = latest
        if isinstance(limit, ReadMaxRows):
            most = int(limit.max_rows)
            if self._first_batch_max is not None:
                most = max(most, self._first_batch_max)
            end = rate_limit(most, start_map, latest, self.md.earliest)
            if end != start_map:
                self._first_batch_max = None
                self._first_batch_planned = True
        else:
            end = latest
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s = offsets_from_json(start)
        e = offsets_from_json(end)
        self._last_planned_end = e
        new = [tp for tp in e if tp not in s]
        if new:
            s.update(self.md.earliest(new))
        went_back = [tp for tp in e if e[tp] < s[tp]]  # only planned when failOnDataLoss=false
        restart = self.md.earliest(went_back) if went_back else {}
        ranges = []
        for tp in sorted(e):
            if tp in restart:
                log.warning(
                    "%s went back from offset %d to %d (data loss tolerated by "
                    "failOnDataLoss=false): reading it from its earliest offset %d",
                    describe_partition(tp),
                    s[tp],
                    e[tp],
                    restart[tp],
                )
                if e[tp] > restart[tp]:
                    ranges.append((tp, restart[tp], e[tp]))
            elif e[tp] > s[tp]:
                ranges.append((tp, s[tp], e[tp]))
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        if self.opts.offset_ranges and self.opts.offset_ranges_in_one_task:
            return [RangesInputPartition(ranges)] if ranges else []
        return [KafkaInputPartition(tp[0], tp[1], a, b) for tp, a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangesInputPartition):
            return iter([offset_ranges_batch(partition.ranges)])
        if not isinstance(partition, KafkaInputPartition):  # Spark hands back what `partitions` made
            raise KafkaSourceError(f"not a partition of this Kafka source: {partition!r}")
        if self.opts.offset_ranges:
            return iter(
                [offset_ranges_batch([((partition.topic, partition.partition), partition.start, partition.end)])]
            )
        configure_worker_logging()
        return read_partition(self.opts, partition.topic, partition.partition, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint (and the sink's table commits); nothing to do.
        pass

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None


class KafkaArrowDataSource(DataSource):
    """``spark.readStream.format("kafka-arrow")``: see `streamer.kafka.options` for its options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _opts(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def schema(self) -> StructType:
        opts = self._opts()
        if opts.offset_ranges:
            return OFFSET_RANGES_SCHEMA
        return KAFKA_SCHEMA if opts.include_headers else KAFKA_SCHEMA_WITHOUT_HEADERS

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self._opts())

    def __repr__(self) -> str:
        return f"KafkaArrowDataSource({redact_options(dict(self.options))})"


def register_kafka_source(spark) -> str:
    """Register the source with ``spark`` and return its format name (``kafka-arrow``)."""
    spark.dataSource.register(KafkaArrowDataSource)
    return SOURCE_NAME
