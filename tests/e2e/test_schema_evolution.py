"""Schema evolution in the stream: Confluent Avro records whose writer schemas add a field, widen
types, drop a required field or retype one, read by the ingestion application from the real
broker with the real schema registry, each table checked against an oracle through our reader and
hudi-rs.

Each table runs twice, `--once` each time (in this process, as `streamer run` runs it): the first
run reads what producers wrote with the first schema version (and, for the added field, already
the next one), the second what they wrote after moving on, starting from what the first run
recorded: the table's reader schema, evolved by the latest registered one. Runs go one table at
a time: each query starts a Python source process that Spark gives 10 s to connect back, which
several at once on a loaded 2-core machine do not always make.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import random
from dataclasses import dataclass, field

import fastavro
import hudi
import pyarrow as pa
import pytest

from streamer import app
from streamer.app import TableOutcome
from streamer.config.loading import config_from_mapping
from streamer.decode.columns import EVOLVING, RAW_VALUE
from streamer.decode.ddl import parse_ddl
from streamer.decode.evolution import VALUE_SCHEMA_KEY
from streamer.decode.formats import FormatSpec, spark_normalized
from streamer.decode.record_decoder import RecordDecoder
from streamer.decode.registry import SchemaRegistryClient, confluent_frame
from streamer.decode.value_schema import compare, evolve
from streamer.errors import StartupError
from table.mor_table import MorTable, TableSpec
from table.schema import arrow_schema_from_avro
from table.timeline.commit_metadata import CommitMetadata
from tests.support import kafka_broker
from tests.support.ingestion import committed_offsets, order_config
from tests.support.oracle import Oracle

pytestmark = pytest.mark.e2e

BASE_FIELDS = [
    {"name": "order_id", "type": "string"},
    {"name": "region", "type": "string"},
    {"name": "status", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "weight", "type": "float"},
    {"name": "updated_at", "type": "long"},
    {"name": "deleted", "type": "boolean"},
]
COLUMNS = ["order_id", "region", "status", "quantity", "weight", "updated_at"]


def order_schema(fields: list[dict]) -> dict:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": fields}


V1 = order_schema(BASE_FIELDS)
WITH_COUPON = order_schema([*BASE_FIELDS, {"name": "coupon", "type": ["null", "string"], "default": None}])
WIDER = order_schema(
    [dict(f, type={"quantity": "long", "weight": "double"}.get(f["name"], f["type"])) for f in BASE_FIELDS]
)
WITHOUT_STATUS = order_schema([f for f in BASE_FIELDS if f["name"] != "status"])
STATUS_AS_INT = order_schema([dict(f, type="int") if f["name"] == "status" else f for f in BASE_FIELDS])


REFUSED = {  # version: (writer schema, its records from an order change, why the job refuses them)
    "without status": (
        WITHOUT_STATUS,
        lambda e: {k: v for k, v in e.items() if k != "status"},
        "lacks field 'status' (string), which the table's reader schema requires",
    ),
    "status as int": (
        STATUS_AS_INT,
        lambda e: dict(e, status=len(e["status"])),
        "changes field 'status' from string to int; a column's type can only widen",
    ),
}


@dataclass
class Run:
    """One run of a table: its outcome and what the application logged."""

    outcome: TableOutcome
    log: str


@dataclass
class Scenario:
    """One topic and its table: what was produced, and which records must not land."""

    name: str
    topic: str
    config: dict
    rng: random.Random
    runs: list[Run] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # as the table must see them, in topic order
    refused_offsets: dict[str, list[int]] = field(default_factory=dict)  # by version
    schema_ids: dict[str, int] = field(default_factory=dict)  # by version
    _keys: list[str] = field(default_factory=list)
    _clock: itertools.count = field(default_factory=lambda: itertools.count(1_700_000_000_000, 7))

    @property
    def path(self) -> str:
        return self.config["table"]["path"]

    def changes(self, count: int) -> list[dict]:
        """New orders and updates (a few deletes) of this topic's orders, in the first schema's
        fields; an order keeps its region, and no two changes share an `updated_at`."""
        out = []
        for _ in range(count):
            if not self._keys or self.rng.random() < 0.4:
                self._keys.append(f"o-{len(self._keys):04d}")
                key = self._keys[-1]
            else:
                key = self.rng.choice(self._keys)
            out.append(
                {
                    "order_id": key,
                    "region": ("eu", "us")[int(key[2:]) % 2],
                    "status": self.rng.choice(("created", "paid", "shipped")),
                    "quantity": self.rng.randint(1, 50),
                    "weight": self.rng.randint(1, 40) / 4,
                    "updated_at": next(self._clock),
                    "deleted": self.rng.random() < 0.05,
                }
            )
        return out

    def register(self, registry: SchemaRegistryClient, version: str, schema: dict) -> None:
        self.schema_ids[version] = registry.register(f"{self.topic}-value", json.dumps(schema))

    def produce(
        self, bootstrap: str, version: str, schema: dict, records: list[dict], as_rows: list[dict] | None
    ) -> None:
        """Produce `records` written with `schema`; `as_rows` are what the table must show for
        them, None when the job must refuse them."""
        parsed = fastavro.parse_schema(schema)
        values = []
        for record in records:
            payload = io.BytesIO()
            fastavro.schemaless_writer(payload, parsed, record)
            values.append(
                (record["order_id"].encode(), confluent_frame(self.schema_ids[version], payload.getvalue()), None)
            )
        offsets = [offset for _, offset in kafka_broker.produce(bootstrap, self.topic, values)]
        if as_rows is None:
            self.refused_offsets.setdefault(version, []).extend(offsets)
        else:
            self.events += as_rows

    def produce_v1(self, bootstrap: str, count: int, **added) -> None:
        records = self.changes(count)
        self.produce(bootstrap, "v1", V1, records, [dict(e, **added) for e in records])

    def produce_refused(self, bootstrap: str, registry: SchemaRegistryClient, version: str, count: int) -> None:
        schema, record_of, _ = REFUSED[version]
        self.register(registry, version, schema)
        self.produce(bootstrap, version, schema, [record_of(e) for e in self.changes(count)], None)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_once(spark, scenario: Scenario) -> None:
    """`streamer run --once` of the scenario's table, in this process."""
    handler, logger = _Lines(), logging.getLogger("streamer")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        (outcome,) = app.run([config_from_mapping(scenario.config)], spark, once=True).tables
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    scenario.runs.append(Run(outcome, "\n".join(handler.lines)))


