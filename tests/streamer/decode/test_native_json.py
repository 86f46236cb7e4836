"""The native JSON decoder (streamer/decode/native_json.py, native/src/json.rs) against Arrow's JSON
reader, which the `json` format used alone before: what the native decoder takes it reads exactly
as Arrow does, and what it cannot be sure of it leaves to Arrow whole."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from streamer.decode.json import JsonDecoder, _JsonBatch
from streamer.decode.native_json import ALIAS_READ, TARGET_READ, NativeJson, alias

pytestmark = pytest.mark.unit

ROW = pa.struct(
    [
        pa.field("flag", pa.bool_()),
        pa.field("tiny", pa.int8()),
        pa.field("small", pa.int16()),
        pa.field("int", pa.int32()),
        pa.field("long", pa.int64()),
        pa.field("single", pa.float32()),
        pa.field("double", pa.float64()),
        pa.field("text", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.timestamp("ms")),
        pa.field("where", pa.struct([pa.field("city", pa.string()), pa.field("floor", pa.int32())])),
        pa.field("id", pa.int64(), nullable=False),
    ]
)

GOOD = [
    '{"id": 1}',
    ' \t\r\n{"id":2}\n ',
    '{"id":3,"flag":true,"tiny":-128,"small":32767,"int":-2147483648,"long":9223372036854775807}',
    '{"id":4,"long":-9223372036854775808,"tiny":127,"small":-32768,"int":2147483647,"flag":false}',
    '{"id":5,"double":0.1,"single":0.1}',
    '{"id":6,"double":-0.0,"single":-0}',
    '{"id":7,"double":1.7976931348623157e308,"single":3.4028235e38}',
    '{"id":8,"double":5e-324,"single":1.4e-45}',
    '{"id":9,"double":123456789012345678901234567890,"single":16777217}',
    '{"id":10,"double":1E+2,"single":2.5e-3}',
    '{"id":11,"double":4,"single":0.30000000000000004}',
    '{"id":12,"text":"plain"}',
    '{"id":13,"text":"q\\"b\\\\s\\/n\\nr\\rt\\tb\\bf\\f"}',
    '{"id":14,"text":"\\u00e9\\u2603 \\ud83d\\ude00 é ☃ 😀"}',
    '{"id":15,"text":""}',
    '{"id":16,"text":null,"flag":null,"double":null,"where":null}',
    '{"id":17,"where":{}}',
    '{"id":18,"where":{"city":"Oslo","floor":3,"extra":[1,2]}}',
    '{"id":19,"where":{"floor":null}}',
    '{"id":20,"unknown":{"a":[1,{"b":null}],"c":"\\u0041\\n"},"more":[],"n":-1.5e-7,"t":true}',
    '{ "id" : 21 , "text" : "spaced" , "where" : { "city" : "Rome" } }',
    '{"text":"order","id":22,"flag":true}',
    '{"id":23,"text":"' + "long " * 400 + '"}',
    '{"id":24,"at":"2026-12-02T10:00:00Z","day":"2026-12-02"}',
    '{"id":25,"at":"2026-12-02 10:00:00.000001","day":"2026-12-02T10:00:00.5Z"}',
    '{"id":26,"at":"1969-12-31T23:59:59.5","day":"0000-01-01T00:00"}',
    '{"id":27,"at":"2024-02-29T23:59:59.999999","day":"9999-12-31T23:59:59.999"}',
    '{"id":28,"at":"2000-02-29T00:00Z","day":null}',
]


def _values(decoded: pa.Array) -> list:
    """The records as Python values, timestamps as their integers (Python's datetime has no year 0)."""
    as_ints = [pa.field(f.name, pa.int64() if pa.types.is_timestamp(f.type) else f.type) for f in decoded.type]
    return decoded.cast(pa.struct(as_ints)).to_pylist()


def _binary(records: list[str | bytes | None]) -> pa.Array:
    return pa.array([r.encode() if isinstance(r, str) else r for r in records], pa.binary())


def _arrow(raw: pa.Array) -> tuple[pa.Array, dict[int, str]]:
    return _JsonBatch(raw, ROW, pa.schema(list(ROW))).decode()


def test_the_native_decoder_reads_every_record_it_takes_as_arrows_reader_does():
    raw = _binary([*GOOD, None, *GOOD])
    native = NativeJson(ROW).decode(raw)
    assert native is not None
    native.validate(full=True)
    expected, errors = _arrow(raw)
    assert errors == {}
    assert native.type == expected.type
    assert _values(native) == _values(expected)
    assert native.is_null().to_pylist() == [False] * len(GOOD) + [True] + [False] * len(GOOD)
    sliced = raw.slice(3, 20)  # an array that starts inside its buffers
    assert _values(NativeJson(ROW).decode(sliced)) == _values(expected.slice(3, 20))


@pytest.mark.parametrize(
    "record",
    [
        "",
        "nul",
        "[1]",
        '"text"',
        '{"id":1',
        '{"id":1,}',
        '{"id":1} {"id":2}',
        '{"id":1,"id":2}',
        '{"text":"no id"}',
        '{"id":null}',
        '{"id":1.0}',
        '{"id":1e3}',
        '{"id":"1"}',
        '{"id":01}',
        '{"id":1,"tiny":128}',
        '{"id":1,"int":2147483648}',
        '{"id":1,"long":9223372036854775808}',
        '{"id":1,"double":1e400}',
        '{"id":1,"double":NaN}',
        '{"id":1,"single":1e39}',
        '{"id":1,"text":5}',
        '{"id":1,"flag":"true"}',
        '{"id":1,"where":[]}',
        '{"id":1,"text":"\\ud800"}',
        '{"id":1,"text":"\\x"}',
        '{"id":1,"text":"tab\tinside"}',
        '{"\\u0069d":1}',
        '{"id":1,"other":[1,]}',
        b'{"id":1,"text":"\xff"}',
        '{"id":1,"at":"2026-12-02Z"}',
        '{"id":1,"at":"2026-12-02T10:00:00+01:00"}',
        '{"id":1,"at":"2026-12-02T10:00:00.1234567"}',
        '{"id":1,"day":"2026-12-02T10:00:00.1234"}',
        '{"id":1,"at":"2026-12-02T23:59:60"}',
        '{"id":1,"at":"2026-02-29T00:00:00"}',
        '{"id":1,"at":"1900-02-29"}',
        '{"id":1,"at":"2026-12-02T10"}',
        '{"id":1,"at":"2026-12-02t10:00"}',
        '{"id":1,"at":"2026-13-02"}',
        '{"id":1,"at":1796205600000000}',
        '{"id":1,"at":"2026-12-02\\u005410:00"}',
    ],
)
def test_a_record_the_native_decoder_is_not_sure_of_leaves_its_batch_to_arrow(record):
    raw = _binary([GOOD[0], record, GOOD[2]])
    assert NativeJson(ROW).decode(raw) is None
    decoded, errors = JsonDecoder(ROW).decode(raw)
    expected, expected_errors = _arrow(raw)
    assert repr((_values(decoded), errors)) == repr((_values(expected), expected_errors))  # NaN too


def test_a_struct_with_a_type_the_native_decoder_does_not_read_is_decoded_by_arrow():
    row = pa.struct([pa.field("price", pa.decimal128(10, 2)), pa.field("id", pa.int64())])
    assert not NativeJson(row).available
    decoded, errors = JsonDecoder(row).decode(_binary([json.dumps({"price": "12.50", "id": 1})]))
    assert errors == {} and decoded.to_pylist() == [{"price": Decimal("12.50"), "id": 1}]


def test_records_with_bytes_deleted_inserted_or_changed_are_read_as_arrow_reads_them_or_left_to_it():
    rng = random.Random(69)
    alphabet = b'{}[]":,.-+eE0123456789 \\nutfalsrTZ\x00\xc3\xa9ab'
    native = NativeJson(ROW)
    taken = 0
    for _ in range(3000):
        record = bytearray(rng.choice(GOOD).encode())
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(record))
            edit = rng.randrange(3)
            if edit == 0:
                del record[at]
            elif edit == 1:
                record.insert(at, rng.choice(alphabet))
            else:
                record[at] = rng.choice(alphabet)
        raw = _binary([bytes(record)])
        decoded = native.decode(raw)
        if decoded is not None:
            taken += 1
            expected, errors = _arrow(raw)
            assert (repr(_values(decoded)), errors) == (repr(_values(expected)), {}), bytes(record)
    assert taken > 300  # the edits that leave valid JSON of the right types are taken natively


