"""Record keys and partition paths as Hudi's Simple/Complex/Nonpartitioned key generators make them."""

from __future__ import annotations

import datetime
import glob
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from table.errors import InvalidBatchError, KeyGenerationError
from table.keys import (
    COMPLEX_KEY_GENERATOR,
    DEFAULT_PARTITION_PATH,
    NONPARTITIONED_KEY_GENERATOR,
    SIMPLE_KEY_GENERATOR,
    VALUE_ONLY,
    KeyGenerator,
    escape_path_name,
    java_float_to_string,
    unescape_path_name,
)
from tests.support.hudi_samples import SAMPLES as HUDI_SAMPLES

pytestmark = pytest.mark.unit

SAMPLES = str(HUDI_SAMPLES)


def _sample_files():
    return sorted(glob.glob(os.path.join(SAMPLES, "*", "*", "*.parquet")))


def _properties(path: str) -> dict[str, str]:
    props = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#") and "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                props[k] = v.replace("\\:", ":")
    return props


def test_keys_match_the_meta_columns_hudi_wrote_in_the_sample_tables():
    assert _sample_files()
    for table_dir in sorted(glob.glob(os.path.join(SAMPLES, "*"))):
        keygen = KeyGenerator.from_config(_properties(os.path.join(table_dir, ".hoodie", "hoodie.properties")))
        assert keygen.class_name == SIMPLE_KEY_GENERATOR
        for f in sorted(glob.glob(os.path.join(table_dir, "*", "*.parquet"))):
            t = pq.read_table(f)
            assert keygen.record_keys(t).to_pylist() == t["_hoodie_record_key"].to_pylist()
            assert keygen.partition_paths(t).to_pylist() == t["_hoodie_partition_path"].to_pylist()


# ---- which key generator ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "record_keys,partitions,expected",
    [
        (["id"], ["city"], SIMPLE_KEY_GENERATOR),
        (["id", "ts"], ["city"], COMPLEX_KEY_GENERATOR),
        (["id"], ["country", "city"], COMPLEX_KEY_GENERATOR),
        (["id"], [], NONPARTITIONED_KEY_GENERATOR),
        (["id", "ts"], [], NONPARTITIONED_KEY_GENERATOR),
    ],
)
def test_key_generator_class_is_inferred_as_hudi_does(record_keys, partitions, expected):
    assert KeyGenerator(record_keys, partitions).class_name == expected


def test_fields_may_be_given_in_hudis_comma_separated_form():
    kg = KeyGenerator(" id , ts ", "city")
    assert kg.record_key_fields == ("id", "ts") and kg.partition_fields == ("city",)
    assert kg.table_properties() == {
        "hoodie.table.recordkey.fields": "id,ts",
        "hoodie.table.partition.fields": "city",
        "hoodie.table.keygenerator.class": COMPLEX_KEY_GENERATOR,
        "hoodie.datasource.write.hive_style_partitioning": "false",
        "hoodie.datasource.write.partitionpath.urlencode": "false",
    }


def test_simple_key_generator_needs_one_key_and_one_partition_field():
    with pytest.raises(KeyGenerationError):
        KeyGenerator(["a", "b"], ["c"], key_generator_class=SIMPLE_KEY_GENERATOR)
    with pytest.raises(KeyGenerationError):
        KeyGenerator(["a"], ["c"], key_generator_class="org.example.MyKeyGenerator")


# ---- record keys -----------------------------------------------------------------------------


def test_simple_record_key_is_the_value_itself():
    t = pa.table({"id": [7, 8], "city": ["x", "y"]})
    assert KeyGenerator(["id"], ["city"]).record_keys(t).to_pylist() == ["7", "8"]


def test_complex_record_key_is_field_colon_value_comma_separated():
    t = pa.table({"id": [1, 2], "name": ["a", "b:c"], "city": ["x", "y"]})
    keys = KeyGenerator(["id", "name"], ["city"]).record_keys(t)
    assert keys.to_pylist() == ["id:1,name:a", "id:2,name:b:c"]


def test_complex_generator_with_one_key_field_prefixes_the_field_unless_value_only():
    t = pa.table({"id": ["k1"], "a": ["x"], "b": ["y"]})
    assert KeyGenerator(["id"], ["a", "b"]).record_keys(t).to_pylist() == ["id:k1"]
    value_only = KeyGenerator(["id"], ["a", "b"], complex_single_field_encoding=VALUE_ONLY)
    assert value_only.record_keys(t).to_pylist() == ["k1"]