@pytest.fixture(scope="module")
def scenarios(spark, kafka_bootstrap, schema_registry_url, tmp_path_factory) -> dict[str, Scenario]:
    tmp = tmp_path_factory.mktemp("evolution")
    registry = SchemaRegistryClient(schema_registry_url)
    reader_file = tmp / "order_v1.avsc"
    reader_file.write_text(json.dumps(V1))
    tables = {  # name: (partitions, decode.on_error, reader schema file)
        "added": (2, "fail", reader_file),
        "widened": (2, "fail", None),
        "removed_stop": (1, "fail", None),
        "quarantined": (1, "quarantine", reader_file),
        "retyped_stop": (1, "fail", reader_file),
    }
    scenarios = {}
    for seed, (name, (partitions, on_error, schema_file)) in enumerate(tables.items()):
        topic = kafka_broker.create_topic(kafka_bootstrap, f"evolution-{name}-{tmp.name}", partitions=partitions)
        value = {"format": "confluent-avro", **({"schema_file": str(schema_file)} if schema_file else {})}
        config = order_config(
            tmp,
            name,
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 60},
            decode={"value": value, "schema_registry": {"url": schema_registry_url}, "on_error": on_error},
        )
        scenarios[name] = Scenario(name, topic, config, random.Random(seed))
        scenarios[name].register(registry, "v1", V1)
    added, widened, removed, quarantined, retyped = scenarios.values()

    added.produce_v1(kafka_bootstrap, 100, coupon=None)
    added.register(registry, "coupon", WITH_COUPON)  # its reader schema stays the file's: v1
    _produce_with_coupons(kafka_bootstrap, added, 120)
    added.produce_v1(kafka_bootstrap, 40, coupon=None)  # a producer still on v1
    widened.produce_v1(kafka_bootstrap, 100)
    removed.produce_v1(kafka_bootstrap, 100)
    quarantined.produce_v1(kafka_bootstrap, 60)
    quarantined.produce_refused(kafka_bootstrap, registry, "without status", 20)
    quarantined.produce_v1(kafka_bootstrap, 30)
    quarantined.produce_refused(kafka_bootstrap, registry, "status as int", 20)
    quarantined.produce_v1(kafka_bootstrap, 30)
    for scenario in (added, widened, removed, quarantined):
        run_once(spark, scenario)

    _produce_with_coupons(kafka_bootstrap, added, 60)
    added.produce_v1(kafka_bootstrap, 30, coupon=None)
    widened.register(registry, "wider", WIDER)
    wider = [
        dict(e, quantity=e["quantity"] + 2**34 * i, weight=e["weight"] + 0.1)
        for i, e in enumerate(widened.changes(120))
    ]
    widened.produce(kafka_bootstrap, "wider", WIDER, wider, wider)
    widened.produce_v1(kafka_bootstrap, 30)
    for scenario, version in ((removed, "without status"), (retyped, "status as int")):
        scenario.produce_v1(kafka_bootstrap, 80)  # a batch and more of the first version, then the new one
        scenario.produce_refused(kafka_bootstrap, registry, version, 20)
        scenario.produce_v1(kafka_bootstrap, 30)
    for scenario in (added, widened, removed, retyped):
        run_once(spark, scenario)
    return scenarios


