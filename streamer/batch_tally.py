"""Decoding a micro-batch inside the write's single pass, and the tally of what it held.

The sink hands `table.spark.write.write_dataframe` a `DecodeStep`: each Arrow batch of Kafka
records is decoded on the executor that routes it, and only its good rows go on. With the
`kafka-arrow` source the step also reads the records, from the offset ranges the source planned,
so they never cross into the JVM. What the
driver needs besides the rows (the offsets read per Kafka partition, the counts, the bad records
the policy keeps, the records that write nothing by kind, the schema ids of records that evolve
the table's schema, with those schemas and where each first came) is added to a
`BatchTally` accumulator in the same pass, so no Spark job reads the batch a second time.

Each entry of the tally is keyed by the Kafka partition and the first offset of the Arrow batch
it describes, so a task Spark runs again adds the same entries, not more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam

from streamer.decode.columns import (
    ERROR,
    EVOLVING,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
    SKIPPED,
)
from streamer.decode.record_decoder import RecordDecoder
from streamer.kafka.options import SourceOptions
from streamer.kafka.reader import read_ranges
from streamer.kafka.schema import OFFSET_RANGES_SCHEMA

TopicPartition = tuple[str, int]
#: Bad records kept for `fail`'s message, which says how many more there were.
SAMPLES = 5
#: The columns of a bad record the quarantine table takes.
BAD_COLUMNS = (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP, RAW_KEY, RAW_VALUE, ERROR)


@dataclass(frozen=True)
class SliceRead:
    """One Arrow batch's share of a Kafka partition: its last offset and its counts."""

    last: int
    records: int
    bad: int
    oldest_timestamp: int | None  # Kafka timestamps, microseconds since the epoch
    newest_timestamp: int | None
    fetch_seconds: float = 0.0  # reading it from Kafka, when the step read it
    skipped: tuple[tuple[str, int], ...] = ()  # (kind, count) of the records that write nothing


@dataclass
class BatchTally:
    """What a micro-batch held, gathered by the tasks that decoded it."""

    reads: dict[tuple[str, int, int], SliceRead] = field(default_factory=dict)  # (topic, partition, first offset)
    bad_rows: dict[tuple[str, int, int], bytes] = field(default_factory=dict)  # Arrow IPC of BAD_COLUMNS
    samples: dict[tuple[str, int, int], str] = field(default_factory=dict)  # (topic, partition, offset) -> reason
    evolving: set[int] = field(default_factory=set)  # schema ids that evolve the reader schema
    writer_schemas: dict[int, str] = field(default_factory=dict)  # those ids' schemas, where the decoder has them
    evolving_at: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # id -> its first record

    def merge(self, other: BatchTally) -> BatchTally:
        self.reads.update(other.reads)
        self.bad_rows.update(other.bad_rows)
        self.samples.update(other.samples)
        self.evolving |= other.evolving
        self.writer_schemas.update(other.writer_schemas)
        for schema_id, where in other.evolving_at.items():
            self.evolving_at[schema_id] = min(where, self.evolving_at.get(schema_id, where))
        return self

    @property
    def records(self) -> int:
        return sum(r.records for r in self.reads.values())

    @property
    def bad(self) -> int:
        return sum(r.bad for r in self.reads.values())

    @property
    def skipped(self) -> dict[str, int]:
        """Records that write nothing (heartbeats, truncates, skipped tombstones...), by kind."""
        counts: dict[str, int] = {}
        for read in self.reads.values():
            for kind, count in read.skipped:
                counts[kind] = counts.get(kind, 0) + count
        return counts

    def offsets_read(self) -> dict[str, dict[int, int]]:
        """topic -> partition -> the next offset to read after this batch."""
        read: dict[str, dict[int, int]] = {}
        for (topic, partition, _), r in self.reads.items():
            parts = read.setdefault(topic, {})
            parts[partition] = max(parts.get(partition, 0), r.last + 1)
        return read

    def first_offsets(self) -> dict[TopicPartition, int]:
        first: dict[TopicPartition, int] = {}
        for topic, partition, offset in self.reads:
            first[(topic, partition)] = min(first.get((topic, partition), offset), offset)
        return first

    @property
    def fetch_seconds(self) -> float:
        """Task-seconds the step spent reading records from Kafka."""
        return sum(r.fetch_seconds for r in self.reads.values())

    def timestamps(self) -> tuple[int, int] | None:
        """The oldest and the newest Kafka timestamp of the batch's records (microseconds)."""
        oldest = [r.oldest_timestamp for r in self.reads.values() if r.oldest_timestamp is not None]
        newest = [r.newest_timestamp for r in self.reads.values() if r.newest_timestamp is not None]
        return (min(oldest), max(newest)) if oldest else None

    def first_samples(self) -> list[tuple[str, int, int, str]]:
        return [(*key, reason) for key, reason in sorted(self.samples.items())[:SAMPLES]]

    def bad_table(self) -> pa.Table | None:
        tables = [pa.ipc.open_stream(data).read_all() for _, data in sorted(self.bad_rows.items())]
        return pa.concat_tables(tables) if tables else None


class BatchTallyParam(AccumulatorParam):
    def zero(self, value: BatchTally) -> BatchTally:
        return BatchTally()

    def addInPlace(self, value1: BatchTally, value2: BatchTally) -> BatchTally:
        return value1.merge(value2)