def test_nonpartitioned_keys_are_bare_for_one_field_and_composite_for_several():
    t = pa.table({"id": ["k1"], "n": [3]})
    one = KeyGenerator(["id"], [])
    assert one.record_keys(t).to_pylist() == ["k1"]
    assert one.partition_paths(t).to_pylist() == [""]
    assert KeyGenerator(["id", "n"], []).record_keys(t).to_pylist() == ["id:k1,n:3"]


def test_nested_key_fields_are_read_through_structs():
    t = pa.table({"rec": pa.array([{"id": "a"}, {"id": "b"}])})
    assert KeyGenerator(["rec.id"], []).record_keys(t).to_pylist() == ["a", "b"]


# ---- null and empty keys ---------------------------------------------------------------------


def test_null_and_empty_simple_keys_raise_naming_the_field_and_row_count():
    t = pa.table({"uuid": ["a", None, "", None], "city": ["x"] * 4})
    with pytest.raises(
        KeyGenerationError, match=r"'uuid' is null or empty in 3 of 4 row\(s\) \(2 null, 1 empty; first at row 1\)"
    ):
        KeyGenerator(["uuid"], ["city"]).record_keys(t)


def test_null_part_of_a_complex_key_raises_naming_that_field():
    t = pa.table({"id": [1, 2, 3], "name": ["a", None, "c"], "city": ["x"] * 3})
    with pytest.raises(KeyGenerationError, match=r"'name' is null or empty in 1 of 3"):
        KeyGenerator(["id", "name"], ["city"]).record_keys(t)


def test_key_errors_are_invalid_batch_errors():
    with pytest.raises(InvalidBatchError):
        KeyGenerator(["id"], []).record_keys(pa.table({"id": pa.array([None], pa.string())}))


def test_partial_null_complex_keys_use_hudis_placeholders_when_allowed():
    kg = KeyGenerator(["id", "name"], ["city"], allow_partial_null_keys=True)
    t = pa.table({"id": [1, 2], "name": [None, ""], "city": ["x", "y"]})
    assert kg.record_keys(t).to_pylist() == ["id:1,name:__null__", "id:2,name:__empty__"]
    with pytest.raises(KeyGenerationError, match="all null or empty in 1 of 1"):
        kg.record_keys(pa.table({"id": pa.array([None], pa.int64()), "name": [""], "city": ["x"]}))


def test_missing_key_field_is_named():
    with pytest.raises(KeyGenerationError, match="key field 'nope' is not in the batch"):
        KeyGenerator(["nope"], []).record_keys(pa.table({"id": [1]}))


# ---- partition paths -------------------------------------------------------------------------


def test_hive_style_and_plain_partition_paths():
    t = pa.table({"id": [1], "city": ["chennai"]})
    assert KeyGenerator(["id"], ["city"], hive_style_partitioning=True).partition_paths(t).to_pylist() == [
        "city=chennai"
    ]
    assert KeyGenerator(["id"], ["city"]).partition_paths(t).to_pylist() == ["chennai"]


def test_several_partition_fields_are_joined_by_slash():
    t = pa.table({"id": [1], "y": [2024], "m": ["01"]})
    assert KeyGenerator(["id"], ["y", "m"]).partition_paths(t).to_pylist() == ["2024/01"]
    assert KeyGenerator(["id"], ["y", "m"], True).partition_paths(t).to_pylist() == ["y=2024/m=01"]


def test_null_or_empty_partition_value_is_hives_default_partition():
    t = pa.table({"id": [1, 2, 3], "city": ["a", None, ""], "d": pa.array([None, None, None], pa.string())})
    assert DEFAULT_PARTITION_PATH == "__HIVE_DEFAULT_PARTITION__"
    assert KeyGenerator(["id"], ["city"]).partition_paths(t).to_pylist() == [
        "a",
        DEFAULT_PARTITION_PATH,
        DEFAULT_PARTITION_PATH,
    ]
    hive = KeyGenerator(["id"], ["city", "d"], hive_style_partitioning=True, url_encode_partitions=True)
    assert hive.partition_paths(t).to_pylist() == [
        "city=a/d=__HIVE_DEFAULT_PARTITION__",
        "city=__HIVE_DEFAULT_PARTITION__/d=__HIVE_DEFAULT_PARTITION__",
        "city=__HIVE_DEFAULT_PARTITION__/d=__HIVE_DEFAULT_PARTITION__",
    ]


