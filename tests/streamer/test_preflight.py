"""Config problems found before Spark starts, all at once, by `streamer run` and `streamer doctor`
alike: each names the file, the key and the fix.

The mistakes are those a new user makes: a record key or partition field not in the schema, a DDL
type Spark does not have, an ordering field of a type that cannot order, a transform that names a
column its source lacks, and a record key changed under an existing table (written here by the
table engine alone). (tests/e2e/test_schema_evolution.py holds the DDL reader to Spark's own reading.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from streamer import preflight
from streamer.cli import main as cli
from streamer.config.loading import config_from_mapping, load_config
from streamer.decode.ddl import parse_ddl
from streamer.preflight.select_list import transform_columns
from streamer.sandbox.change_events import change_events
from tests.support.ingestion import committed_table, order_config, run_streamer, write_config

BROKER = "127.0.0.1:9"  # nothing listens there: no check here needs a broker
PAYMENTS_SCHEMA = "payment_id STRING, currency STRING, amount DOUBLE, ts BIGINT"
#: Lines Spark prints as its JVM starts.
SPARK_STARTED = re.compile(r"log4j|SparkContext|spark-submit|NativeCodeLoader")


def payments(tmp: Path, name: str, **changes) -> dict:
    config = {
        "table": {
            "name": name,
            "path": f"tables/{name}",
            "record_key": "payment_id",
            "partition_by": "currency",
            "ordering_field": "ts",
        },
        "source": {"bootstrap_servers": BROKER, "topics": name},
        "decode": {"value": {"format": "json", "schema": PAYMENTS_SCHEMA}},
    }
    for section, values in changes.items():
        if isinstance(values, dict):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


@pytest.fixture
def mistakes(tmp_path) -> tuple[Path, dict[str, tuple[str, str]]]:
    """A directory of configs, each with one mistake; per file, the key blamed and a phrase of the
    problem it must name."""
    configs = tmp_path / "configs"
    committed_table(configs / "tables" / "orders", change_events(50, seed=3), {"orders": {0: 50}})
    orders = order_config(tmp_path, "orders", BROKER, "orders")
    orders["table"].update(path="tables/orders", record_key="customer")  # the table's key is order_id
    del orders["stream"]["checkpoint_location"]
    files = {
        "a-key": payments(tmp_path, "a-key", table={"record_key": "payment_idd"}),
        "b-partition": payments(tmp_path, "b-partition", table={"partition_by": "curency"}),
        "c-type": payments(
            tmp_path,
            "c-type",
            decode={
                "value": {
                    "format": "json",
                    "schema": "payment_id STRING, currency STRING, amount BIGINTEGER, ts BIGINT",
                }
            },
        ),
        "d-ordering": payments(
            tmp_path,
            "d-ordering",
            decode={"value": {"format": "json", "schema": "payment_id STRING, currency STRING, ts BOOLEAN"}},
        ),
        "e-transform": payments(
            tmp_path,
            "e-transform",
            transform="SELECT payment_id, currency, amout * 100 AS cents, tss AS ts FROM source",
        ),
        "orders": orders,
    }
    for name, config in files.items():
        config["table"]["name"] = name.replace("-", "_")
        write_config(configs, config).rename(configs / f"{name}.yaml")
    expected = {
        "a-key": (
            "table.record_key",
            "no column 'payment_idd' in the value's fields (payment_id, currency, amount, "
            "ts); did you mean 'payment_id'?; fix: name one of them, or add the field to "
            "decode.value.schema",
        ),
        "b-partition": (
            "table.partition_by",
            "no column 'curency' in the value's fields (payment_id, currency, "
            "amount, ts); did you mean 'currency'?; fix: ",
        ),
        "c-type": (
            "decode.value.schema",
            "column 'amount': unknown type 'BIGINTEGER'; did you mean BIGINT?; fix: give a Spark SQL type",
        ),
        "d-ordering": (
            "table.ordering_field",
            "column 'ts' is of type bool, which cannot order the versions of a "
            "record; fix: name a number, string, date or timestamp column",
        ),
        "e-transform": (
            "transform",
            "column 'tss' is not a column of source; did you mean 'ts'?; fix: name a "
            "column of source: payment_id, currency, amount, ts, kafka_key, kafka_topic",
        ),
        "orders": (
            "table.record_key",
            f"the table at {configs / 'tables' / 'orders'} has ['order_id'], the config "
            "says ['customer']; it cannot change once a table exists; fix: set "
            "table.record_key: [order_id]; or, to change it, write a new table",
        ),
    }
    return configs, expected


@pytest.mark.unit
def test_run_reports_every_mistake_of_every_file_at_once_without_starting_spark(mistakes, tmp_path):
    configs, expected = mistakes

    code, out = run_streamer(["run", str(configs), "--once"], timeout=120)

    assert code == 2, out
    assert not SPARK_STARTED.search(out), out  # found before any JVM started
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    for name, (key, phrase) in expected.items():
        assert any(line.startswith(f"error: {configs / name}.yaml: {key}: ") and phrase in line for line in errors), (
            name,
            out,
        )
    assert len(errors) == len(expected), out
    assert out.splitlines()[-1] == f"{len(expected)} problem(s) in {configs}, found before starting Spark; nothing ran"


@pytest.mark.unit
def test_doctor_reports_the_same_mistakes_each_with_its_fix(mistakes, capsys):
    configs, expected = mistakes

    code = cli.main(["doctor", str(configs), "--timeout", "0.5"])

    out = capsys.readouterr().out
    assert code == 1
    problems = [line for line in out.splitlines() if re.match(r"^problem +\S+ +config ", line)]
    for name, (key, phrase) in expected.items():
        assert any(
            re.search(rf" config +{re.escape(f'{configs / name}.yaml: {key}: ')}", line) and phrase in line
            for line in problems
        ), (name, out)
    assert len(problems) == len(expected), out
    assert re.search(r"^ok +java ", out, re.MULTILINE)  # and the other checks go on


@pytest.mark.unit
def test_a_file_with_several_mistakes_has_them_all_reported(tmp_path):
    config = config_from_mapping(
        payments(
            tmp_path,
            "payments",
            table={"record_key": "payment_idd", "partition_by": "curency"},
            decode={
                "value": {
                    "format": "json",
                    "schema": "payment_id STRING, currency STRING, amount BIGINTEGER, ts TIMESTMP",
                }
            },
        ),
        "payments.yaml",
        tmp_path,
    )

    found = [(p.key, p.text) for p in preflight.check(config)]

    assert found == [
        ("decode.value.schema", "column 'amount': unknown type 'BIGINTEGER'; did you mean BIGINT?"),
        ("decode.value.schema", "column 'ts': unknown type 'TIMESTMP'; did you mean TIMESTAMP?"),
        (
            "table.record_key",
            "no column 'payment_idd' in the value's fields (payment_id, currency, amount, ts); "
            "did you mean 'payment_id'?",
        ),
        (
            "table.partition_by",
            "no column 'curency' in the value's fields (payment_id, currency, amount, ts); did you mean 'currency'?",
        ),
    ]


@pytest.mark.unit
def test_keys_must_be_of_types_a_hudi_key_takes_and_columns_may_not_take_the_decoders_names(tmp_path):
    config = config_from_mapping(
        payments(
            tmp_path,
            "payments",
            table={"partition_by": "tags"},
            decode={"value": {"format": "json", "schema": f"{PAYMENTS_SCHEMA}, tags ARRAY<STRING>"}},
        ),
        "payments.yaml",
        tmp_path,
    )
    clash = config_from_mapping(
        payments(
            tmp_path,
            "payments",
            decode={"value": {"format": "json", "schema": f"{PAYMENTS_SCHEMA}, kafka_offset BIGINT"}},
        ),
        "payments.yaml",
        tmp_path,
    )

    (problem,) = preflight.check(config)
    (clashing,) = preflight.check(clash)

    assert (problem.key, problem.text) == (
        "table.partition_by",
        "column 'tags' is of type list<element: string>, which cannot be a partition value",
    )
    assert (
        clashing.key == "decode.value"
        and "['kafka_offset'] take the names of columns the decoder adds" in clashing.text
    )


@pytest.mark.unit
def test_a_transform_whose_columns_are_known_is_checked_against_the_table_keys(tmp_path):
    select = "SELECT payment_id AS id, upper(currency) AS currency, ts FROM source WHERE amount > 0"
    renamed = config_from_mapping(payments(tmp_path, "p", transform=select), "p.yaml", tmp_path)
    computed = config_from_mapping(
        payments(tmp_path, "p", transform="SELECT *, amount * 2 FROM source"), "p.yaml", tmp_path
    )

    (problem,) = preflight.check(renamed)

    assert (problem.key, problem.text) == (
        "table.record_key",
        "no column 'payment_id' in the transform's columns (id, currency, ts)",
    )
    assert problem.fix == "name one of them, or select the column in the transform"
    assert preflight.check(computed) == []  # a column Spark names itself: the list is not known whole


@pytest.mark.unit
def test_an_existing_tables_columns_must_take_the_values_fields(tmp_path):
    committed_table(tmp_path / "tables" / "orders", change_events(20, seed=4), {"orders": {0: 20}})
    mapping = order_config(tmp_path, "orders", BROKER, "orders")
    mapping["decode"]["value"]["schema"] = "order_id STRING, region STRING, updated_at BIGINT, deleted BOOLEAN"

    (problem,) = preflight.check(config_from_mapping(mapping, "orders.yaml", tmp_path))

    assert problem.key == "decode.value"
    assert problem.text.startswith(f"the table at {tmp_path / 'tables' / 'orders'} cannot take these columns: ")
    assert problem.fix.startswith("keep the table's columns, with the same or wider types")


# -- change events ---------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "accounts-postgres-cdc.yaml"
ACCOUNTS_ROW = "region STRING, id INT, name STRING, balance DOUBLE, visits BIGINT, active BOOLEAN"


def accounts(tmp: Path, **changes) -> dict:
    """A table mirrored from Debezium's change events, as the example config has it."""
    config = {
        "table": {
            "name": "accounts",
            "path": "tables/accounts",
            "record_key": ["region", "id"],
            "partition_by": "region",
            "ordering_field": "source_position",
        },
        "source": {"bootstrap_servers": BROKER, "topics": "pg.public.accounts"},
        "decode": {
            "key": {"format": "json"},
            "value": {"format": "json", "envelope": "debezium", "schema": ACCOUNTS_ROW},
            "envelope_columns": {"position": "source_position", "op": "source_op"},
        },
    }
    for section, values in changes.items():
        if isinstance(values, dict):
            config.setdefault(section, {}).update(values)
        else:
            config[section] = values
    return config


