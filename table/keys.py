"""Record keys and partition paths, as Hudi's built-in key generators make them.

A Hudi record is identified by its record key and partition path, both strings that Hudi stores in
the `_hoodie_record_key` / `_hoodie_partition_path` meta columns and that the bucket index hashes.
A table written here must produce exactly the strings Hudi 0.14/0.15 would produce for the same
rows, or a Hudi writer upserting into the table later would not find our records.

What Hudi does (hudi-client-common `KeyGenUtils`, `SimpleAvroKeyGenerator`,
`ComplexAvroKeyGenerator`, `NonpartitionedAvroKeyGenerator`, `PartitionPathEncodeUtils`):

- `SimpleKeyGenerator` (one record key field, one partition field): the record key is the
  field's value as a string; null or empty is an error.
- `ComplexKeyGenerator` (several record key fields and/or several partition fields): the record
  key is `f1:v1,f2:v2`. Hudi encodes a null part as `__null__` and an empty one as `__empty__`
  and fails only when every part is null or empty; this module refuses any null or empty part
  unless `allow_partial_null_keys` is set (then it writes Hudi's placeholders). With a single
  record key field Hudi 0.14.0 (and 1.x by default) writes `f1:v1`, while 0.14.1/0.15.0 write the
  bare `v1` (HUDI-7001); `complex_single_field_encoding` chooses, `field_prefixed` by default.
- `NonpartitionedKeyGenerator` (no partition fields): partition path `""`; the record key is the
  bare value with one record key field, `f1:v1,f2:v2` with several.
- Partition path: each field's value, `__HIVE_DEFAULT_PARTITION__` when null or empty, escaped
  like Hive's `FileUtils.escapePathName` when URL-encoding is on, `field=value` when hive-style,
  the parts joined by `/`.

Values become strings the way Hudi's Avro path renders them (`String.valueOf` of the Avro
value after its logical-type conversion): integers and strings as they are, booleans
`true`/`false`, floating point as Java's `Double.toString`/`Float.toString`, decimals as Java's
`BigDecimal.toString`, dates as ISO `yyyy-MM-dd`, timestamps as the epoch number of their Avro
logical type (`timestamp-millis` for second/millisecond arrays, `timestamp-micros` for
microsecond/nanosecond arrays, as Hudi does without `consistent.logical.timestamp`), times as
their epoch number (millis for time32, micros for time64). Binary, nested and list values are
refused: Hudi would key them by a Java object's `toString`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.errors import KeyGenerationError

SIMPLE_KEY_GENERATOR = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEY_GENERATOR = "org.apache.hudi.keygen.ComplexKeyGenerator"
NONPARTITIONED_KEY_GENERATOR = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
KEY_GENERATOR_CLASSES = (SIMPLE_KEY_GENERATOR, COMPLEX_KEY_GENERATOR, NONPARTITIONED_KEY_GENERATOR)

#: Hudi's partition value for a null or empty partition field (PartitionPathEncodeUtils).
DEFAULT_PARTITION_PATH = "__HIVE_DEFAULT_PARTITION__"
NULL_RECORDKEY_PLACEHOLDER = "__null__"
EMPTY_RECORDKEY_PLACEHOLDER = "__empty__"
#: Separators of a complex record key (`f1:v1,f2:v2`) and of a multi-field partition path.
RECORD_KEY_PARTS_SEPARATOR = ","
COLUMN_VALUE_SEPARATOR = ":"
PARTITION_PATH_SEPARATOR = "/"

FIELD_PREFIXED = "field_prefixed"
VALUE_ONLY = "value_only"

# Characters Hive (and so Hudi) percent-escapes in a partition path value: ASCII controls and
# "#%'*/:=?\{[]^ and DEL. Characters outside ASCII are left as they are.
_ESCAPED_CHARS = frozenset([chr(c) for c in range(0x20)] + list("\"#%'*/:=?\\{[]^") + ["\x7f"])


def split_fields(fields: str | Iterable[str] | None) -> tuple[str, ...]:
    """Field names from Hudi's comma-separated form or a sequence, trimmed, empty ones dropped."""
    if fields is None:
        return ()
    items = fields.split(",") if isinstance(fields, str) else list(fields)
    return tuple(f.strip() for f in items if f and f.strip())


