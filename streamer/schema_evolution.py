"""A table's schema evolving with the writer schemas of a `confluent-avro` stream.

Spark fixes the columns of a streaming query's plan when it starts, so the query decodes with
the reader schema it started with, and records whose writer schema adds fields or widens types
come out of it undecoded (`decode.EVOLVING` holds their schema id). For each batch, on the
driver, `SchemaEvolution.resolve` evolves the reader schema with those writer schemas
(`streamer.value_schema`), decodes the deferred records with it, and gives the other rows the
new columns (null) and the wider types. The sink writes the batch as one deltacommit: its
metadata carries the evolved table schema (Hudi's `schema`) and the reader schema
(`VALUE_SCHEMA_KEY`), from which the next start continues. Nothing is written until then, so a
crash in between replays the batch and evolves the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from streamer.decode import (
    ADDED_COLUMNS,
    EVOLVING,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TOPIC,
    RAW_KEY,
    RAW_VALUE,
    RecordDecoder,
)
from streamer.schema_registry import SchemaRegistryClient
from streamer.value_schema import compare, evolve_json
from table.commit_metadata import CommitMetadata
from table.mor_table import MorTable
from table.schema import arrow_schema_from_avro

log = logging.getLogger(__name__)

#: extraMetadata key of the value's Avro reader schema the commit's records were decoded with.
VALUE_SCHEMA_KEY = "mor.streamer.value_schema"


class SchemaEvolution:
    """One table's value reader schema, from the one its query started with (`stream_decoder`'s)
    to the latest evolved one; `decoder_for` makes the decoder of a reader schema."""

    def __init__(self, table_name: str, reader_schema: str, stream_decoder: RecordDecoder,
                 decoder_for: Callable[[str], RecordDecoder], registry: SchemaRegistryClient):
        self.table_name = table_name
        self.reader_schema = reader_schema
        self.stream_decoder = stream_decoder
        self.decoder = stream_decoder
        self._decoder_for = decoder_for
        self._registry = registry
        self._compared: set[int] = set()  # schema ids that fit, or were refused, stay so as it grows

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(arrow_schema_from_avro(self.reader_schema).names)

    def resolve(self, decoded: DataFrame) -> DataFrame:
        """The batch as the current reader schema decodes it (without the `EVOLVING` column):
        one Spark job finds the deferred records' schema ids, another decodes them if any."""
        schema_ids = sorted(r[0] for r in decoded.where(F.col(EVOLVING).isNotNull()).select(EVOLVING).distinct().collect())
        for schema_id in schema_ids:
            if schema_id not in self._compared:
                self._evolve(schema_id)
                self._compared.add(schema_id)
        if self.decoder is self.stream_decoder:
            return decoded.drop(EVOLVING)
        output = from_arrow_schema(self.decoder.output_schema)
        present = set(decoded.columns)
        decoded_already = decoded.where(F.col(EVOLVING).isNull()).select(*(
            (F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name) for f in output))
        if not schema_ids:
            return decoded_already.drop(EVOLVING)
        deferred = decoded.where(F.col(EVOLVING).isNotNull()).select(
            F.col(RAW_KEY).alias("key"), F.col(RAW_VALUE).alias("value"), F.col(KAFKA_TOPIC).alias("topic"),
            F.col(KAFKA_PARTITION).alias("partition"), F.col(KAFKA_OFFSET).alias("offset"),
            F.col(KAFKA_TIMESTAMP).alias("timestamp"))
        decoded_now = deferred.mapInArrow(self.decoder.decode_batches, output)
        return decoded_already.unionByName(decoded_now).drop(EVOLVING)

    def _evolve(self, schema_id: int) -> None:
        """The reader schema evolved by a writer schema, if that evolves it. One that does not
        fit it any more (two writer schemas adding a field with different types) leaves it be:
        the decoder then refuses its records, saying why."""
        text = self._registry.schema_by_id(schema_id)
        if text is None:
            return
        change = compare(json.loads(self.reader_schema), json.loads(text), ADDED_COLUMNS)
        if not change.evolves:
            return
        self.reader_schema = evolve_json(self.reader_schema, change)
        self.decoder = self._decoder_for(self.reader_schema)
        added = [f["name"] for f in change.added]
        widened = [name for name, _ in change.widened]
        log.info("%s: writer schema id %d evolves the table's schema: new column(s) %s, widened %s",
                 self.table_name, schema_id, added, widened)


def stored_value_schema(table: MorTable) -> str | None:
    """The value reader schema of the table's latest write that records one."""
    timeline = table.timeline()
    for instant in reversed(timeline.completed_writes()):
        metadata = CommitMetadata.from_json(timeline.read_content(instant))
        if VALUE_SCHEMA_KEY in metadata.extra_metadata:
            return metadata.extra_metadata[VALUE_SCHEMA_KEY]
    return None