def test_url_encoding_escapes_hives_characters_in_upper_hex():
    t = pa.table({"id": [1, 2], "p": ["a/b:c=d%e f", "ümlaut#1"]})
    encoded = KeyGenerator(["id"], ["p"], hive_style_partitioning=True, url_encode_partitions=True)
    assert encoded.partition_paths(t).to_pylist() == ["p=a%2Fb%3Ac%3Dd%25e f", "p=ümlaut%231"]
    assert KeyGenerator(["id"], ["p"]).partition_paths(t).to_pylist() == ["a/b:c=d%e f", "ümlaut#1"]


def test_escape_path_name_matches_hives_table_and_round_trips():
    assert escape_path_name("\"#%'*/:=?\\{[]^\x7f\x01") == "%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%5B%5D%5E%7F%01"
    assert escape_path_name("plain-value_1.2 ~!@$&()+,;") == "plain-value_1.2 ~!@$&()+,;"
    for value in ["a/b:c", "100%", "x=y?z", "ü/ö"]:
        assert unescape_path_name(escape_path_name(value)) == value


# ---- values as Hudi renders them -------------------------------------------------------------


def test_values_render_as_hudis_avro_path_renders_them():
    t = pa.table(
        {
            "b": [True],
            "i": pa.array([-5], pa.int32()),
            "f": [1.0],
            "big": [1e7],
            "small": [0.00099],
            "f32": pa.array([0.1], pa.float32()),
            "dec": pa.array([Decimal("12.50")], pa.decimal128(10, 2)),
            "tiny": pa.array([Decimal("0.0000001")], pa.decimal128(10, 7)),
            "d": [datetime.date(2024, 3, 9)],
            "ts_us": pa.array([1_700_000_000_123_456], pa.timestamp("us", tz="UTC")),
            "ts_ms": pa.array([1_700_000_000_123], pa.timestamp("ms")),
            "ts_ns": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns")),
            "large": pa.array(["s"], pa.large_string()),
            "dict": pa.array(["v"]).dictionary_encode(),
        }
    )
    rendered = {c: KeyGenerator([c], []).record_keys(t).to_pylist()[0] for c in t.column_names}
    assert rendered == {
        "b": "true",
        "i": "-5",
        "f": "1.0",
        "big": "1.0E7",
        "small": "9.9E-4",
        "f32": "0.1",
        "dec": "12.50",
        "tiny": "1E-7",
        "d": "2024-03-09",
        "ts_us": "1700000000123456",
        "ts_ms": "1700000000123",
        "ts_ns": "1700000000123456",
        "large": "s",
        "dict": "v",
    }


@pytest.mark.parametrize(
    "value,single,expected",
    [
        (0.0, False, "0.0"),
        (-0.0, False, "-0.0"),
        (100.0, False, "100.0"),
        (0.001, False, "0.001"),
        (1234567.0, False, "1234567.0"),
        (12345678.9, False, "1.23456789E7"),
        (-2.5e-10, False, "-2.5E-10"),
        (1e100, False, "1.0E100"),
        (5e-324, False, "4.9E-324"),
        (float("nan"), False, "NaN"),
        (float("-inf"), False, "-Infinity"),
        (16777216.0, True, "1.6777216E7"),
        (1.4e-45, True, "1.4E-45"),
    ],
)
def test_floating_point_renders_as_java_to_string(value, single, expected):
    assert java_float_to_string(value, single=single) == expected


def test_binary_key_values_are_refused():
    with pytest.raises(KeyGenerationError, match=r"field 'blob'.*cannot be a Hudi key"):
        KeyGenerator(["blob"], []).record_keys(pa.table({"blob": [b"\x00\x01"]}))


def test_from_config_accepts_an_object_with_attributes():
    class Config:
        record_key_fields = ("id",)
        partition_fields = ("city",)
        hive_style_partitioning = True
        url_encode_partitions = False
        key_generator_class = SIMPLE_KEY_GENERATOR

    kg = KeyGenerator.from_config(Config())
    assert kg == KeyGenerator(["id"], ["city"], True, False, SIMPLE_KEY_GENERATOR)