def infer_key_generator_class(record_key_fields: Sequence[str], partition_fields: Sequence[str]) -> str:
    """The key generator Hudi infers from the fields (KeyGenUtils.inferKeyGeneratorType)."""
    if not partition_fields:
        return NONPARTITIONED_KEY_GENERATOR
    if len(partition_fields) == 1 and len(record_key_fields) <= 1:
        return SIMPLE_KEY_GENERATOR
    return COMPLEX_KEY_GENERATOR


@dataclass(frozen=True, init=False)
class KeyGenerator:
    """Makes the record keys and partition paths of a batch, vectorized over a pyarrow table.

    `class_name` is what `hoodie.table.keygenerator.class` records; by default it is inferred
    from the fields as Hudi infers it. Picklable, so it can travel to Spark executors. Fields are
    given in Hudi's comma-separated form or as a sequence.
    """

    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    hive_style_partitioning: bool
    url_encode_partitions: bool
    key_generator_class: str | None
    complex_single_field_encoding: str
    allow_partial_null_keys: bool

    def __init__(
        self,
        record_key_fields: str | Iterable[str],
        partition_fields: str | Iterable[str] | None = (),
        hive_style_partitioning: bool = False,
        url_encode_partitions: bool = False,
        key_generator_class: str | None = None,
        complex_single_field_encoding: str = FIELD_PREFIXED,
        allow_partial_null_keys: bool = False,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "record_key_fields", split_fields(record_key_fields))
        set_field(self, "partition_fields", split_fields(partition_fields))
        set_field(self, "hive_style_partitioning", hive_style_partitioning)
        set_field(self, "url_encode_partitions", url_encode_partitions)
        set_field(self, "key_generator_class", key_generator_class)
        set_field(self, "complex_single_field_encoding", complex_single_field_encoding)
        set_field(self, "allow_partial_null_keys", allow_partial_null_keys)
        if not self.record_key_fields:
            raise KeyGenerationError("a key generator needs at least one record key field")
        cls = self.key_generator_class or infer_key_generator_class(self.record_key_fields, self.partition_fields)
        if cls not in KEY_GENERATOR_CLASSES:
            raise KeyGenerationError(
                f"unsupported key generator class {cls!r}; supported: {list(KEY_GENERATOR_CLASSES)}"
            )
        if cls == SIMPLE_KEY_GENERATOR and (len(self.record_key_fields) != 1 or len(self.partition_fields) != 1):
            raise KeyGenerationError(
                f"{SIMPLE_KEY_GENERATOR} takes exactly one record key field and one partition field, got "
                f"record key fields {list(self.record_key_fields)} and partition fields {list(self.partition_fields)}"
            )
        if cls == NONPARTITIONED_KEY_GENERATOR and self.partition_fields:
            raise KeyGenerationError(
                f"{NONPARTITIONED_KEY_GENERATOR} takes no partition fields, got {list(self.partition_fields)}"
            )
        if self.complex_single_field_encoding not in (FIELD_PREFIXED, VALUE_ONLY):
            raise KeyGenerationError(
                f"complex_single_field_encoding must be {FIELD_PREFIXED!r} or {VALUE_ONLY!r}, "
                f"got {self.complex_single_field_encoding!r}"
            )
        object.__setattr__(self, "key_generator_class", cls)

    # ---- construction --------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: Any) -> KeyGenerator:
        """From a table config object (attributes) or a hoodie.properties mapping."""
        if isinstance(config, Mapping):
            return cls(
                record_key_fields=split_fields(config.get("hoodie.table.recordkey.fields")),
                partition_fields=split_fields(config.get("hoodie.table.partition.fields")),
                hive_style_partitioning=_truthy(config.get("hoodie.datasource.write.hive_style_partitioning")),
                url_encode_partitions=_truthy(config.get("hoodie.datasource.write.partitionpath.urlencode")),
                key_generator_class=config.get("hoodie.table.keygenerator.class") or None,
            )
        return cls(
            record_key_fields=split_fields(config.record_key_fields),
            partition_fields=split_fields(getattr(config, "partition_fields", ())),
            hive_style_partitioning=bool(getattr(config, "hive_style_partitioning", False)),
            url_encode_partitions=bool(getattr(config, "url_encode_partitions", False)),
            key_generator_class=getattr(config, "key_generator_class", None) or None,
        )

    # ---- what hoodie.properties records --------------------------------------------------

    @property
    def class_name(self) -> str:
        return self.key_generator_class  # type: ignore[return-value]

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields)

    @property
    def encodes_field_names(self) -> bool:
        """Whether record keys take the `field:value` form."""
        if len(self.record_key_fields) > 1:
            return True
        return self.class_name == COMPLEX_KEY_GENERATOR and self.complex_single_field_encoding == FIELD_PREFIXED

    def table_properties(self) -> dict[str, str]:
        """The hoodie.properties entries that describe the keys."""
        return {
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
            "hoodie.table.partition.fields": ",".join(self.partition_fields),
            "hoodie.table.keygenerator.class": self.class_name,
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": str(self.url_encode_partitions).lower(),
        }

    # ---- keys ----------------------------------------------------------------------------

    def record_keys(self, records: pa.Table | pa.RecordBatch) -> pa.Array:
        """The record key of every row, as a string array without nulls.

        Raises KeyGenerationError naming the field and the number of rows when a key value is
        null or empty (and for the other reasons Hudi could not key the row).
        """
        total = records.num_rows
        values = [_field_strings(records, f) for f in self.record_key_fields]
        if not self.encodes_field_names:
            (field,), (value,) = self.record_key_fields, values
            _require_present(field, value, total)
            return value
        if self.allow_partial_null_keys:
            return self._complex_keys_with_placeholders(values, total)
        for field, value in zip(self.record_key_fields, values):
            _require_present(field, value, total)
        parts: list[object] = []
        for i, (field, value) in enumerate(zip(self.record_key_fields, values)):
            parts.append((RECORD_KEY_PARTS_SEPARATOR if i else "") + field + COLUMN_VALUE_SEPARATOR)
            parts.append(value)
        return _join(parts, total)

    def _complex_keys_with_placeholders(self, values: list[pa.Array], total: int) -> pa.Array:
        all_missing: pa.Array | None = None
        parts: list[object] = []
        for i, (field, value) in enumerate(zip(self.record_key_fields, values)):
            missing = _missing_mask(value)
            all_missing = missing if all_missing is None else pc.and_(all_missing, missing)
            encoded = pc.if_else(
                pc.is_null(value),
                NULL_RECORDKEY_PLACEHOLDER,
                pc.if_else(pc.equal(value, ""), EMPTY_RECORDKEY_PLACEHOLDER, value),
            )
            parts.append((RECORD_KEY_PARTS_SEPARATOR if i else "") + field + COLUMN_VALUE_SEPARATOR)
            parts.append(encoded)
        bad = pc.sum(all_missing).as_py() or 0
        if bad:
            first = pc.index(all_missing, True).as_py()
            raise KeyGenerationError(
                f"record key fields {list(self.record_key_fields)} are all null or empty in {bad} of {total} "
                f"row(s) (first at row {first}); a record key cannot be entirely null or empty"
            )
        return _join(parts, total)

    def partition_paths(self, records: pa.Table | pa.RecordBatch) -> pa.Array:
        """The partition path of every row ("" for a non-partitioned table)."""
        total = records.num_rows
        if not self.partition_fields:
            return pa.array([""] * total, pa.string()) if total else pa.array([], pa.string())
        parts: list[object] = []
        for i, field in enumerate(self.partition_fields):
            if i:
                parts.append(PARTITION_PATH_SEPARATOR)
            parts.append(self._partition_part(field, _field_strings(records, field), total))
        return _join(parts, total)

    def _partition_part(self, field: str, values: pa.Array, total: int) -> pa.Array:
        encoded = values.dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        prefix = f"{field}=" if self.hive_style_partitioning else ""
        rendered = [prefix + self._partition_value(v) for v in dictionary]
        default = prefix + DEFAULT_PARTITION_PATH
        out = pc.take(pa.array(rendered, pa.string()), encoded.indices) if rendered else pa.nulls(total, pa.string())
        return pc.fill_null(out, default)

    def _partition_value(self, value: str | None) -> str:
        if not value:
            return DEFAULT_PARTITION_PATH
        return escape_path_name(value) if self.url_encode_partitions else value

    def keys(self, records: pa.Table | pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
        return self.record_keys(records), self.partition_paths(records)


# ---- partition path escaping -----------------------------------------------------------------


def escape_path_name(value: str) -> str:
    """Hive's `FileUtils.escapePathName` as Hudi copies it: `%XX` (upper hex) for the listed chars."""
    if not value:
        return DEFAULT_PARTITION_PATH
    if not any(c in _ESCAPED_CHARS for c in value):
        return value
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED_CHARS else c for c in value)


