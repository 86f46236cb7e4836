"""Avro plans and metadata of table-service instants, written as Hudi writes them.

Hudi's TimelineMetadataUtils stores each of these as an Avro object container file (no codec)
holding one record of an `org.apache.hudi.avro.model` schema:

    HoodieRollbackPlan              <ts>.rollback.requested
    HoodieRollbackMetadata          <ts>.rollback
    HoodieCompactionPlan            <ts>.compaction.requested
    HoodieRequestedReplaceMetadata  <ts>.replacecommit.requested (clustering plan)
    HoodieCleanerPlan               <ts>.clean.requested and <ts>.clean.inflight
    HoodieCleanMetadata             <ts>.clean

The schemas are JSON files in `table/timeline/avro/`, one named record per file as in Hudi's
hudi-common/src/main/avro; a reference to another file's record is by name, and is inlined
here so that the schema embedded in every file we write stands alone. Reading resolves the
file's own (writer) schema against ours, so plans written by Hudi versions with more or fewer
optional fields read the same.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any, cast

import fastavro
from fastavro.validation import ValidationError

from table.errors import FormatError

SCHEMA_DIR = Path(__file__).with_name("avro")
_NAMESPACE = "org.apache.hudi.avro.model"


@functools.cache
def _definitions() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in SCHEMA_DIR.glob("*.avsc")}


def _inline(node: Any, seen: set[str]) -> Any:
    """Replace the first reference to each named record by its definition, in document order."""
    defs = _definitions()
    if isinstance(node, str):
        name = node.removeprefix(f"{_NAMESPACE}.")
        return _inline(defs[name], seen) if name in defs and name not in seen else node
    if isinstance(node, list):
        return [_inline(n, seen) for n in node]
    out = dict(node)
    kind = node.get("type")
    if kind == "record":
        seen.add(node["name"])
        out["fields"] = [{**f, "type": _inline(f["type"], seen)} for f in node["fields"]]
    elif kind == "array":
        out["items"] = _inline(node["items"], seen)
    elif kind == "map":
        out["values"] = _inline(node["values"], seen)
    return out


@functools.cache
def schema(schema_name: str) -> dict[str, Any]:
    """The self-contained Avro schema of a plan or metadata record (KeyError if unknown)."""
    return _inline(_definitions()[schema_name], set())


@functools.cache
def _parsed(schema_name: str) -> dict[str, Any]:
    return cast(dict[str, Any], fastavro.parse_schema(schema(schema_name)))


def serialize_plan(schema_name: str, record: dict[str, Any]) -> bytes:
    """An Avro container file with the one record; absent optional fields take their defaults.

    ValueError when the record does not fit the schema (a required field missing, a wrong type).
    """
    out = io.BytesIO()
    try:
        fastavro.writer(out, _parsed(schema_name), [record], validator=True)
    except ValidationError as e:
        raise FormatError(f"not a valid {schema_name}: {e}") from e
    return out.getvalue()


def deserialize_plan(schema_name: str, data: bytes) -> dict[str, Any]:
    """The record of an Avro container file written by us or by Hudi."""
    if not data:
        raise FormatError(f"empty content where a {schema_name} was expected")
    records = list(fastavro.reader(io.BytesIO(data), reader_schema=_parsed(schema_name)))
    if len(records) != 1:
        raise FormatError(f"expected one {schema_name} record, found {len(records)}")
    return cast(dict[str, Any], records[0])