PAIR = pa.struct([alias("before", "after"), pa.field("after", ROW), pa.field("op", pa.string())])
BEFORE = (
    '{"id":30,"flag":true,"tiny":1,"small":2,"int":3,"long":4,"single":0.5,"double":0.25,"text":"old",'
    '"at":"2026-12-02T10:00:00Z","day":"2026-12-02","where":{"city":"Oslo","floor":3}}'
)  # a value of every kind, each taken back when `after` follows
AFTER = GOOD[3]


def test_an_alias_is_read_into_the_columns_of_the_field_it_aliases_whose_own_value_wins():
    """Debezium's `before` in `after`'s columns: a delete's row is its `before`, an update's its
    `after` whichever of the two is written first, and the alias says which were there."""
    records = [
        f'{{"before":null,"after":{AFTER},"op":"c"}}',
        f'{{"before":{BEFORE},"after":null,"op":"d"}}',
        f'{{"before":{BEFORE},"after":{AFTER},"op":"u"}}',
        f'{{"after":{AFTER},"op":"u","before":{BEFORE}}}',
        f'{{"before":{BEFORE}}}',
        '{"op":"t"}',
        None,
        f'{{"before":{AFTER},"after":{BEFORE}}}',
    ]
    decoded = NativeJson(PAIR).decode(_binary(records))
    assert decoded is not None
    decoded.validate(full=True)
    after, before = (_values(NativeJson(ROW).decode(_binary([r])))[0] for r in (AFTER, BEFORE))
    rows = _values(decoded.field("after"))
    both = ALIAS_READ | TARGET_READ
    assert rows == [after, before, after, after, before, None, None, before]
    assert decoded.field("before").to_pylist() == [TARGET_READ, ALIAS_READ, both, both, ALIAS_READ, 0, None, both]
    assert decoded.field("op").to_pylist() == ["c", "d", "u", "u", None, "t", None, None]


@pytest.mark.parametrize(
    "record",
    [f'{{"before":{BEFORE},"before":null}}', '{"before":"text"}', f'{{"before":{BEFORE},"after":[]}}'],
)
def test_an_alias_named_twice_or_of_another_kind_leaves_its_batch_undecided(record):
    assert NativeJson(PAIR).decode(_binary([record])) is None