def unescape_path_name(value: str) -> str:
    """The inverse of `escape_path_name` (Hudi's `unescapePathName`)."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c == "%" and i + 2 < n:
            code = _hex_code(value[i + 1 : i + 3])
            if code is not None:
                out.append(chr(code))
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _hex_code(text: str) -> int | None:
    # Java's Integer.parseInt(text, 16) on two characters, negative results refused
    digits = text[1:] if text[:1] == "+" else text
    if not digits or any(ch not in "0123456789abcdefABCDEF" for ch in digits):
        return None
    return int(digits, 16)


# ---- values as Hudi renders them -------------------------------------------------------------


def _field_strings(records: pa.Table | pa.RecordBatch, field: str) -> pa.Array:
    column = _field_column(records, field)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    try:
        return java_strings(column)
    except KeyGenerationError as e:
        raise KeyGenerationError(f"field '{field}': {e}") from None


def _field_column(records: pa.Table | pa.RecordBatch, field: str) -> pa.Array | pa.ChunkedArray:
    names = records.schema.names
    if field in names:
        return records.column(field)
    head, *rest = field.split(".")
    if not rest or head not in names:
        raise KeyGenerationError(f"key field '{field}' is not in the batch (columns: {names})")
    column = records.column(head)
    path = head
    for name in rest:
        column_type = column.type
        if not pa.types.is_struct(column_type) or column_type.get_field_index(name) < 0:
            raise KeyGenerationError(f"key field '{field}' is not in the batch: '{path}' has no field '{name}'")
        column = pc.struct_field(column, name)
        path = f"{path}.{name}"
    return column


def is_key_type(t: pa.DataType) -> bool:
    """Whether values of `t` can be record keys or partition values (`java_strings` renders them)."""
    if pa.types.is_dictionary(t):
        return is_key_type(t.value_type)
    if isinstance(t, pa.ExtensionType):
        return is_key_type(t.storage_type)
    return any(
        check(t)
        for check in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_string_view,
            pa.types.is_integer,
            pa.types.is_boolean,
            pa.types.is_floating,
            pa.types.is_decimal,
            pa.types.is_date,
            pa.types.is_timestamp,
            pa.types.is_time,
        )
    )


def java_strings(values: pa.Array) -> pa.Array:
    """`String.valueOf` of each value as Hudi's Avro path sees it; nulls stay null."""
    t = values.type
    if pa.types.is_dictionary(t):
        return java_strings(values.dictionary_decode())
    if isinstance(t, pa.ExtensionType):
        return java_strings(values.storage)
    if pa.types.is_null(t):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_string(t):
        return values
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return values.cast(pa.string())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return values.cast(pa.string())
    if pa.types.is_floating(t):
        return _by_unique(
            values, lambda v: java_float_to_string(v, single=pa.types.is_float32(t) or pa.types.is_float16(t))
        )
    if pa.types.is_decimal(t):
        return _by_unique(values, java_big_decimal_to_string)
    if pa.types.is_date(t):
        return values.cast(pa.date32()).cast(pa.string())
    if pa.types.is_timestamp(t):
        unit = t.unit
        ints = values.cast(pa.int64())  # epoch count in the array's unit, time zone ignored
        if unit == "s":
            ints = pc.multiply(ints, 1000)
        elif unit == "ns":
            ints = _floordiv(ints, 1000)
        return ints.cast(pa.string())
    if pa.types.is_time(t):
        ints = values.cast(pa.int64())
        if t.unit == "s":
            ints = pc.multiply(ints, 1000)
        elif t.unit == "ns":
            ints = _floordiv(ints, 1000)
        return ints.cast(pa.string())
    raise KeyGenerationError(f"values of type {t} cannot be a Hudi key or partition value")


