"""The formats a Kafka record's key or value can be encoded in, and a key's or value's format with
the fields it decodes to (`FormatSpec`)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from table.schema import arrow_schema_from_avro

FORMATS = ("none", "string", "binary", "json", "avro", "confluent-avro")
RECORD_FORMATS = ("json", "avro", "confluent-avro")
"""Formats that decode to fields (a struct): the only ones a value can have."""


@dataclass(frozen=True)
class FormatSpec:
    """How a key or a value is encoded, and the fields it decodes to."""

    format: str
    """One of FORMATS."""
    arrow_schema: pa.Schema | None
    """The decoded fields: required for json; for the Avro formats, None means the Avro schema's."""
    avro_schema: str | None = None
    """Avro schema JSON: the writer schema for "avro", the reader schema for "confluent-avro"."""

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}; expected one of {', '.join(FORMATS)}")
        if self.format == "json" and self.arrow_schema is None:
            raise ValueError("format 'json' needs an Arrow schema")
        if self.format in ("avro", "confluent-avro") and self.avro_schema is None:
            raise ValueError(f"format {self.format!r} needs an Avro schema")

    def decoded_type(self) -> pa.DataType | None:
        """The Arrow type the records decode to; None for "none"."""
        if self.format == "none":
            return None
        if self.format in ("string", "binary"):
            return pa.string() if self.format == "string" else pa.binary()
        fields = self.arrow_schema if self.arrow_schema is not None else arrow_schema_from_avro(self.avro_schema)
        return pa.struct(list(fields))
