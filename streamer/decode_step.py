"""Decoding a micro-batch inside the write's single pass.

The sink hands `table.spark.write.write_dataframe` a `DecodeStep`: each Arrow batch of Kafka
records is decoded on the executor that routes it, and only its good rows go on. With the
`kafka-arrow` source the step also reads the records, from the offset ranges the source planned,
so they never cross into the JVM. What the driver needs besides the rows goes to the batch's
tally (`streamer.batch_tally`) in the same pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.batch_tally import BAD_COLUMNS, SAMPLES, BatchTally, SliceRead
from streamer.decode.columns import (
    ERROR,
    EVOLVING,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    SKIPPED,
)
from streamer.decode.record_decoder import RecordDecoder
from streamer.errors import KafkaSourceError
from streamer.kafka.options import SourceOptions
from streamer.kafka.reader import read_ranges
from streamer.kafka.schema import OFFSET_RANGES_SCHEMA


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

    def tallied_to(self, tally) -> DecodeStep:
        """The same step, tallying what it decodes into `tally`."""
        return DecodeStep(self.decoder, self.columns, self.keep_bad_rows, tally, self.source)

    def __call__(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if batch.schema.names != OFFSET_RANGES_SCHEMA.names:
            yield self._rows(batch)
            return
        if self.source is None:
            raise KafkaSourceError("offset ranges of the kafka-arrow source, but no source options to read them with")
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
            skipped: tuple[tuple[str, int], ...] = ()
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
