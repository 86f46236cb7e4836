"""The table job config: defaults, every documented rule, error messages, env substitution, loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from streamer.config.loading import config_from_mapping, load_config, load_configs
from streamer.config.model import FormatSettings
from streamer.errors import ConfigError

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[3] / "configs" / "examples"
DROP = object()


def minimal(**changes) -> dict:
    """The smallest valid config, with ``changes`` merged in (``DROP`` removes a key)."""
    config = {
        "table": {"name": "orders", "path": "/data/orders", "record_key": "order_id", "ordering_field": "updated_at"},
        "source": {"bootstrap_servers": "broker:9092", "topics": "orders"},
        "decode": {"value": {"format": "json", "schema": "order_id STRING, updated_at BIGINT"}},
    }
    return merged(config, changes)


def merged(base: dict, changes: dict) -> dict:
    result = dict(base)
    for key, value in changes.items():
        if value is DROP:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def problems_of(data: dict, base_dir: Path | None = None) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as raised:
        config_from_mapping(data, "orders.yaml", base_dir)
    return raised.value.problems


def write_yaml(path: Path, data: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


# -- Defaults and examples -----------------------------------------------------------------------


def test_minimal_config_gets_every_documented_default():
    config = config_from_mapping(minimal())

    table, source, decode = config.table, config.source, config.decode
    assert (table.database, table.partition_by, table.delete_field) == ("default", (), None)
    assert (table.hive_style_partitioning, table.url_encode_partitions) == (True, False)
    assert (table.log_block_format, table.quarantine_path) == ("auto", None)
    assert table.quarantine_location == "/data/orders_quarantine"
    assert (source.format, source.topic_pattern, source.starting_offsets) == ("kafka-arrow", None, "earliest")
    assert (source.resume_from_table, source.max_offsets_per_trigger, source.fail_on_data_loss) == (
        True,
        5_000_000,
        True,
    )
    assert source.options == {}
    assert (decode.key.format, decode.key.schema, decode.key.schema_file) == ("string", None, None)
    assert decode.value.schema == "order_id STRING, updated_at BIGINT"
    assert (decode.schema_registry, decode.on_error) == (None, "fail")
    assert config.transform is None
    assert config.index.initial_buckets == 4
    assert (config.stream.trigger_interval, config.stream.checkpoint_location) == ("10 seconds", None)
    assert config.stream.on_failure == "continue"
    assert config.checkpoint_location == "/data/orders/.hoodie/.aux/streaming-checkpoint"


def test_configured_quarantine_and_checkpoint_locations_replace_the_defaults():
    config = config_from_mapping(
        minimal(
            table={"path": "/data/orders/", "quarantine_path": "/bad/orders"},
            stream={"checkpoint_location": "/checkpoints/orders"},
        )
    )
    assert config.table.quarantine_location == "/bad/orders"
    assert config.checkpoint_location == "/checkpoints/orders"
    assert config_from_mapping(minimal(table={"path": "/data/orders/"})).checkpoint_location == (
        "/data/orders/.hoodie/.aux/streaming-checkpoint"
    )


def test_full_example_sets_every_key():
    config = load_config(EXAMPLES / "orders-json.yaml")

    assert config.config_path == EXAMPLES / "orders-json.yaml"
    assert config.table.name == "orders"
    assert config.table.path == "/tmp/mor-streamer/tables/orders"
    assert (config.table.record_key, config.table.partition_by) == (("order_id",), ("region",))
    assert config.table.delete_field == "deleted"
    assert config.source.max_offsets_per_trigger == 100000
    assert config.source.options == {"kafka.isolation.level": "read_committed"}
    assert config.decode.on_error == "quarantine"
    assert config.transform.lstrip().startswith("SELECT")


def test_examples_directory_loads_every_example(monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", "example-password")
    monkeypatch.setenv("MOR_STREAMER_DATA", "/srv/lake")

    configs = load_configs(EXAMPLES)

    assert [c.table.name for c in configs] == ["accounts", "clicks", "orders", "payments"]
    accounts, clicks, _, payments = configs
    assert accounts.decode.value.envelope == "debezium"
    assert accounts.decode.envelope_columns == {"position": "source_position", "op": "source_op"}
    assert clicks.table.path == "/srv/lake/tables/clicks"
    assert clicks.source.reader_options()["subscribePattern"] == r"clicks\..*"
    assert clicks.decode.schema_registry.url == "http://localhost:8081"
    assert payments.schema_file(payments.decode.value) == EXAMPLES / "payments.avsc"
    assert payments.decode.key.format == "none"


# -- Unknown keys --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"tabel": {}}, "orders.yaml: tabel: unknown key; did you mean 'table'?"),
        (
            {"table": {"ordering_feild": "x"}},
            "orders.yaml: table.ordering_feild: unknown key; did you mean 'ordering_field'?",
        ),
        ({"source": {"topic": "orders"}}, "orders.yaml: source.topic: unknown key; did you mean 'topics'?"),
        (
            {"decode": {"value": {"schema_fil": "x.avsc"}}},
            "orders.yaml: decode.value.schema_fil: unknown key; did you mean 'schema_file'?",
        ),
        (
            {"decode": {"schema_registy": {"url": "http://r"}}},
            "orders.yaml: decode.schema_registy: unknown key; did you mean 'schema_registry'?",
        ),
        (
            {"stream": {"trigger_intreval": "1 minute"}},
            "orders.yaml: stream.trigger_intreval: unknown key; did you mean 'trigger_interval'?",
        ),
    ],
)
def test_typo_in_a_key_names_the_key_and_suggests_the_right_one(changes, expected):
    assert expected in problems_of(minimal(**changes))


def test_unknown_key_without_a_close_match_lists_the_allowed_keys():
    assert problems_of(minimal(index={"shards": 3})) == (
        "orders.yaml: index.shards: unknown key; allowed keys: initial_buckets, min_buckets, max_buckets, "
        "split_threshold_mb, merge_threshold_mb, split_point",
    )


def test_config_path_in_the_yaml_is_an_unknown_key():
    assert problems_of(minimal(config_path="/etc/other.yaml")) == (
        "orders.yaml: config_path: unknown key; allowed keys: table, source, decode, transform, index, stream, services, metrics, sync",
    )


# -- Bad values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"source": {"max_offsets_per_trigger": "ten"}},
            "source.max_offsets_per_trigger: should be a valid integer, unable to parse string as an integer (got 'ten')",
        ),
        (
            {"source": {"max_offsets_per_trigger": 0}},
            "source.max_offsets_per_trigger: should be greater than 0 (got 0)",
        ),
        ({"index": {"initial_buckets": 0}}, "index.initial_buckets: should be greater than or equal to 1 (got 0)"),
        (
            {"index": {"initial_buckets": 65537}},
            "index.initial_buckets: should be less than or equal to 65536 (got 65537)",
        ),
        (
            {"decode": {"on_error": "ignore"}},
            "decode.on_error: should be 'fail', 'skip' or 'quarantine' (got 'ignore')",
        ),
        (
            {"table": {"log_block_format": "orc"}},
            "table.log_block_format: should be 'auto', 'parquet' or 'avro' (got 'orc')",
        ),
        (
            {"stream": {"on_failure": "retry"}},
            "stream.on_failure: should be 'continue' or 'stop_application' (got 'retry')",
        ),
        ({"table": {"record_key": []}}, "table.record_key: should not be empty (got [])"),
        (
            {"table": {"record_key": {"a": 1}}},
            "table.record_key: should be a string or a list of strings (got a mapping)",
        ),
        ({"table": "orders"}, "table: should be a mapping (got 'orders')"),
        (
            {"source": {"options": {"kafka.client.id": ["a", "b"]}}},
            "source.options.kafka.client.id: should be a valid string (got ['a', 'b'])",
        ),
        (
            {
                "decode": {
                    "schema_registry": {"url": "localhost:8081"},
                    "value": {"format": "confluent-avro", "schema": DROP},
                }
            },
            "decode.schema_registry.url: should be an http:// or https:// URL (got 'localhost:8081')",
        ),
    ],
)
def test_bad_value_names_the_key_path_the_expectation_and_the_value(changes, expected):
    assert f"orders.yaml: {expected}" in problems_of(minimal(**changes))


def test_missing_required_keys_are_named():
    assert problems_of(minimal(table={"ordering_field": DROP}, decode={"value": {"format": DROP}})) == (
        "orders.yaml: table.ordering_field: required key is missing",
        "orders.yaml: decode.value.format: required key is missing",
    )


def test_value_format_must_be_a_structured_format():
    assert problems_of(minimal(decode={"value": {"format": "string", "schema": DROP}})) == (
        "orders.yaml: decode.value.format: should be 'json', 'avro' or 'confluent-avro' (got 'string')",
    )


def test_every_problem_of_a_file_is_reported_at_once():
    problems = problems_of(
        minimal(
            table={"ordering_feild": "x"},
            index={"initial_buckets": 0},
            decode={"on_error": "ignore"},
        )
    )
    assert [p.split(":")[1].strip() for p in problems] == [
        "table.ordering_feild",
        "decode.on_error",
        "index.initial_buckets",
    ]


# -- Bucket resizing and clustering --------------------------------------------------------------


def test_bucket_resizing_and_clustering_defaults_are_hudis():
    config = config_from_mapping(minimal())

    index, clustering = config.index, config.services.clustering
    assert (index.initial_buckets, index.min_buckets, index.max_buckets) == (4, None, 1024)
    assert index.bucket_floor == 4  # min_buckets defaults to initial_buckets
    # Hudi: 120 MB max file size, split at 2.0x, merge at 0.2x
    assert (index.split_threshold_mb, index.merge_threshold_mb, index.split_point) == (240, 24, "middle")
    assert (clustering.mode, clustering.every_delta_commits, clustering.every_seconds) == ("inline", 10, None)
    assert (clustering.sort_columns, clustering.max_partitions, clustering.max_plan_mb) == ([], None, 2048)


def test_bucket_resizing_and_clustering_settings_are_read():
    config = config_from_mapping(
        minimal(
            index={
                "initial_buckets": 8,
                "min_buckets": 2,
                "max_buckets": 256,
                "split_threshold_mb": 512,
                "merge_threshold_mb": 0,
                "split_point": "distribution",
            },
            services={
                "clustering": {
                    "mode": "async",
                    "every_delta_commits": None,
                    "every_seconds": 600,
                    "sort_columns": ["updated_at"],
                    "max_partitions": 4,
                    "max_plan_mb": None,
                }
            },
        )
    )

    index, clustering = config.index, config.services.clustering
    assert (index.min_buckets, index.bucket_floor, index.max_buckets) == (2, 2, 256)
    assert (index.split_threshold_mb, index.merge_threshold_mb, index.split_point) == (512, 0, "distribution")
    assert (clustering.mode, clustering.every_delta_commits, clustering.every_seconds) == ("async", None, 600)
    assert (clustering.sort_columns, clustering.max_partitions, clustering.max_plan_mb) == (["updated_at"], 4, None)
    assert config_from_mapping(minimal(services={"clustering": {"mode": False}})).services.clustering.mode == "off"


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"index": {"merge_threshold_mb": 240}},
            "index.merge_threshold_mb: should be less than split_threshold_mb (240), or merges would undo splits (got 240)",
        ),
        (
            {"index": {"split_threshold_mb": 10, "merge_threshold_mb": 12.5}},
            "index.merge_threshold_mb: should be less than split_threshold_mb (10), or merges would undo splits (got 12.5)",
        ),
        ({"index": {"min_buckets": 5}}, "index.min_buckets: should be at most initial_buckets (4) (got 5)"),
        (
            {"index": {"initial_buckets": 16, "max_buckets": 8}},
            "index.max_buckets: should be at least initial_buckets (16) (got 8)",
        ),
        ({"index": {"min_buckets": 0}}, "index.min_buckets: should be greater than or equal to 1 (got 0)"),
        ({"index": {"max_buckets": 65537}}, "index.max_buckets: should be less than or equal to 65536 (got 65537)"),
        ({"index": {"split_threshold_mb": 0}}, "index.split_threshold_mb: should be greater than 0 (got 0)"),
        (
            {"index": {"merge_threshold_mb": -1}},
            "index.merge_threshold_mb: should be greater than or equal to 0 (got -1)",
        ),
        (
            {"index": {"split_point": "median"}},
            "index.split_point: should be 'middle' or 'distribution' (got 'median')",
        ),
        (
            {"services": {"clustering": {"mode": "sometimes"}}},
            "services.clustering.mode: should be 'off', 'inline' or 'async' (got 'sometimes')",
        ),
        (
            {"services": {"clustering": {"every_delta_commits": 0}}},
            "services.clustering.every_delta_commits: should be greater than or equal to 1 (got 0)",
        ),
        (
            {"services": {"clustering": {"max_partitions": 0}}},
            "services.clustering.max_partitions: should be greater than or equal to 1 (got 0)",
        ),
        (
            {"services": {"clustering": {"max_plan_mb": 0}}},
            "services.clustering.max_plan_mb: should be greater than 0 (got 0)",
        ),
        (
            {"services": {"clustering": {"sort_columns": "updated_at"}}},
            "services.clustering.sort_columns: should be a list (got 'updated_at')",
        ),
        (
            {"services": {"clustering": {"sort_columns": ["a", ""]}}},
            "services.clustering.sort_columns.1: should not be empty (got '')",
        ),
        (
            {"services": {"clustering": {"sort_columns": ["a", "b", "a"]}}},
            "services.clustering.sort_columns.2: column 'a' is named twice",
        ),
        (
            {"services": {"clustering": {"sort_colums": ["a"]}}},
            "services.clustering.sort_colums: unknown key; did you mean 'sort_columns'?",
        ),
    ],
)
def test_bad_resizing_or_clustering_setting_names_the_key(changes, expected):
    assert f"orders.yaml: {expected}" in problems_of(minimal(**changes))


def test_bucket_bounds_and_thresholds_are_checked_together():
    problems = problems_of(
        minimal(
            index={
                "initial_buckets": 4,
                "min_buckets": 6,
                "max_buckets": 2,
                "split_threshold_mb": 1,
                "merge_threshold_mb": 2,
            }
        )
    )
    assert [p.split(":")[1].strip() for p in problems] == [
        "index.merge_threshold_mb",
        "index.min_buckets",
        "index.max_buckets",
    ]
    assert str(ConfigError(list(problems))) == "\n".join(problems)


@pytest.mark.parametrize(
    "interval", ["10 seconds", "1 second", "500 milliseconds", "1 minute", "2 minutes", "1 hour", "3 Hours"]
)
def test_trigger_interval_accepts_a_number_and_a_spark_unit(interval):
    assert config_from_mapping(minimal(stream={"trigger_interval": interval})).stream.trigger_interval == interval


@pytest.mark.parametrize("interval", ["10", "seconds", "10 sec", "1 day", "1.5 seconds", "-1 seconds"])
def test_trigger_interval_rejects_other_units_and_shapes(interval):
    assert problems_of(minimal(stream={"trigger_interval": interval})) == (
        "orders.yaml: stream.trigger_interval: should be a whole number and a unit: millisecond(s), second(s), "
        f"minute(s) or hour(s), e.g. '10 seconds' (got {interval!r})",
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM source",
        "select a, b from Source where a > 0",
        "WITH s AS (SELECT * FROM source) SELECT * FROM s",
        "\n  SELECT *\n  FROM source\n",
    ],
)
def test_transform_accepts_a_query_of_the_source_view(sql):
    assert config_from_mapping(minimal(transform=sql)).transform == sql


@pytest.mark.parametrize("sql", ["DROP TABLE orders", "SELECT * FROM orders", "source"])
def test_transform_that_is_not_a_query_of_source_is_rejected(sql):
    assert problems_of(minimal(transform=sql)) == (
        f"orders.yaml: transform: should be a SQL query of the view source: SELECT ... FROM source (got {sql!r})",
    )


def test_models_are_frozen():
    config = config_from_mapping(minimal())
    with pytest.raises(ValidationError):
        config.table.name = "other"


# -- Normalised values ---------------------------------------------------------------------------


def test_names_given_as_a_string_or_a_list_become_tuples():
    one = config_from_mapping(minimal(table={"partition_by": "region"}))
    many = config_from_mapping(
        minimal(
            table={"record_key": ["a", "b"], "partition_by": ["region", "day"]},
            source={"topics": ["o1", "o2"]},
        )
    )
    assert (one.table.record_key, one.table.partition_by, one.source.topics) == (
        ("order_id",),
        ("region",),
        ("orders",),
    )
    assert (many.table.record_key, many.table.partition_by) == (("a", "b"), ("region", "day"))
    assert many.source.topics == ("o1", "o2")


def test_scalar_options_become_strings():
    config = config_from_mapping(
        minimal(
            source={
                "options": {
                    "includeHeaders": True,
                    "kafka.enable.idempotence": False,
                    "minPartitions": 5,
                    "kafka.x": 0.5,
                    "s": "v",
                }
            }
        )
    )
    assert config.source.options == {
        "includeHeaders": "true",
        "kafka.enable.idempotence": "false",
        "minPartitions": "5",
        "kafka.x": "0.5",
        "s": "v",
    }


def test_starting_offsets_mapping_gets_integer_partitions():
    config = config_from_mapping(minimal(source={"starting_offsets": {"orders": {"0": 23, 1: -2}}}))
    assert config.source.starting_offsets == {"orders": {0: 23, 1: -2}}


@pytest.mark.parametrize(
    "offsets, expected",
    [
        (
            "beginning",
            "source.starting_offsets: should be 'earliest', 'latest' or a mapping "
            "{topic: {partition: offset}} (got 'beginning')",
        ),
        (
            {"orders": {"first": 1}},
            "source.starting_offsets.orders.first: should be a valid integer, unable to parse string as an integer "
            "(got 'first')",
        ),
        ({"orders": {0: -3}}, "source.starting_offsets.orders.0: should be greater than or equal to -2 (got -3)"),
        ({"orders": {-1: 0}}, "source.starting_offsets.orders.-1: should be greater than or equal to 0 (got -1)"),
        (
            {"orders": {0: 1}, "refunds": {0: 1}},
            "source.starting_offsets.refunds: topic 'refunds' is not in source.topics",
        ),
    ],
)
def test_bad_starting_offsets_are_named(offsets, expected):
    assert problems_of(minimal(source={"starting_offsets": offsets})) == (f"orders.yaml: {expected}",)


# -- Source ----------------------------------------------------------------------------------------


def test_exactly_one_of_topics_and_topic_pattern_is_required():
    assert problems_of(minimal(source={"topics": DROP})) == (
        "orders.yaml: source.topics: one of topics or topic_pattern is required",
    )
    assert problems_of(minimal(source={"topic_pattern": "orders.*"})) == (
        "orders.yaml: source.topic_pattern: not allowed together with topics; keep one of them",
    )


def test_topic_pattern_must_be_a_regular_expression():
    (problem,) = problems_of(minimal(source={"topics": DROP, "topic_pattern": "orders(.*"}))
    assert problem.startswith("orders.yaml: source.topic_pattern: should be a valid regular expression (")
    assert problem.endswith("(got 'orders(.*')")


def test_reader_options_for_a_topic_list():
    config = config_from_mapping(
        minimal(
            source={
                "topics": ["orders", "refunds"],
                "max_offsets_per_trigger": 1000,
                "fail_on_data_loss": False,
                "options": {"kafka.security.protocol": "SASL_SSL", "minPartitions": 4},
            }
        )
    )
    assert list(config.source.reader_options().items()) == [
        ("kafka.bootstrap.servers", "broker:9092"),
        ("subscribe", "orders,refunds"),
        ("startingOffsets", "earliest"),
        ("maxOffsetsPerTrigger", "1000"),
        ("failOnDataLoss", "false"),
        ("maxBrokerOutageMs", "300000"),
        ("includeHeaders", "false"),
        ("offsetRanges", "true"),
        ("kafka.security.protocol", "SASL_SSL"),
        ("minPartitions", "4"),
    ]


def test_reader_options_for_a_topic_pattern_and_offsets():
    config = config_from_mapping(
        minimal(
            source={
                "topics": DROP,
                "topic_pattern": "orders-.*",
                "starting_offsets": {"orders-eu": {"0": 5, "1": -2}},
            }
        )
    )
    options = config.source.reader_options()
    assert options == {
        "kafka.bootstrap.servers": "broker:9092",
        "subscribePattern": "orders-.*",
        "startingOffsets": options["startingOffsets"],
        "maxOffsetsPerTrigger": "5000000",
        "failOnDataLoss": "true",
        "maxBrokerOutageMs": "300000",
        "includeHeaders": "false",
        "offsetRanges": "true",
    }
    assert json.loads(options["startingOffsets"]) == {"orders-eu": {"0": 5, "1": -2}}


def test_a_backlog_is_read_in_micro_batches_of_five_million_unless_the_limit_is_null():
    default = config_from_mapping(minimal()).source
    unbounded = config_from_mapping(minimal(source={"max_offsets_per_trigger": None})).source

    assert default.reader_options()["maxOffsetsPerTrigger"] == "5000000"
    assert unbounded.max_offsets_per_trigger is None and "maxOffsetsPerTrigger" not in unbounded.reader_options()


def test_reader_options_take_the_given_starting_offsets_over_the_configured_ones():
    config = config_from_mapping(minimal(source={"starting_offsets": "latest"}))
    assert config.source.reader_options()["startingOffsets"] == "latest"
    assert config.source.reader_options('{"orders": {"0": 42}}')["startingOffsets"] == '{"orders": {"0": 42}}'


@pytest.mark.parametrize(
    "option, key",
    [
        ("kafka.bootstrap.servers", "source.bootstrap_servers"),
        ("subscribe", "source.topics"),
        ("subscribePattern", "source.topic_pattern"),
        ("assign", "source.topics or source.topic_pattern"),
        ("startingOffsets", "source.starting_offsets"),
        ("STARTINGOFFSETS", "source.starting_offsets"),
        ("maxOffsetsPerTrigger", "source.max_offsets_per_trigger"),
        ("failOnDataLoss", "source.fail_on_data_loss"),
    ],
)
def test_options_may_not_set_what_a_source_key_sets(option, key):
    assert problems_of(minimal(source={"options": {option: "x"}})) == (
        f"orders.yaml: source.options.{option}: not allowed in options; use {key} instead",
    )


# -- Decode ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, schema, schema_file, expected",
    [
        ("json", "a INT", None, None),
        ("json", None, "value.avsc", None),
        ("json", None, None, ": format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)"),
        ("json", "a INT", "value.avsc", ": format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)"),
        ("avro", None, "value.avsc", None),
        ("avro", None, None, ".schema_file: required with format avro"),
        ("avro", "a INT", "value.avsc", ".schema: not allowed with format avro; give the Avro schema in schema_file"),
        ("confluent-avro", None, None, None),
        ("confluent-avro", None, "value.avsc", None),
        (
            "confluent-avro",
            "a INT",
            None,
            ".schema: not allowed with format confluent-avro; schema_file may give a reader schema",
        ),
    ],
)
@pytest.mark.parametrize("side", ["key", "value"])
def test_schema_rules_of_structured_formats(tmp_path, side, fmt, schema, schema_file, expected):
    (tmp_path / "value.avsc").write_text('"string"', encoding="utf-8")
    fmt_settings = {"format": fmt, "schema": schema, "schema_file": schema_file}
    registry = {"url": "http://registry:8081"} if fmt == "confluent-avro" else None
    data = minimal(decode={side: fmt_settings, "schema_registry": registry})
    if expected is None:
        config = config_from_mapping(data, base_dir=tmp_path)
        assert getattr(config.decode, side).format == fmt
    else:
        assert problems_of(data, tmp_path) == (f"orders.yaml: decode.{side}{expected}",)


DEBEZIUM_VALUE = {"format": "json", "envelope": "debezium", "schema": "order_id STRING, updated_at BIGINT"}


def test_a_debezium_table_may_leave_its_json_key_without_a_schema_and_keep_envelope_fields():
    config = config_from_mapping(
        minimal(
            table={"ordering_field": "lsn"},
            decode={
                "key": {"format": "json"},
                "value": DEBEZIUM_VALUE,
                "envelope_columns": {"position": "lsn"},
                "tombstones": "delete",
            },
        )
    )
    assert (config.decode.value.envelope, config.decode.envelope_columns) == ("debezium", {"position": "lsn"})
    assert config.decode.tombstones == "delete"


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"decode": {"envelope_columns": {"position": "lsn"}}},
            "decode.envelope_columns: only allowed with value.envelope: debezium",
        ),
        (
            {"decode": {"key": {"format": "json"}}},
            "decode.key: format json needs exactly one of schema (Spark DDL) or schema_file (.avsc)",
        ),
        (
            {"decode": {"key": {"format": "none"}, "tombstones": "delete"}},
            "decode.tombstones: delete needs a key to delete: key.format is none",
        ),
        (
            {"decode": {"value": DEBEZIUM_VALUE, "envelope_columns": {"position": "a", "op": "a"}}},
            "decode.envelope_columns.op: column 'a' is named twice",
        ),
        (
            {"decode": {"value": DEBEZIUM_VALUE}, "table": {"delete_field": "deleted"}},
            "table.delete_field: not allowed with decode.value.envelope: debezium: the change events say which records "
            "are deletes",
        ),
        (
            {"decode": {"envelope_columns": {"lsn": "lsn"}, "value": DEBEZIUM_VALUE}},
            "decode.envelope_columns.lsn: should be 'position', 'op', 'source_ts_ms' or 'ts_ms' (got 'lsn')",
        ),
    ],
)
def test_change_event_settings_that_do_not_fit_name_the_key(changes, expected):
    problems = problems_of(minimal(**changes))
    assert any(p.startswith(f"orders.yaml: {expected}") for p in problems), problems


@pytest.mark.parametrize("fmt", ["none", "string", "binary"])
def test_unstructured_key_formats_take_no_schema(fmt):
    assert problems_of(minimal(decode={"key": {"format": fmt, "schema": "a INT", "schema_file": "k.avsc"}})) == (
        f"orders.yaml: decode.key.schema: not allowed with format {fmt}",
        f"orders.yaml: decode.key.schema_file: not allowed with format {fmt}",
    )


def test_schema_registry_is_required_exactly_when_a_format_is_confluent_avro():
    registry = {"url": "http://registry:8081"}
    assert problems_of(minimal(decode={"value": {"format": "confluent-avro", "schema": DROP}})) == (
        "orders.yaml: decode.schema_registry: required when key or value format is confluent-avro",
    )
    assert problems_of(minimal(decode={"schema_registry": registry})) == (
        "orders.yaml: decode.schema_registry: only allowed when key or value format is confluent-avro",
    )
    config = config_from_mapping(minimal(decode={"key": {"format": "confluent-avro"}, "schema_registry": registry}))
    assert config.decode.schema_registry.url == "http://registry:8081"


def test_relative_schema_file_resolves_against_the_yaml_directory(tmp_path, monkeypatch):
    write_yaml(tmp_path / "conf" / "schemas" / "orders.avsc", '"string"')
    absolute = write_yaml(tmp_path / "elsewhere" / "keys.avsc", '"string"')
    path = write_yaml(
        tmp_path / "conf" / "orders.yaml",
        minimal(
            decode={
                "key": {"format": "avro", "schema_file": str(absolute)},
                "value": {"format": "avro", "schema": DROP, "schema_file": "schemas/orders.avsc"},
            }
        ),
    )
    monkeypatch.chdir(tmp_path)

    config = load_config(path)

    assert config.schema_file(config.decode.value) == tmp_path / "conf" / "schemas" / "orders.avsc"
    assert config.schema_file(config.decode.key) == absolute
    assert config.schema_file(FormatSettings()) is None


def test_missing_schema_file_is_named_with_where_it_was_looked_for(tmp_path):
    data = minimal(decode={"value": {"schema": DROP, "schema_file": "orders.avsc"}})
    assert problems_of(data, tmp_path) == (
        f"orders.yaml: decode.value.schema_file: no such file: {tmp_path / 'orders.avsc'} (got 'orders.avsc')",
    )


def test_relative_table_quarantine_and_checkpoint_paths_resolve_against_the_yaml_directory(tmp_path, monkeypatch):
    path = write_yaml(
        tmp_path / "conf" / "orders.yaml",
        minimal(
            table={"path": "../lake/orders", "quarantine_path": "bad/orders"},
            stream={"checkpoint_location": "./checkpoints/orders"},
        ),
    )
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")  # loaded from elsewhere than the file's directory

    config = load_config(Path("..") / "conf" / "orders.yaml")

    assert config.table.path == str(tmp_path / "lake" / "orders")
    assert config.table.quarantine_location == str(tmp_path / "conf" / "bad" / "orders")
    assert config.checkpoint_location == str(tmp_path / "conf" / "checkpoints" / "orders")
    assert load_config(path).table.path == config.table.path  # the same from anywhere


def test_uris_and_absolute_paths_are_left_as_they_are(tmp_path):
    path = write_yaml(
        tmp_path / "orders.yaml",
        minimal(
            table={"path": "s3://lake/tables/orders", "quarantine_path": "file:///bad/orders"},
            stream={"checkpoint_location": "/checkpoints/orders"},
        ),
    )

    config = load_config(path)

    assert config.table.path == "s3://lake/tables/orders"
    assert config.table.quarantine_location == "file:///bad/orders"
    assert config.checkpoint_location == "/checkpoints/orders"


# -- Environment variables -----------------------------------------------------------------------


def test_environment_variables_are_substituted_in_values_not_keys(monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/lake")
    monkeypatch.setenv("TOPIC", "orders")
    monkeypatch.setenv("MAX", "500")
    config = config_from_mapping(
        minimal(
            table={"path": "${DATA_DIR}/tables/${TOPIC}"},
            source={"topics": ["${TOPIC}"], "max_offsets_per_trigger": "${MAX}", "options": {"${TOPIC}": "x"}},
        )
    )
    assert config.table.path == "/lake/tables/orders"
    assert config.source.topics == ("orders",)
    assert config.source.max_offsets_per_trigger == 500
    assert config.source.options == {"${TOPIC}": "x"}


def test_default_is_used_when_the_variable_is_unset_or_empty(monkeypatch):
    monkeypatch.delenv("DATA_DIR", raising=False)
    monkeypatch.setenv("EMPTY", "")
    config = config_from_mapping(
        minimal(
            table={"path": "${DATA_DIR:-/tmp/lake}/orders", "database": "${EMPTY:-analytics}"},
            source={"bootstrap_servers": "${BOOTSTRAP_UNSET_FOR_TEST:-localhost:9092}"},
        )
    )
    assert (config.table.path, config.table.database) == ("/tmp/lake/orders", "analytics")
    assert config.source.bootstrap_servers == "localhost:9092"


def test_double_dollar_escapes_a_literal_variable_reference(monkeypatch):
    monkeypatch.setenv("NAME", "substituted")
    config = config_from_mapping(minimal(source={"options": {"kafka.client.id": "$${NAME}-${NAME}"}}))
    assert config.source.options["kafka.client.id"] == "${NAME}-substituted"


def test_unset_variable_names_the_variable_and_the_key_path(monkeypatch):
    monkeypatch.delenv("KAFKA_PASSWORD", raising=False)
    monkeypatch.delenv("DATA_DIR", raising=False)
    data = minimal(
        table={"path": "${DATA_DIR}/orders", "record_key": ["id", "${KEY_COLUMN_UNSET_FOR_TEST}"]},
        source={"options": {"kafka.sasl.password": "${KAFKA_PASSWORD}"}},
        index={"initial_buckets": "${KAFKA_PASSWORD}"},
    )
    assert problems_of(data) == (
        "orders.yaml: table.path: environment variable DATA_DIR is not set",
        "orders.yaml: table.record_key.1: environment variable KEY_COLUMN_UNSET_FOR_TEST is not set",
        "orders.yaml: source.options.kafka.sasl.password: environment variable KAFKA_PASSWORD is not set",
        "orders.yaml: index.initial_buckets: environment variable KAFKA_PASSWORD is not set",
    )


def test_malformed_variable_reference_is_an_error():
    assert problems_of(minimal(table={"path": "/data/${orders"})) == (
        "orders.yaml: table.path: '${' should start ${NAME} or ${NAME:-default}; write '$${' for a literal '${'",
    )


# -- Secrets -------------------------------------------------------------------------------------


def test_kafka_password_never_shows_in_repr_or_errors(tmp_path):
    secret_options = {"kafka.sasl.password": "hunter2", "kafka.sasl.jaas.config": "password='hunter2'"}
    config = config_from_mapping(minimal(source={"options": secret_options}))
    assert "hunter2" not in repr(config)
    assert "hunter2" not in str(config)
    assert "'kafka.sasl.password': '***'" in repr(config.source)
    assert config.source.reader_options()["kafka.sasl.password"] == "hunter2"

    path = write_yaml(
        tmp_path / "orders.yaml",
        minimal(
            source={"options": secret_options, "max_offsets_per_trigger": "ten"},
            table={"ordering_feild": "x"},
        ),
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert len(raised.value.problems) == 2
    assert "hunter2" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None


def test_bad_secret_values_are_shown_as_stars():
    problems = problems_of(
        minimal(
            source={"options": {"kafka.ssl.key.password": ["hunter2"]}},
            decode={
                "key": {"format": "confluent-avro"},
                "schema_registry": {"url": "http://r", "basic_auth_user_info": "hunter2"},
            },
        )
    )
    assert problems == (
        "orders.yaml: source.options.kafka.ssl.key.password: should be a valid string (got ***)",
        "orders.yaml: decode.schema_registry.basic_auth_user_info: should be 'user:password' (got ***)",
    )


def test_registry_credentials_are_secret():
    config = config_from_mapping(
        minimal(
            decode={
                "key": {"format": "confluent-avro"},
                "schema_registry": {"url": "http://r", "basic_auth_user_info": "me:hunter2"},
            }
        )
    )
    assert "hunter2" not in repr(config)
    assert config.decode.schema_registry.basic_auth_user_info.get_secret_value() == "me:hunter2"


# -- Files and directories -----------------------------------------------------------------------


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = write_yaml(tmp_path / "orders.yaml", "table:\n  name: orders\n  path: [unclosed\nsource: {}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    (problem,) = raised.value.problems
    assert problem.startswith(f"{path}: line 4, column 7: invalid YAML: ")


@pytest.mark.parametrize("text, got", [("- table\n- source\n", "['table', 'source']"), ("", "None")])
def test_top_level_must_be_a_mapping(tmp_path, text, got):
    path = write_yaml(tmp_path / "orders.yaml", text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.problems == (
        f"{path}: should be a mapping of the sections table, source, decode, transform, index and stream (got {got})",
    )


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.yaml: no such file or directory"):
        load_configs(tmp_path / "missing.yaml")


def test_a_file_path_loads_one_config(tmp_path):
    path = write_yaml(tmp_path / "orders.yaml", minimal())
    (config,) = load_configs(path)
    assert config.config_path == path


def test_directory_loads_yaml_and_yml_files_by_name_and_ignores_others(tmp_path):
    for name, table in [("b.yml", "b"), ("a.yaml", "a"), ("c.yaml", "c")]:
        write_yaml(tmp_path / name, minimal(table={"name": table, "path": f"/data/{table}"}))
    write_yaml(tmp_path / "notes.txt", "not: a config")
    write_yaml(tmp_path / "orders.yaml.bak", "{broken")
    write_yaml(tmp_path / "nested" / "d.yaml", "{broken")

    configs = load_configs(tmp_path)

    assert [c.table.name for c in configs] == ["a", "b", "c"]
    assert [c.config_path.name for c in configs] == ["a.yaml", "b.yml", "c.yaml"]


def test_directory_without_yaml_files_is_an_error(tmp_path):
    write_yaml(tmp_path / "readme.txt", "nothing here")
    with pytest.raises(ConfigError) as raised:
        load_configs(tmp_path)
    assert raised.value.problems == (f"{tmp_path}: no *.yaml or *.yml file in this directory",)


@pytest.mark.parametrize(
    "second, expected",
    [
        ({"table": {"path": "/data/other"}}, "table.name: should be unique, {a} has it too (got 'orders')"),
        (
            {"table": {"name": "other"}, "stream": {"checkpoint_location": "/cp/b"}},
            "table.path: should be unique, {a} has it too (got '/data/orders')",
        ),
        (
            {"table": {"name": "other", "path": "/data/other"}, "stream": {"checkpoint_location": "/cp/a/"}},
            "stream.checkpoint_location: should be unique, {a} has it too (got '/cp/a')",
        ),
    ],
)
def test_configs_of_a_directory_may_not_share_a_name_path_or_checkpoint(tmp_path, second, expected):
    a = write_yaml(tmp_path / "a.yaml", minimal(stream={"checkpoint_location": "/cp/a"}))
    b = write_yaml(tmp_path / "b.yaml", merged(minimal(), second))
    with pytest.raises(ConfigError) as raised:
        load_configs(tmp_path)
    assert raised.value.problems == (f"{b}: " + expected.format(a=a),)


def test_problems_of_every_file_of_a_directory_are_reported(tmp_path):
    a = write_yaml(tmp_path / "a.yaml", minimal(index={"initial_buckets": 0}))
    write_yaml(tmp_path / "b.yaml", minimal(table={"name": "b", "path": "/data/b"}))
    c = write_yaml(tmp_path / "c.yaml", "table: [")
    with pytest.raises(ConfigError) as raised:
        load_configs(tmp_path)
    assert [p.split(": ")[0] for p in raised.value.problems] == [str(a), str(c)]