def _floordiv(ints: pa.Array, divisor: int) -> pa.Array:
    arr = ints.to_numpy(zero_copy_only=False) if ints.null_count == 0 else None
    if arr is not None:
        return pa.array(np.floor_divide(arr, divisor), pa.int64())
    mask = ints.is_null().to_numpy(zero_copy_only=False)
    filled = pc.fill_null(ints, 0).to_numpy(zero_copy_only=False)
    return pa.array(np.floor_divide(filled, divisor), pa.int64(), mask=mask)


def _by_unique(values: pa.Array, render: Callable[[Any], str]) -> pa.Array:
    encoded = values.dictionary_encode()
    rendered = [render(v) for v in encoded.dictionary.to_pylist()]
    if not rendered:
        return pa.nulls(len(values), pa.string())
    return pc.take(pa.array(rendered, pa.string()), encoded.indices)


def java_float_to_string(value: float, single: bool = False) -> str:
    """Java's `Double.toString` (or `Float.toString` when `single`): shortest round-trip digits,
    plain notation for 1e-3 <= |v| < 1e7, otherwise `d.dddE<exp>`."""
    if math.isnan(value):
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if np.signbit(value) else "0.0"
    number = np.float32(value) if single else np.float64(value)
    mantissa, exp_text = np.format_float_scientific(number, unique=True, trim="-").split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exp = int(exp_text)
    if len(digits) == 1:
        # Java renders at least two significant digits and then takes the closest such decimal
        # that still reads back as the value (Double.MIN_VALUE is 4.9E-324, not 5.0E-324).
        two = f"{abs(float(number)):.1e}"
        back = np.float32(two) if single else np.float64(two)
        if back == abs(number):
            m2, e2 = two.split("e")
            digits, exp = (m2.replace(".", "").rstrip("0") or "0"), int(e2)
    if -3 <= exp < 7:
        if exp >= 0:
            whole = digits[: exp + 1].ljust(exp + 1, "0")
            frac = digits[exp + 1 :] or "0"
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def java_big_decimal_to_string(value: Decimal) -> str:
    """Java's `BigDecimal.toString`: the same scientific-string rule as Python's `str(Decimal)`."""
    return str(value)


# ---- helpers ---------------------------------------------------------------------------------


def _missing_mask(values: pa.Array) -> pa.Array:
    return pc.fill_null(pc.equal(values, ""), True)


def _require_present(field: str, values: pa.Array, total: int) -> None:
    nulls = values.null_count
    empty = (pc.sum(pc.equal(values, "")).as_py() or 0) if len(values) else 0
    if nulls or empty:
        first = pc.index(_missing_mask(values), True).as_py()
        raise KeyGenerationError(
            f"record key field '{field}' is null or empty in {nulls + empty} of {total} row(s) "
            f"({nulls} null, {empty} empty; first at row {first}); Hudi record keys cannot be null or empty"
        )


def _join(parts: list[object], total: int) -> pa.Array:
    arrays = [p for p in parts if isinstance(p, (pa.Array, pa.ChunkedArray))]
    if not arrays:
        return pa.array(["".join(str(p) for p in parts)] * total, pa.string())
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, "")


def _truthy(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true" if value is not None else False
