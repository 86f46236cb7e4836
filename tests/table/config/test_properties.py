"""hoodie.properties: the samples' files load (checksum verified), ours is what Hudi writes and
what hudi-rs accepts."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import hudi
import pytest

from table.config.properties import (
    CHECKSUM_KEY,
    TableConfig,
    dumps_properties,
    loads_properties,
    table_checksum,
)
from table.storage.file_io import Storage
from tests.support.hudi_samples import SAMPLES

pytestmark = pytest.mark.unit


SAMPLE_TABLES = sorted(p.name for p in SAMPLES.iterdir() if (p / ".hoodie" / "hoodie.properties").is_file())
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "trips_record",
        "namespace": "hoodie.trips",
        "fields": [
            {"name": "uuid", "type": "string"},
            {"name": "ts", "type": "long"},
            {"name": "city", "type": ["null", "string"], "default": None},
        ],
    },
    separators=(",", ":"),
)


def new_config(**overrides) -> TableConfig:
    args = {
        "name": "trips",
        "record_key_fields": ["uuid"],
        "partition_fields": ["city"],
        "precombine_field": "ts",
        "create_schema": SCHEMA,
    }
    args.update(overrides)
    return TableConfig.for_new_mor_table(**args)


def test_checksum_is_crc32_of_database_dot_table_as_in_the_sample():
    assert table_checksum("default", "v6_trips_8i1u") == 3843273058
    assert table_checksum("default", "v6_trips_8i3d") == 3180720914


@pytest.mark.parametrize("table", SAMPLE_TABLES)
def test_sample_properties_load_typed_with_checksum_verified(table):
    config = TableConfig.load(Storage(str(SAMPLES / table)))
    assert config.name == table
    assert config.table_type == "MERGE_ON_READ"
    assert config.version == 6
    assert config.timeline_layout_version == 1
    assert config.database == "default"
    assert config.record_key_fields == ("uuid",)
    assert config.partition_fields == ("city",)
    assert config.precombine_field == "ts"
    assert config.key_generator_class == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert config.hive_style_partitioning is True
    assert config.url_encode_partitioning is False
    assert config.drop_partition_columns is False
    assert config.record_merger_strategy == "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    assert json.loads(config.create_schema)["name"] == f"{table}_record"  # '\:' unescaped
    assert config.checksum == int(
        loads_properties((SAMPLES / table / ".hoodie" / "hoodie.properties").read_text())[CHECKSUM_KEY]
    )
    assert config.extra == {}


@pytest.mark.parametrize("table", SAMPLE_TABLES)
def test_sample_file_is_reproduced_from_its_entries(table):
    text = (SAMPLES / table / ".hoodie" / "hoodie.properties").read_text()
    first, second = text.splitlines()[:2]
    saved_at = datetime.strptime(second, "#%a %b %d %H:%M:%S UTC %Y").replace(tzinfo=UTC)
    assert dumps_properties(loads_properties(text), first[1:], saved_at) == text


def test_wrong_checksum_is_rejected():
    props = new_config().to_properties()
    props[CHECKSUM_KEY] = "12345"
    with pytest.raises(ValueError, match="checksum"):
        TableConfig.from_properties(props)


def test_new_mor_table_writes_the_hudi_0_14_keys_checksum_last():
    props = new_config().to_properties()
    assert props == {
        "hoodie.table.name": "trips",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.database.name": "default",
        "hoodie.table.recordkey.fields": "uuid",
        "hoodie.table.partition.fields": "city",
        "hoodie.table.precombine.field": "ts",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.log.file.format": "HOODIE_LOG",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.archivelog.folder": "archived",
        "hoodie.populate.meta.fields": "true",
        "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.compaction.record.merger.strategy": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
        "hoodie.table.create.schema": SCHEMA,
        "hoodie.table.checksum": str(table_checksum("default", "trips")),
    }
    assert list(props)[-1] == CHECKSUM_KEY
    # no metadata table, and no index keys: Hudi 0.14/0.15 keep those out of hoodie.properties
    assert not any(
        k.startswith(("hoodie.table.metadata", "hoodie.metadata", "hoodie.index", "hoodie.bucket")) for k in props
    )


def test_key_generator_follows_the_key_and_partition_fields():
    assert new_config(record_key_fields=["a", "b"]).key_generator_class == "org.apache.hudi.keygen.ComplexKeyGenerator"
    unpartitioned = new_config(partition_fields=[])
    assert unpartitioned.key_generator_class == "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    # an empty value would read as one (empty) partition field in hudi-rs
    assert "hoodie.table.partition.fields" not in unpartitioned.to_properties()


def test_saved_config_loads_back_equal_and_is_never_overwritten_by_accident(tmp_path):
    storage = Storage(str(tmp_path))
    config = new_config()
    config.save(storage)
    assert TableConfig.load(storage) == config
    with pytest.raises(FileExistsError):
        new_config(name="other").save(storage)
    new_config(name="other").save(storage, overwrite=True)
    assert TableConfig.load(storage).name == "other"


def test_unknown_keys_round_trip(tmp_path):
    props = new_config().to_properties()
    props["hoodie.table.metadata.partitions"] = "files"
    props["some.future.key"] = "a=b: #c"
    config = TableConfig.from_properties(props)
    assert config.extra == {"hoodie.table.metadata.partitions": "files", "some.future.key": "a=b: #c"}
    assert TableConfig.loads(config.dumps()) == config
    assert TableConfig.loads(config.dumps()).to_properties() == config.to_properties()


def test_values_are_escaped_as_java_properties_store_does():
    text = dumps_properties(
        {"k ey": " lead=a:b#c!d\\e\té€😀"}, "c", datetime.fromisoformat("2025-06-18T05:47:10+00:00")
    )
    assert text.splitlines()[1:] == [
        "#Wed Jun 18 05:47:10 UTC 2025",
        "k\\ ey=\\ lead\\=a\\:b\\#c\\!d\\\\e\\t\\u00E9\\u20AC\\uD83D\\uDE00",
    ]
    assert text.isascii()
    assert loads_properties(text) == {"k ey": " lead=a:b#c!d\\e\té€😀"}


def test_reader_follows_java_properties_load():
    text = (
        "# comment\n! other comment\n\n"
        "  spaced   =  value  \n"
        "colon:x\n"
        "blank separated value\n"
        "continued = one, \\\n      two\n"
        "escaped\\=key = v\n"
        "empty=\n"
        "dup=1\ndup=2\n"
    )
    assert loads_properties(text) == {
        "spaced": "value  ",
        "colon": "x",
        "blank": "separated value",
        "continued": "one, two",
        "escaped=key": "v",
        "empty": "",
        "dup": "2",
    }


def test_hudi_rs_accepts_a_new_table_and_reads_its_create_schema(tmp_path):
    new_config().save(Storage(str(tmp_path)))
    table = hudi.HudiTableBuilder.from_base_uri(str(tmp_path)).build()
    assert table.table_name == "trips"
    assert table.is_mor
    assert table.timezone == "utc"
    assert table.get_schema().names == ["uuid", "ts", "city"]  # from the create schema: no commit yet
    assert table.read() == []
