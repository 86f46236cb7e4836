"""`.hoodie/hoodie.properties`: the table's identity and format, as Hudi 0.14/0.15 writes it.

The file is a `java.util.Properties` text (Properties.store: two comment lines, `key=value`
with ':' '=' '#' '!' and leading spaces escaped, non-ASCII as \\uXXXX), ending with a CRC32
checksum of "<database>.<table>" that Hudi checks on load. `TableConfig` holds the keys Hudi
defines, typed, with Hudi's default for each key a file may omit; keys it does not know are
kept and written back unchanged.

What is deliberately absent from the tables we create:
- `hoodie.table.metadata.partitions`: no metadata table. Without it (and always for table
  version 6) hudi-rs and Hudi readers list the file system instead of reading `.hoodie/metadata`.
- `hoodie.index.*` / `hoodie.bucket.index.*`: Hudi 0.14/0.15 keep index settings in the writer's
  config, not in hoodie.properties (apache/hudi#13241); a consistent-hashing table records its
  buckets only in `.hoodie/.bucket_index/consistent_hashing_metadata`.
- `hoodie.table.record.merge.strategy`: hudi-rs reads that key and accepts only its own names;
  Hudi 0.14/0.15 record the merger under `hoodie.compaction.record.merger.strategy` instead.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from table.errors import FormatError, InvalidRequestError
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR, java_date

PROPERTIES_PATH = f"{METADATA_DIR}/hoodie.properties"

#: The one `hoodie.table.version` this engine reads and writes (Hudi 0.14 and 0.15 write it).
TABLE_VERSION = 6
MERGE_ON_READ = "MERGE_ON_READ"
# Greatest ordering (precombine) value wins, also against deletes carrying an ordering value.
DEFAULT_PAYLOAD_CLASS = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
# HoodieRecordMerger.DEFAULT_MERGER_STRATEGY_UUID: merge through the payload class.
DEFAULT_MERGER_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
SIMPLE_KEY_GENERATOR = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEY_GENERATOR = "org.apache.hudi.keygen.ComplexKeyGenerator"
NON_PARTITIONED_KEY_GENERATOR = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"

_KEYS = {
    "name": "hoodie.table.name",
    "table_type": "hoodie.table.type",
    "version": "hoodie.table.version",
    "database": "hoodie.database.name",
    "record_key_fields": "hoodie.table.recordkey.fields",
    "partition_fields": "hoodie.table.partition.fields",
    "precombine_field": "hoodie.table.precombine.field",
    "key_generator_class": "hoodie.table.keygenerator.class",
    "base_file_format": "hoodie.table.base.file.format",
    "log_file_format": "hoodie.table.log.file.format",
    "timeline_layout_version": "hoodie.timeline.layout.version",
    "timeline_timezone": "hoodie.table.timeline.timezone",
    "hive_style_partitioning": "hoodie.datasource.write.hive_style_partitioning",
    "url_encode_partitioning": "hoodie.datasource.write.partitionpath.urlencode",
    "drop_partition_columns": "hoodie.datasource.write.drop.partition.columns",
    "archivelog_folder": "hoodie.archivelog.folder",
    "populate_meta_fields": "hoodie.populate.meta.fields",
    "payload_class": "hoodie.compaction.payload.class",
    "record_merger_strategy": "hoodie.compaction.record.merger.strategy",
    "create_schema": "hoodie.table.create.schema",
}
CHECKSUM_KEY = "hoodie.table.checksum"


# -- java.util.Properties text ---------------------------------------------------------------


def _escape(text: str, is_key: bool) -> str:
    """Properties.saveConvert with escapeUnicode (Properties.store to a byte stream)."""
    out = []
    for i, ch in enumerate(text):
        code = ord(ch)
        if 61 < code < 127:
            out.append("\\\\" if ch == "\\" else ch)
        elif ch == " ":
            out.append("\\ " if i == 0 or is_key else " ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif code < 0x20 or code > 0x7E:
            units = ch.encode("utf-16-be")
            out.extend(f"\\u{units[j] << 8 | units[j + 1]:04X}" for j in range(0, len(units), 2))
        else:
            out.append(ch)
    return "".join(out)


def _java_instant(moment: datetime) -> str:
    """`java.time.Instant.toString()`: fraction digits in groups of three, none when zero."""
    t = moment.astimezone(UTC)
    frac = ""
    if t.microsecond:
        frac = f".{t.microsecond // 1000:03d}" if t.microsecond % 1000 == 0 else f".{t.microsecond:06d}"
    return t.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


def dumps_properties(props: Mapping[str, str], comment: str, now: datetime | None = None) -> str:
    """The text Properties.store(out, comment) writes: comment, date comment, escaped entries."""
    if not comment.isascii() or "\n" in comment or "\r" in comment:
        raise InvalidRequestError("the comment must be one line of ASCII")
    now = now or datetime.now(UTC)
    lines = [f"#{comment}", f"#{java_date(now)}"]
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _logical_lines(text: str) -> Iterator[str]:
    """Properties.load's lines: comments and blank lines skipped, '\\'-continued lines joined."""
    pending: str | None = None
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending = ""
        pending += line
        trailing = len(pending) - len(pending.rstrip("\\"))
        if trailing % 2:
            pending = pending[:-1]
            continue
        yield pending
        pending = None
    if pending is not None:
        yield pending