def _produce_with_coupons(bootstrap: str, scenario: Scenario, count: int) -> None:
    records = [dict(e, coupon=scenario.rng.choice((None, "SPRING", "VIP"))) for e in scenario.changes(count)]
    scenario.produce(bootstrap, "coupon", WITH_COUPON, records, records)


# ---- checks ------------------------------------------------------------------------------------


def expected_rows(events: list[dict], columns: list[str]) -> dict:
    oracle = Oracle("order_id", "updated_at", "deleted")
    oracle.apply_batch(events)
    return {k: {c: r[c] for c in columns} for k, r in oracle.rows().items()}


def assert_rows_match(path: str, events: list[dict], columns: list[str]) -> None:
    """Our reader and hudi-rs both read exactly the oracle's rows."""
    expected = expected_rows(events, columns)
    ours = {r["order_id"]: r for r in MorTable.load(path).snapshot(columns=columns).to_pylist()}
    assert ours == expected
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
    theirs = [r for b in batches for r in b.select(columns).to_pylist()]
    assert len(theirs) == len(expected)
    assert {r["order_id"]: r for r in theirs} == expected


def commit_schemas(path: str) -> list[dict]:
    """Each completed deltacommit's table schema (Avro), oldest first."""
    timeline = MorTable.load(path).timeline()
    return [
        json.loads(CommitMetadata.from_json(timeline.read_content(i)).extra_metadata["schema"])
        for i in timeline.completed("deltacommit")
    ]


def field_types(avro: dict) -> dict[str, object]:
    return {f["name"]: f["type"] for f in avro["fields"]}


def test_a_new_nullable_field_becomes_a_column_that_earlier_rows_read_as_null(scenarios):
    scenario = scenarios["added"]
    first, second = scenario.runs
    assert first.outcome.error is None and second.outcome.error is None
    assert (
        f"added: writer schema id {scenario.schema_ids['coupon']} evolves the table's schema: "
        "new column(s) ['coupon']" in first.log
    )
    assert "evolves the table's schema" not in second.log  # it starts from the reader schema recorded

    assert_rows_match(scenario.path, scenario.events, [*COLUMNS, "coupon"])
    table = MorTable.load(scenario.path)
    assert table.schema().names[-1] == "coupon" and str(table.schema().field("coupon").type) == "string"
    schemas = commit_schemas(scenario.path)
    assert "coupon" not in field_types(schemas[0]) and field_types(schemas[-1])["coupon"] == ["null", "string"]
    reader = json.loads(table.last_commit_metadata().extra_metadata[VALUE_SCHEMA_KEY])
    assert reader["fields"][-1] == {"name": "coupon", "type": ["null", "string"], "default": None}


def test_a_field_widened_from_int_to_long_and_float_to_double_widens_its_column(scenarios):
    scenario = scenarios["widened"]
    assert [run.outcome.error for run in scenario.runs] == [None, None]

    assert_rows_match(scenario.path, scenario.events, COLUMNS)
    assert max(e["quantity"] for e in scenario.events) > 2**40
    schema = MorTable.load(scenario.path).schema()
    assert (str(schema.field("quantity").type), str(schema.field("weight").type)) == ("int64", "double")
    first, last = field_types(commit_schemas(scenario.path)[0]), field_types(commit_schemas(scenario.path)[-1])
    assert (first["quantity"], first["weight"]) == (["null", "int"], ["null", "float"])
    assert (last["quantity"], last["weight"]) == (["null", "long"], ["null", "double"])