@pytest.mark.unit
def test_a_debezium_table_orders_by_an_envelope_column_and_its_schemaless_key_gives_the_record_key(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MOR_STREAMER_DATA", str(tmp_path))  # the example's table path
    example = load_config(EXAMPLE)
    transformed = config_from_mapping(
        accounts(tmp_path, transform="SELECT *, upper(name) AS label FROM source"), "accounts.yaml", tmp_path
    )

    assert preflight.check(example) == []
    assert preflight.check(transformed) == []


@pytest.mark.unit
def test_an_avro_schema_file_is_the_change_events_and_a_confluent_avro_one_the_rows(tmp_path):
    row = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "int"},
            {"name": "name", "type": ["null", "string"]},
        ],
    }
    envelope = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"]},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"]},
        ],
    }
    (tmp_path / "row.avsc").write_text(json.dumps(row))
    (tmp_path / "envelope.avsc").write_text(json.dumps(envelope))
    registry = {"url": "http://127.0.0.1:9"}  # never asked: the schema files say it all
    plain = config_from_mapping(
        accounts(
            tmp_path, decode={"value": {"format": "avro", "envelope": "debezium", "schema_file": "envelope.avsc"}}
        ),
        "accounts.yaml",
        tmp_path,
    )
    confluent = config_from_mapping(
        accounts(
            tmp_path,
            decode={
                "value": {"format": "confluent-avro", "envelope": "debezium", "schema_file": "row.avsc"},
                "schema_registry": registry,
            },
        ),
        "accounts.yaml",
        tmp_path,
    )
    not_an_event = config_from_mapping(
        accounts(tmp_path, decode={"value": {"format": "avro", "envelope": "debezium", "schema_file": "row.avsc"}}),
        "accounts.yaml",
        tmp_path,
    )

    assert preflight.check(plain) == [] and preflight.check(confluent) == []
    assert preflight.format_spec(plain, plain.decode.value, "value").arrow_schema.names == ["region", "id", "name"]
    assert [(p.key, p.text) for p in preflight.check(not_an_event)] == [
        ("decode.value.schema_file", f"{tmp_path / 'row.avsc'} is not a Debezium change event's (no `after` record)")
    ]


