"""A Kafka record key's or value's format (`streamer.config.choices.DecodeFormat`) with the fields
it decodes to (`FormatSpec`)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from streamer.config.choices import DecodeFormat
from streamer.errors import DecoderSettingsError
from table import arrow_schema_from_avro


def spark_normalized(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema as Spark hands it back: what mapInArrow output and upserts must match.
    (Pure Python: no Spark session needed.)"""
    return to_arrow_schema(from_arrow_schema(schema), timezone="UTC", prefers_large_types=False)


@dataclass(frozen=True)
class FormatSpec:
    """How a key or a value is encoded, and the fields it decodes to."""

    format: DecodeFormat
    arrow_schema: pa.Schema | None
    """The decoded fields: required for json; for the Avro formats, None means the Avro schema's."""
    avro_schema: str | None = None
    """Avro schema JSON: the writer schema for "avro", the reader schema for "confluent-avro"."""

    def __post_init__(self):
        object.__setattr__(self, "format", DecodeFormat.parse(self.format, "format"))
        if self.format == DecodeFormat.JSON and self.arrow_schema is None:
            raise DecoderSettingsError("format 'json' needs an Arrow schema")
        if self.format in (DecodeFormat.AVRO, DecodeFormat.CONFLUENT_AVRO) and self.avro_schema is None:
            raise DecoderSettingsError(f"format '{self.format}' needs an Avro schema")

    def decoded_type(self) -> pa.DataType | None:
        """The Arrow type the records decode to; None for "none"."""
        if self.format == DecodeFormat.NONE:
            return None
        if self.format in (DecodeFormat.STRING, DecodeFormat.BINARY):
            return pa.string() if self.format == DecodeFormat.STRING else pa.binary()
        return pa.struct(list(self.fields()))

    def fields(self) -> pa.Schema:
        """The fields a structured format (json, avro, confluent-avro) decodes to."""
        if self.arrow_schema is not None:
            return self.arrow_schema
        if self.avro_schema is not None:
            return arrow_schema_from_avro(self.avro_schema)
        raise DecoderSettingsError(f"format '{self.format}' decodes to no fields")

    def avro_text(self) -> str:
        """The Avro schema, which the Avro formats always have; a DecoderSettingsError otherwise."""
        if self.avro_schema is None:
            raise DecoderSettingsError(f"format '{self.format}' has no Avro schema")
        return self.avro_schema