@pytest.mark.parametrize("name, version", [("removed_stop", "without status"), ("retyped_stop", "status as int")])
def test_a_writer_schema_that_drops_or_retypes_a_field_stops_the_table_and_writes_nothing_of_its_batch(
    scenarios, name, version
):
    scenario = scenarios[name]
    error = scenario.runs[-1].outcome.error
    assert f"writer schema id {scenario.schema_ids[version]} {REFUSED[version][2]}" in error
    assert "nothing of this batch was written" in error

    (committed,) = committed_offsets(scenario.path, scenario.topic).values()
    assert 0 < committed <= scenario.refused_offsets[version][0]  # batches before, none with refused records
    assert_rows_match(scenario.path, scenario.events[:committed], COLUMNS)
    assert str(MorTable.load(scenario.path).schema().field("status").type) == "string"


def test_a_latest_registered_schema_that_does_not_fit_the_table_is_logged_at_start(scenarios):
    scenario = scenarios["removed_stop"]
    first, second = scenario.runs
    assert first.outcome.error is None
    assert (
        f"removed_stop: the latest schema registered for '{scenario.topic}-value' "
        f"{REFUSED['without status'][2]}" in second.log
    )


@pytest.mark.parametrize("version", ["without status", "status as int"])
def test_records_of_a_writer_schema_that_drops_or_retypes_a_field_go_to_quarantine_with_the_reason(scenarios, version):
    scenario = scenarios["quarantined"]
    (run,) = scenario.runs
    assert run.outcome.error is None and run.outcome.bad == 40

    assert_rows_match(scenario.path, scenario.events, COLUMNS)
    quarantined = MorTable.load(f"{scenario.path}_quarantine").snapshot().to_pylist()
    refused = sorted(
        r["offset"]
        for r in quarantined
        if r["reason"].startswith(f"writer schema id {scenario.schema_ids[version]} {REFUSED[version][2]}")
    )
    assert refused == scenario.refused_offsets[version]
    assert MorTable.load(scenario.path).schema().names == [f["name"] for f in BASE_FIELDS if f["name"] != "deleted"]


def test_a_declared_json_schema_without_a_column_of_the_table_fails_at_start_naming_it(
    spark, kafka_bootstrap, tmp_path
):
    config = order_config(tmp_path, "orders", kafka_bootstrap, "orders-never-read")
    config["decode"]["value"]["schema"] = "order_id STRING, region STRING, updated_at BIGINT, deleted BOOLEAN"
    MorTable.create(
        config["table"]["path"],
        TableSpec(
            name="orders",
            schema=arrow_schema_from_avro(V1).remove(6),
            record_key_fields=("order_id",),
            partition_fields=("region",),
            ordering_field="updated_at",
        ),
    )

    with pytest.raises(
        StartupError,
        match=r"decode.value: the table at .* cannot take these columns: "
        r"the table's column\(s\) \['status', 'quantity', 'weight'\] are missing",
    ):
        app.run([config_from_mapping(config)], spark, once=True)


# A json value's declared schema is read without Spark, before Spark starts (`streamer.decode.ddl`):
# it must read what Spark reads.
DDLS = [
    "a BOOLEAN, b TINYINT, c SMALLINT, d INT, e BIGINT, f FLOAT, g DOUBLE, h DECIMAL, i DECIMAL(12,3), j STRING, "
    "k BINARY, l DATE, m TIMESTAMP, n TIMESTAMP_NTZ",
    "a BYTE, b SHORT, c INTEGER, d LONG, e REAL, f DEC(5), g NUMERIC(7, 2), h TIMESTAMP_LTZ, i void",
    "a ARRAY<INT>, b MAP<STRING, BIGINT>, c STRUCT<x: INT, y STRING NOT NULL COMMENT 'it''s', z: ARRAY<STRUCT<q DATE>>>",
    "`we ird` INT NOT NULL COMMENT 'c, d', b string COMMENT \"dq\" 'more', `a``b` long COMMENT 'it\\'s'",
    "a: int, b: string",
    "1a INT, order_id STRING NOT NULL",
]


