"""The tally of what a micro-batch held, gathered by the tasks that decode it.

The decode step (`streamer.decode_step`) adds to a `BatchTally` accumulator, in the write's single
pass, what the driver needs besides the rows: the offsets read per Kafka partition, the counts,
the bad records the policy keeps, the records that write nothing by kind, the schema ids of
records that evolve the table's schema, with those schemas and where each first came. So no
Spark job reads the batch a second time.

Each entry of the tally is keyed by the Kafka partition and the first offset of the Arrow batch
it describes, so a task Spark runs again adds the same entries, not more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from streamer.decode.columns import (
    ERROR,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
)

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
