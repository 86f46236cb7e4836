"""What a catalog sync registers and when, without a metastore: the `_rt` and `_ro` definitions
(Hudi's formats, serde and Spark properties, Hive and Spark types), partition values and names,
the partitions the timeline says changed since a sync, the `sync:` config section, and what
`streamer status` says of a catalog behind its table."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from streamer.catalog import SyncState, catalog_status
from streamer.config.loading import config_from_mapping
from streamer.errors import ConfigError
from table.config.properties import TableConfig
from table.sync import hive_tables, partition_changes
from table.sync.hive_schema import SCHEMA_PART_LENGTH, hive_type, spark_schema_json
from table.sync.registration import partition_name, partition_values
from table.timeline.commit_metadata import ReplaceCommitMetadata
from table.timeline.instant_avro import serialize_plan
from table.timeline.timeline import Action, Instant, State
from tests.support.orders import SCHEMA, change_batch, make_table, row, write_options

pytestmark = pytest.mark.unit

DATA = pa.schema(
    [("order_id", pa.string()), ("region", pa.string()), ("amount", pa.float64()), ("updated_at", pa.int64())]
)


def config(**overrides) -> TableConfig:
    return TableConfig.for_new_mor_table(
        "orders", ("order_id",), overrides.pop("partitions", ("region",)), "updated_at", "{}", **overrides
    )


def test_a_merge_on_read_table_is_registered_as_rt_and_ro_with_hudis_formats_serde_and_spark_properties():
    rt, ro = hive_tables(config(), DATA, "s3://lake/orders", "lake", "orders")
    assert (rt.qualified_name, ro.qualified_name) == ("lake.orders_rt", "lake.orders_ro")
    assert rt.input_format == "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
    assert ro.input_format == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    for table, read_optimized in ((rt, "false"), (ro, "true")):
        assert table.output_format == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
        assert table.serde == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
        assert table.serde_properties == {
            "path": "s3://lake/orders",
            "hoodie.query.as.ro.table": read_optimized,
            "serialization.format": "1",
        }
        assert table.location == "s3://lake/orders"
        # meta columns first, the partition column a partition key and not a column
        assert table.columns == (
            ("_hoodie_commit_time", "string"),
            ("_hoodie_commit_seqno", "string"),
            ("_hoodie_record_key", "string"),
            ("_hoodie_partition_path", "string"),
            ("_hoodie_file_name", "string"),
            ("order_id", "string"),
            ("amount", "double"),
            ("updated_at", "bigint"),
        )
        assert table.partition_keys == (("region", "string"),)
        props = table.table_properties
        assert props["EXTERNAL"] == "TRUE" and props["spark.sql.sources.provider"] == "hudi"
        assert props["spark.sql.sources.schema.numPartCols"] == "1"
        assert props["spark.sql.sources.schema.partCol.0"] == "region"
        spark_schema = json.loads(props["spark.sql.sources.schema.part.0"])
        # Spark keeps partition columns last
        assert [f["name"] for f in spark_schema["fields"]][-3:] == ["amount", "updated_at", "region"]


def test_spark_schema_is_split_into_parts_as_hudi_splits_it_and_types_map_as_hudis_hive_sync_maps_them():
    wide = pa.schema([(f"column_with_a_long_name_{i}", pa.int32()) for i in range(200)])
    rt, _ = hive_tables(config(partitions=()), wide, "/t", "db", "t")
    parts = int(rt.table_properties["spark.sql.sources.schema.numParts"])
    text = "".join(rt.table_properties[f"spark.sql.sources.schema.part.{i}"] for i in range(parts))
    assert parts > 1 and all(
        len(rt.table_properties[f"spark.sql.sources.schema.part.{i}"]) <= SCHEMA_PART_LENGTH for i in range(parts)
    )
    assert text == spark_schema_json(
        pa.schema(
            [
                pa.field(m, pa.string())
                for m in (
                    "_hoodie_commit_time",
                    "_hoodie_commit_seqno",
                    "_hoodie_record_key",
                    "_hoodie_partition_path",
                    "_hoodie_file_name",
                )
            ]
            + list(wide)
        ),
        (),
    )
    assert rt.partition_keys == () and "spark.sql.sources.schema.numPartCols" not in rt.table_properties
    assert hive_type(pa.timestamp("us", "UTC")) == "bigint"  # Hudi's support_timestamp is off by default
    assert hive_type(pa.decimal128(10, 2)) == "decimal(10,2)"
    assert hive_type(pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())]))) == "array<struct<a:int,b:string>>"
    assert hive_type(pa.map_(pa.string(), pa.float64())) == "map<string,double>"
    nested = json.loads(
        spark_schema_json(pa.schema([("m", pa.map_(pa.string(), pa.int64())), ("t", pa.timestamp("us"))]), ())
    )
    assert nested["fields"][0]["type"] == {
        "type": "map",
        "keyType": "string",
        "valueType": "long",
        "valueContainsNull": True,
    }
    assert nested["fields"][1]["type"] == "timestamp"


def test_partition_paths_give_hive_partition_values_and_escaped_names():
    hive_style = config(partitions=("region", "day"))
    assert partition_values(hive_style, "region=emea/day=2026-01-01") == ["emea", "2026-01-01"]
    assert partition_name(hive_style, ["emea", "a/b:c"]) == "region=emea/day=a%2Fb%3Ac"
    plain = TableConfig.for_new_mor_table(
        "t", ("k",), ("region",), "ts", "{}", hive_style_partitioning=False, url_encode_partitioning=True
    )
    assert partition_values(plain, "north%20america") == ["north america"]
    with pytest.raises(ValueError, match="one part per partition field"):
        partition_values(hive_style, "region=emea")


def test_partition_changes_come_from_the_commits_after_the_last_sync_and_a_first_sync_lists_the_table(tmp_path):
    table = make_table(tmp_path / "t")
    rng = random.Random(5)
    known: list[str] = []
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist(change_batch(rng, known, 100, 0, 1000), schema=SCHEMA))
        first = table.timeline().last_completed_write().timestamp
        writer.upsert(pa.Table.from_pylist([row("x-1", 2000, False, rng) | {"region": "mena"}], schema=SCHEMA))
    storage, timeline = table.storage, table.timeline()

    never = partition_changes(storage, timeline, None)
    assert never.complete and never.written == {f"region={r}" for r in ("emea", "apac", "amer", "latam", "mena")}
    since = partition_changes(storage, timeline, first)
    assert not since.complete and since.written == {"region=mena"} and not since.dropped
    assert partition_changes(storage, timeline, timeline.last_completed_write().timestamp).written == set()

    # Hudi's delete_partition (a DELETE_PARTITION replacecommit) and a clean that deleted a partition
    synced = timeline.last_completed_write().timestamp
    replace = Instant(timeline.new_instant_time(), Action.REPLACE_COMMIT, State.REQUESTED)
    timeline.create_requested(replace)
    timeline.transition_to_inflight(replace)
    metadata = ReplaceCommitMetadata(
        operation_type="DELETE_PARTITION", partition_to_replace_file_ids={"region=mena": ["f-0"]}
    )
    timeline.complete(replace.inflight(), metadata.to_json().encode())
    cleaned = Instant(timeline.new_instant_time(), Action.CLEAN, State.REQUESTED)
    timeline.create_requested(cleaned)
    timeline.transition_to_inflight(cleaned)
    timeline.complete(
        cleaned.inflight(),
        serialize_plan(
            "HoodieCleanMetadata",
            {
                "startCleanTime": cleaned.timestamp,
                "timeTakenInMillis": 1,
                "totalFilesDeleted": 1,
                "earliestCommitToRetain": "",
                "lastCompletedCommitTimestamp": "",
                "version": 2,
                "partitionMetadata": {
                    "region=latam": {
                        "partitionPath": "region=latam",
                        "policy": "KEEP_LATEST_COMMITS",
                        "deletePathPatterns": [],
                        "successDeleteFiles": [],
                        "failedDeleteFiles": [],
                        "isPartitionDeleted": True,
                    }
                },
            },
        ),
    )
    dropped = partition_changes(storage, table.timeline(), synced)
    assert dropped.dropped == {"region=mena", "region=latam"} and dropped.written == set()
    # a first sync lists the table, less what the timeline dropped (its directory is still there)
    listed = partition_changes(storage, table.timeline(), None)
    assert storage.base_uri and (tmp_path / "t" / "region=mena").is_dir()
    assert listed.complete and listed.written == {"region=emea", "region=apac", "region=amer"}
    # a write after the drop brings a partition back
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist([row("y-1", 3000, False, rng) | {"region": "latam"}], schema=SCHEMA))
    back = partition_changes(storage, table.timeline(), synced)
    assert back.dropped == {"region=mena"} and back.written == {"region=latam"}


@pytest.mark.parametrize(
    "sync, problem",
    [
        ({"metastore_uris": "http://metastore:9083"}, "sync.metastore_uris: should be thrift://host:port"),
        ({"mode": "sometimes"}, "sync.mode"),
        ({"every_delta_commits": 0}, "sync.every_delta_commits"),
        ({"databse": "lake"}, "sync.databse: unknown key"),
    ],
)
def test_a_bad_sync_section_names_the_key(tmp_path, sync, problem):
    mapping = {
        "table": {"name": "orders", "path": str(tmp_path / "t"), "record_key": "id", "ordering_field": "ts"},
        "source": {"bootstrap_servers": "localhost:9092", "topics": "orders"},
        "decode": {"value": {"format": "json", "schema": "id STRING, ts BIGINT"}},
        "sync": sync,
    }
    with pytest.raises(ConfigError, match=problem):
        config_from_mapping(mapping)


def test_status_says_how_far_the_catalog_is_behind_and_since_when_its_sync_fails(tmp_path):
    table = make_table(tmp_path / "t")
    mapping = {
        "table": {
            "name": "orders",
            "path": str(tmp_path / "t"),
            "record_key": "order_id",
            "ordering_field": "updated_at",
            "partition_by": "region",
        },
        "source": {"bootstrap_servers": "localhost:9092", "topics": "orders"},
        "decode": {"value": {"format": "json", "schema": "order_id STRING, updated_at BIGINT"}},
        "sync": {"metastore_uris": "thrift://127.0.0.1:9", "database": "lake"},
    }
    job = config_from_mapping(mapping)
    rng = random.Random(1)
    with table.writer(write_options()) as writer:
        for n in range(3):
            writer.upsert(pa.Table.from_pylist(change_batch(rng, [], 10, n * 10, 1000), schema=SCHEMA))
    writes = table.timeline().completed_writes()
    assert (
        catalog_status(job, table, table.timeline()).line()
        == "lake.orders_rt, lake.orders_ro: not synced yet (3 commit(s) to sync)"
    )
    SyncState(
        ["lake.orders_rt", "lake.orders_ro"],
        synced_instant=writes[0].timestamp,
        failing_since="2026-01-01T00:00:00Z",
        failures=2,
        last_error="connection refused",
    ).save(table.storage)
    line = catalog_status(job, table, table.timeline()).line()
    assert line == (
        f"lake.orders_rt, lake.orders_ro synced to {writes[0].timestamp}, 2 commit(s) behind; "
        "failing since 2026-01-01T00:00:00Z (2 attempt(s)): connection refused"
    )