@pytest.mark.parametrize("ddl", DDLS)
def test_the_ddl_reader_reads_what_spark_reads(spark, ddl):
    from pyspark.sql.pandas.types import to_arrow_schema

    ours, problems = parse_ddl(ddl)
    sparks = spark_normalized(
        to_arrow_schema(spark.createDataFrame([], ddl).schema, timezone="UTC", prefers_large_types=False)
    )

    assert problems == []
    assert spark_normalized(ours).equals(sparks, check_metadata=True), (ours, sparks)


# ---- the rules, without Spark or a broker --------------------------------------------------------


@pytest.mark.unit
def test_a_writer_schema_older_than_the_reader_schema_fits_it():
    evolved = order_schema([*BASE_FIELDS, {"name": "coupon", "type": ["null", "string"], "default": None}])
    change = compare(evolved, V1)
    assert change.problem is None and not change.evolves


@pytest.mark.unit
def test_a_new_field_of_a_named_type_the_reader_defines_refers_to_it():
    address = {"type": "record", "name": "Address", "fields": [{"name": "zip", "type": "string"}]}
    reader = order_schema([*BASE_FIELDS, {"name": "ship_to", "type": address}])
    writer = order_schema(reader["fields"] + [{"name": "bill_to", "type": ["null", "Address"], "default": None}])
    change = compare(reader, writer)
    assert change.evolves
    assert evolve(reader, change)["fields"][-1] == {
        "name": "bill_to",
        "type": ["null", "shop.Address"],
        "default": None,
    }


@pytest.mark.unit
def test_a_lossy_promotion_or_a_nested_change_does_not_fit():
    long_reader = order_schema([dict(f, type="long") if f["name"] == "quantity" else f for f in BASE_FIELDS])
    as_double = order_schema([dict(f, type="double") if f["name"] == "quantity" else f for f in BASE_FIELDS])
    assert "changes field 'quantity' from long to double" in compare(long_reader, as_double).problem
    nested = order_schema([*BASE_FIELDS, {"name": "tags", "type": {"type": "array", "items": "string"}}])
    other = order_schema([*BASE_FIELDS, {"name": "tags", "type": {"type": "array", "items": "int"}}])
    assert "the fields of a nested type cannot change" in compare(nested, other).problem


@pytest.mark.unit
def test_the_decoder_leaves_records_of_an_evolving_writer_schema_undecoded_with_their_bytes(schema_registry_url):
    registry = SchemaRegistryClient(schema_registry_url)
    subject = f"decoder-{random.randrange(10**9)}-value"
    ids = [registry.register(subject, json.dumps(schema)) for schema in (V1, WITH_COUPON, WITHOUT_STATUS)]
    order = {
        "order_id": "o-1",
        "region": "eu",
        "status": "paid",
        "quantity": 2,
        "weight": 1.5,
        "updated_at": 1,
        "deleted": False,
    }
    values = []
    for schema_id, schema, record in zip(
        ids, (V1, WITH_COUPON, WITHOUT_STATUS), (order, dict(order, coupon="VIP"), REFUSED["without status"][1](order))
    ):
        payload = io.BytesIO()
        fastavro.schemaless_writer(payload, fastavro.parse_schema(schema), record)
        values.append(confluent_frame(schema_id, payload.getvalue()))
    decoder = RecordDecoder(
        FormatSpec("confluent-avro", arrow_schema_from_avro(V1), json.dumps(V1)),
        FormatSpec("none", None),
        schema_registry_url,
        required_fields=("order_id",),
    )
    n = len(values)
    batch = pa.record_batch(
        {
            "key": pa.nulls(n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([0] * n, pa.timestamp("ms")),
        }
    )

    fits, evolves, refused = decoder.decode(batch).to_pylist()

    assert (fits["order_id"], fits["_error"], fits[EVOLVING]) == ("o-1", None, None)
    assert (evolves["order_id"], evolves["_error"], evolves[EVOLVING], evolves[RAW_VALUE]) == (
        None,
        None,
        ids[1],
        values[1],
    )
    assert refused["_error"].startswith(f"writer schema id {ids[2]} {REFUSED['without status'][2]}")
    assert refused[EVOLVING] is None