@pytest.mark.unit
def test_run_refuses_a_debezium_config_whose_ordering_column_is_misspelt_without_starting_spark(tmp_path):
    configs = tmp_path / "configs"
    write_config(configs, accounts(tmp_path, table={"ordering_field": "source_postion"}))

    code, out = run_streamer(["run", str(configs), "--once"], timeout=120)

    assert code == 2, out
    assert not SPARK_STARTED.search(out), out
    assert (
        "table.ordering_field: no column 'source_postion' in the value's fields (region, id, name, balance, "
        "visits, active, source_position, source_op); did you mean 'source_position'?" in out
    ), out


@pytest.mark.unit
@pytest.mark.parametrize(
    "changes, key, phrase",
    [
        (
            {"table": {"partition_by": "name"}, "decode": {"tombstones": "delete"}},
            "decode.tombstones",
            "delete needs a key that gives every record key and partition field; the key (json) lacks ['name']",
        ),
        (
            {"table": {"ordering_field": "name"}, "decode": {"tombstones": "delete"}},
            "decode.tombstones",
            "delete needs an integer table.ordering_field ('name' is string)",
        ),
        (
            {"decode": {"envelope_columns": {"position": "balance"}}},
            "decode.envelope_columns.position",
            "column 'balance' is a field of the value's row",
        ),
        (
            {"decode": {"envelope_columns": {"position": "source_position", "op": "kafka_topic"}}},
            "decode.envelope_columns.op",
            "column 'kafka_topic' is one the decoder adds",
        ),
        (
            {"transform": "SELECT region, id, name, source_position FROM source"},
            "transform",
            "deletes (tombstones, change events) are marked in the column '_delete' of source, which the "
            "query leaves out",
        ),
    ],
)
def test_change_event_settings_that_cannot_work_are_found_before_spark(tmp_path, changes, key, phrase):
    config = config_from_mapping(accounts(tmp_path, **changes), "accounts.yaml", tmp_path)

    found = [(p.key, p.text) for p in preflight.check(config)]

    assert any(k == key and phrase in text for k, text in found), found