def _split_entry(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:":
            return line[:i], line[i + 1 :].lstrip(" \t\f")
        if ch in " \t\f":
            rest = line[i:].lstrip(" \t\f")
            if rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(" \t\f")
            return line[:i], rest
        i += 1
    return line, ""


def _unescape_match(m: re.Match[str]) -> str:
    if m[1] is not None:
        return chr(int(m[1], 16))
    if m[2] == "u":
        raise FormatError("malformed \\uXXXX escape in properties text")
    return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(m[2], m[2])


def _unescape(text: str) -> str:
    decoded = re.sub(r"\\(?:u([0-9a-fA-F]{4})|(.))", _unescape_match, text, flags=re.DOTALL)
    # \uXXXX pairs may be UTF-16 surrogates of one character
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16")


def loads_properties(text: str) -> dict[str, str]:
    """Entries of a Properties text, as Properties.load reads it (later keys win)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        props[_unescape(key)] = _unescape(value)
    return props


# -- the table config ------------------------------------------------------------------------


def table_checksum(database: str | None, name: str) -> int:
    """HoodieTableConfig.generateChecksum: CRC32 of "<database>.<table>" (database may be '')."""
    return zlib.crc32(f"{database or ''}.{name}".encode())


def default_key_generator_class(record_key_fields: tuple[str, ...], partition_fields: tuple[str, ...]) -> str:
    """The key generator Hudi's Spark writer picks for these fields."""
    if not partition_fields:
        return NON_PARTITIONED_KEY_GENERATOR
    if len(record_key_fields) == 1 and len(partition_fields) == 1:
        return SIMPLE_KEY_GENERATOR
    return COMPLEX_KEY_GENERATOR


def _fields(value: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in value.split(",") if f.strip())


def _bool(value: str) -> bool:
    return value.strip().lower() == "true"  # Boolean.parseBoolean


@dataclass(frozen=True)
class TableConfig:
    """hoodie.properties, typed. Field defaults are Hudi's meaning of an absent key."""

    PATH: ClassVar[str] = PROPERTIES_PATH

    name: str
    table_type: str = "COPY_ON_WRITE"
    version: int = TABLE_VERSION
    database: str | None = None
    record_key_fields: tuple[str, ...] = ()
    partition_fields: tuple[str, ...] = ()
    precombine_field: str | None = None
    key_generator_class: str | None = None
    base_file_format: str = "PARQUET"
    log_file_format: str = "HOODIE_LOG"
    timeline_layout_version: int = 1
    timeline_timezone: str = "LOCAL"
    hive_style_partitioning: bool = False
    url_encode_partitioning: bool = False
    drop_partition_columns: bool = False
    archivelog_folder: str = "archived"
    populate_meta_fields: bool = True
    payload_class: str = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
    record_merger_strategy: str = DEFAULT_MERGER_STRATEGY
    create_schema: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # keys this class does not know

    @classmethod
    def for_new_mor_table(
        cls,
        name: str,
        record_key_fields: tuple[str, ...] | list[str],
        partition_fields: tuple[str, ...] | list[str],
        precombine_field: str,
        create_schema: str,
        *,
        database: str = "default",
        key_generator_class: str | None = None,
        hive_style_partitioning: bool = True,
        url_encode_partitioning: bool = False,
    ) -> TableConfig:
        """A MERGE_ON_READ table, version 6, timeline layout 1, UTC instants, no metadata table,
        merged by greatest ordering value (DefaultHoodieRecordPayload)."""
        if not record_key_fields:
            raise InvalidRequestError("a table needs at least one record key field")
        keys, parts = tuple(record_key_fields), tuple(partition_fields)
        return cls(
            name=name,
            table_type=MERGE_ON_READ,
            version=TABLE_VERSION,
            database=database,
            record_key_fields=keys,
            partition_fields=parts,
            precombine_field=precombine_field,
            key_generator_class=key_generator_class or default_key_generator_class(keys, parts),
            timeline_timezone="UTC",
            hive_style_partitioning=hive_style_partitioning,
            url_encode_partitioning=url_encode_partitioning,
            payload_class=DEFAULT_PAYLOAD_CLASS,
            create_schema=create_schema,
        )

    @property
    def ordering_field(self) -> str:
        """The precombine field, which every write merges by: a table without one (Hudi allows it)
        is not one this engine writes."""
        if self.precombine_field is None:
            raise FormatError(
                f"table '{self.name}' has no ordering field ({_KEYS['precombine_field']}); "
                "this engine writes tables whose versions of a key are ordered by one"
            )
        return self.precombine_field

    @property
    def checksum(self) -> int:
        return table_checksum(self.database, self.name)

    def to_properties(self) -> dict[str, str]:
        """The entries to store, checksum last (Hudi appends it when saving)."""
        values: dict[str, str | None] = {
            "name": self.name,
            "table_type": self.table_type,
            "version": str(self.version),
            "database": self.database,
            "record_key_fields": ",".join(self.record_key_fields) or None,
            # an empty value would read as one empty partition field in hudi-rs: omit it
            "partition_fields": ",".join(self.partition_fields) or None,
            "precombine_field": self.precombine_field,
            "key_generator_class": self.key_generator_class,
            "base_file_format": self.base_file_format,
            "log_file_format": self.log_file_format,
            "timeline_layout_version": str(self.timeline_layout_version),
            "timeline_timezone": self.timeline_timezone,
            "hive_style_partitioning": str(self.hive_style_partitioning).lower(),
            "url_encode_partitioning": str(self.url_encode_partitioning).lower(),
            "drop_partition_columns": str(self.drop_partition_columns).lower(),
            "archivelog_folder": self.archivelog_folder,
            "populate_meta_fields": str(self.populate_meta_fields).lower(),
            "payload_class": self.payload_class,
            "record_merger_strategy": self.record_merger_strategy,
            "create_schema": self.create_schema,
        }
        props = {_KEYS[attr]: v for attr, v in values.items() if v is not None}
        props.update({k: v for k, v in self.extra.items() if k != CHECKSUM_KEY})
        props[CHECKSUM_KEY] = str(self.checksum)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TableConfig:
        """Typed config from stored entries; a present checksum must match the name."""
        if _KEYS["name"] not in props:
            raise FormatError(f"{_KEYS['name']} is missing")
        known = {attr: props[key] for attr, key in _KEYS.items() if key in props}
        converters: dict[str, Callable[[str], Any]] = {
            "version": int,
            "timeline_layout_version": int,
            "record_key_fields": _fields,
            "partition_fields": _fields,
            "hive_style_partitioning": _bool,
            "url_encode_partitioning": _bool,
            "drop_partition_columns": _bool,
            "populate_meta_fields": _bool,
        }
        typed = {attr: converters.get(attr, str)(v) for attr, v in known.items()}
        extra = {k: v for k, v in props.items() if k not in _KEYS.values() and k != CHECKSUM_KEY}
        config = cls(**typed, extra=extra)
        stored = props.get(CHECKSUM_KEY)
        if stored is not None and int(stored) != config.checksum:
            raise FormatError(
                f"{CHECKSUM_KEY}={stored} does not match {config.checksum} "
                f"(CRC32 of '{config.database or ''}.{config.name}')"
            )
        return config

    def dumps(self, now: datetime | None = None) -> str:
        now = now or datetime.now(UTC)
        return dumps_properties(self.to_properties(), f"Properties saved on {_java_instant(now)}", now)

    @classmethod
    def loads(cls, text: str) -> TableConfig:
        return cls.from_properties(loads_properties(text))

    @classmethod
    def load(cls, storage: Storage) -> TableConfig:
        return cls.loads(storage.read_bytes(cls.PATH).decode("latin-1"))

    def save(self, storage: Storage, *, overwrite: bool = False) -> None:
        """Write the file whole; unless `overwrite`, fail (FileExistsError) if a table is there."""
        data = self.dumps().encode("ascii")
        if overwrite:
            storage.write_bytes(self.PATH, data)
        else:
            storage.create(self.PATH, data)