class DecodeStep:
    """Kafka records to table rows, on executors: `columns` of the good records. Picklable.

    The records come as Spark's Kafka rows, or as the offset ranges the `kafka-arrow` source
    planned (`streamer.kafka.schema.OFFSET_RANGES_SCHEMA`), which the step reads with `source`."""

    def __init__(
        self,
        decoder: RecordDecoder,
        columns: tuple[str, ...],
        keep_bad_rows: bool,
        tally,
        source: SourceOptions | None = None,
    ):
        self.decoder = decoder
        self.columns = columns
        self.keep_bad_rows = keep_bad_rows
        self.tally = tally
        self.source = source

    def __call__(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if batch.schema.names != OFFSET_RANGES_SCHEMA.names:
            yield self._rows(batch)
            return
        if self.source is None:
            raise ValueError("offset ranges of the kafka-arrow source, but no source options to read them with")
        records = read_ranges(self.source, batch)
        while True:
            started = time.perf_counter()
            read = next(records, None)
            if read is None:
                return
            yield self._rows(read, time.perf_counter() - started)

    def decoded_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`mapInArrow`'s function, when the rows go through Spark again (a transform)."""
        for batch in batches:
            yield from self(batch)

    def _rows(self, batch: pa.RecordBatch, fetch_seconds: float = 0.0) -> pa.RecordBatch:
        decoded = self.decoder.decode(batch)
        if decoded.num_rows == 0:
            return decoded.select(list(self.columns))
        error = decoded.column(ERROR)
        bad = error.is_valid()
        deferred = decoded.column(EVOLVING).is_valid() if EVOLVING in decoded.schema.names else None
        skipped = decoded.column(SKIPPED) if SKIPPED in decoded.schema.names else None
        self.tally.add(self._tally(decoded, bad, deferred, fetch_seconds))
        dropped = bad
        for other in (deferred, None if skipped is None else skipped.is_valid()):
            if other is not None:
                dropped = pc.or_(dropped, other)
        rows = decoded.select(list(self.columns))
        return rows if dropped.true_count == 0 else rows.filter(pc.invert(dropped))

    def _tally(
        self, decoded: pa.RecordBatch, bad: pa.BooleanArray, deferred: pa.BooleanArray | None, fetch_seconds: float
    ) -> BatchTally:
        tally = BatchTally()
        topics, partitions = decoded.column(KAFKA_TOPIC), decoded.column(KAFKA_PARTITION)
        offsets = np.asarray(decoded.column(KAFKA_OFFSET))
        stamps = decoded.column(KAFKA_TIMESTAMP).cast(pa.int64())
        if pc.count_distinct(topics).as_py() == 1 and pc.count_distinct(partitions).as_py() == 1:
            runs = [(topics[0].as_py(), partitions[0].as_py(), np.arange(len(offsets)))]
        else:
            keys = pa.table({"t": topics, "p": partitions, "i": pa.array(np.arange(len(offsets)))})
            grouped = keys.group_by(["t", "p"]).aggregate([("i", "list")])
            runs = [
                (t, p, np.asarray(i))
                for t, p, i in zip(
                    grouped["t"].to_pylist(), grouped["p"].to_pylist(), grouped["i_list"].to_numpy(zero_copy_only=False)
                )
            ]
        bad_rows = np.asarray(bad)
        kinds = decoded.column(SKIPPED) if SKIPPED in decoded.schema.names else None
        for topic, partition, rows in runs:
            first = int(offsets[rows].min())
            span = pc.min_max(stamps.take(pa.array(rows)))
            skipped = ()
            if kinds is not None and kinds.null_count < len(kinds):
                counts = pc.value_counts(kinds.take(pa.array(rows)).drop_null()).to_pylist()
                skipped = tuple(sorted((c["values"], c["counts"]) for c in counts))
            tally.reads[(topic, partition, first)] = SliceRead(
                int(offsets[rows].max()),
                len(rows),
                int(bad_rows[rows].sum()),
                span["min"].as_py(),
                span["max"].as_py(),
                fetch_seconds * len(rows) / len(offsets),
                skipped,
            )
        if bad_rows.any():
            where = np.flatnonzero(bad_rows)
            errors = decoded.column(ERROR).take(pa.array(where[:SAMPLES])).to_pylist()
            for row, reason in zip(where[:SAMPLES].tolist(), errors):
                tally.samples[(topics[row].as_py(), partitions[row].as_py(), int(offsets[row]))] = reason
            if self.keep_bad_rows:
                kept = decoded.filter(bad).select(list(BAD_COLUMNS))
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, kept.schema) as stream:
                    stream.write_batch(kept)
                key = (topics[int(where[0])].as_py(), partitions[int(where[0])].as_py(), int(offsets[where[0]]))
                tally.bad_rows[key] = sink.getvalue().to_pybytes()
        if deferred is not None and deferred.true_count:
            column = decoded.column(EVOLVING)
            ids = pc.unique(pc.filter(column, deferred)).to_pylist()
            tally.evolving.update(ids)
            known = self.decoder.writer_schemas
            tally.writer_schemas.update({i: known[i] for i in ids if i in known})
            for schema_id in ids:
                row = int(pc.index(column, schema_id).as_py())
                tally.evolving_at[schema_id] = (topics[row].as_py(), partitions[row].as_py(), int(offsets[row]))
        return tally