# -- the DDL reader --------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    "ddl, expected",
    [
        ("a INTEGR", "column 'a': unknown type 'INTEGR'; did you mean INTEGER?"),
        ("a VARCHAR(10)", "column 'a': type VARCHAR is not supported here: use STRING"),
        ("a INTERVAL DAY", "column 'a': type INTERVAL is not supported here: the json format cannot decode intervals"),
        (
            "a DECIMAL(40, 2)",
            "column 'a': DECIMAL(40, 2): the precision is 1 to 38 and the scale at most the precision",
        ),
        ("a ARRAY<INT", "column 'a': '>' after the element type of ARRAY<... expected at the end"),
        ("a MAP<STRING INT>", "column 'a': ',' expected after the key type of MAP<..., got 'INT'"),
        ("a INT DEFAULT 1", "column 'a': unexpected 'DEFAULT' after the type"),
        ("a STRUCT<x FOO>", "column 'a': unknown type 'FOO' for field 'x'; use a Spark SQL type: BOOLEAN, INT"),
        ("a", "column 'a': a type expected at the end"),
        ("", "column 1: no columns"),
    ],
)
def test_a_bad_ddl_column_is_named_with_what_is_wrong(ddl, expected):
    _, problems = parse_ddl(ddl)

    assert len(problems) == 1 and str(problems[0]).startswith(expected), problems


# -- a transform's columns ---------------------------------------------------------------------------

SOURCE = pa.schema(
    [
        ("order_id", pa.string()),
        ("amount", pa.float64()),
        ("region", pa.string()),
        ("kafka_key", pa.struct([("id", pa.int64())])),
        ("kafka_timestamp", pa.timestamp("us", "UTC")),
    ]
)


@pytest.mark.unit
@pytest.mark.parametrize(
    "sql, fields, complete, problems",
    [
        ("SELECT * FROM source", {f.name: f.type for f in SOURCE}, True, []),
        ("select *, upper(region) AS code from source", {**{f.name: f.type for f in SOURCE}, "code": None}, True, []),
        (
            "SELECT * EXCEPT (amount, kafka_key) FROM source",
            {"order_id": pa.string(), "region": pa.string(), "kafka_timestamp": pa.timestamp("us", "UTC")},
            True,
            [],
        ),
        (
            "SELECT s.order_id id, kafka_key.id AS key_id, `region` FROM source s WHERE s.amount > 1",
            {"id": pa.string(), "key_id": pa.int64(), "region": pa.string()},
            True,
            [],
        ),
        ("SELECT order_id, amount * 2 FROM source", {"order_id": pa.string()}, False, []),
        (
            "SELECT CASE WHEN amount > 1 THEN 'big' END size, count(*) n FROM source GROUP BY 1",
            {"size": None, "n": None},
            True,
            [],
        ),
        (
            "SELECT order_idd, kafka_key.idd FROM source -- two typos",
            {"order_idd": None, "idd": None},
            True,
            [
                "column 'order_idd' is not a column of source; did you mean 'order_id'?",
                "kafka_key.idd: 'kafka_key' has no field 'idd' (its fields: id)",
            ],
        ),
        ("WITH x AS (SELECT * FROM source) SELECT * FROM x", {}, False, []),
        ("SELECT a.order_id FROM source a JOIN source b ON a.order_id = b.order_id", {}, False, []),
        ("SELECT order_id FROM source UNION SELECT region FROM source", {}, False, []),
    ],
)
def test_a_transforms_select_list_is_read_as_far_as_it_can_be_known(sql, fields, complete, problems):
    found = transform_columns(sql, SOURCE)

    assert (found.fields, found.complete, found.problems) == (fields, complete, problems)
