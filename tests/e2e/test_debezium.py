"""A PostgreSQL table mirrored end to end: Debezium's PostgreSQL connector (pgoutput) in Kafka
Connect writes its changes to the session's Apache Kafka, `streamer run` writes them into a table,
and our reader, hudi-rs and Apache Hudi 0.15 read exactly what `SELECT * FROM` the source table
returns, the column added mid-stream included.

Everything is real: PostgreSQL from Debian's package, Kafka Connect, Debezium and Apicurio Registry
from their Maven Central jars (all started once per run), the streamer in its own process. One
workload feeds three connectors: Connect's JSON with schemas, JSON without them, and Avro through
the registry. It runs on a table that already has rows, so the initial snapshot counts: inserts,
updates, deletes (with tombstones), primary-key updates (one of which moves a row to another
partition), a rolled-back transaction, multi-row transactions that change a key several times,
and `ALTER TABLE ADD COLUMN` halfway.
"""

from __future__ import annotations

import json
import random
import signal
import time
import urllib.request
from pathlib import Path

import hudi
import pytest
import yaml

from harness.kafka_connect import debezium_postgres_config
from streamer.cli import main as cli
from streamer.sink import BATCH_STATS_KEY
from table.file_group.fs_view import list_partitions
from table.mor_table import MorTable
from table.timeline.commit_metadata import CommitMetadata
from tests.support.ingestion import JobOutput, has_read, run_streamer, streamer_process, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.hudi]

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "accounts-postgres-cdc.yaml"
REGIONS = ("emea", "apac", "amer", "africa")
COLUMNS = ["region", "id", "name", "balance", "visits", "active", "tier"]
KEY = ("region", "id")
CAPTURE_TIMEOUT = 120


class Workload:
    """The source table's changes, made in PostgreSQL by SQL scripts of a seeded random."""

    def __init__(self, pg, database: str, seed: int = 32):
        self.pg = pg
        self.database = database
        self.random = random.Random(seed)
        self.next_id = 1
        self.live: set[tuple[str, int]] = set()

    def sql(self, script: str) -> str:
        return self.pg.sql(script, self.database)

    def create(self, rows: int) -> None:
        self.sql(
            "CREATE TABLE accounts (region text NOT NULL, id int NOT NULL, name text, balance double precision, "
            "visits bigint, active boolean, PRIMARY KEY (region, id));"
        )
        self.sql(self._inserts(rows, tier=False))

    def _row_values(self, region: str, row_id: int, tier: bool) -> str:
        r = self.random
        values = [
            f"'{region}'",
            str(row_id),
            f"'name-{r.randrange(10**6)}'",
            f"{r.uniform(-1000, 1000):.4f}",
            str(r.randrange(10**9)),
            r.choice(["true", "false", "NULL"]),
        ]
        if tier:
            values.append(r.choice(["'gold'", "'silver'", "NULL"]))
        return f"({', '.join(values)})"

    def _inserts(self, rows: int, tier: bool, per_statement: int = 50) -> str:
        statements = []
        for start in range(0, rows, per_statement):
            values = []
            for _ in range(min(per_statement, rows - start)):
                key = (self.random.choice(REGIONS), self.next_id)
                self.next_id += 1
                self.live.add(key)
                values.append(self._row_values(*key, tier))
            statements.append(f"INSERT INTO accounts VALUES {', '.join(values)};")
        return "\n".join(statements)

    def _pick(self) -> tuple[str, int]:
        return self.random.choice(sorted(self.live))

    def changes(self, inserts: int, updates: int, deletes: int, tier: bool) -> None:
        """Inserts, then transactions of updates (a key often changed twice in one), then deletes."""
        self.sql(self._inserts(inserts, tier))
        script = []
        for start in range(0, updates, 20):
            script.append("BEGIN;")
            for _ in range(min(20, updates - start)):
                region, row_id = self._pick()
                sets = [
                    f"balance = balance + {self.random.randrange(1, 100)}",
                    "visits = visits + 1",
                    f"name = 'renamed-{self.random.randrange(10**6)}'",
                ]
                if tier:
                    sets.append(f"tier = {self.random.choice(['gold', 'silver', 'bronze'])!r}")
                script.append(
                    f"UPDATE accounts SET {', '.join(self.random.sample(sets, 2))} "
                    f"WHERE region = '{region}' AND id = {row_id};"
                )
            script.append("COMMIT;")
        self.sql("\n".join(script))
        script = []
        for _ in range(deletes):
            region, row_id = self._pick()
            self.live.discard((region, row_id))
            script.append(f"DELETE FROM accounts WHERE region = '{region}' AND id = {row_id};")
        self.sql("\n".join(script))

    def key_updates(self, count: int) -> None:
        """Primary-key updates: a new id in the same region, and (every third) a new region."""
        script = []
        for i in range(count):
            region, row_id = self._pick()
            new = (REGIONS[(REGIONS.index(region) + 1) % len(REGIONS)] if i % 3 == 0 else region, self.next_id)
            self.next_id += 1
            self.live.discard((region, row_id))
            self.live.add(new)
            script.append(
                f"UPDATE accounts SET region = '{new[0]}', id = {new[1]} WHERE region = '{region}' AND id = {row_id};"
            )
        self.sql("\n".join(script))

    def rolled_back(self) -> None:
        region, row_id = self._pick()
        self.sql(
            f"BEGIN; INSERT INTO accounts VALUES ('emea', -1, 'never', 0, 0, true); "
            f"UPDATE accounts SET name = 'never' WHERE region = '{region}' AND id = {row_id}; "
            f"DELETE FROM accounts WHERE region = '{region}' AND id = {row_id}; ROLLBACK;"
        )

    def last_change(self) -> str:
        """One more change, in a transaction that returns a WAL position before its commit: once
        every connector's slot has confirmed past it, Kafka holds every change."""
        region, row_id = self._pick()
        return self.sql(
            f"BEGIN; UPDATE accounts SET visits = visits + 1 WHERE region = '{region}' AND id = {row_id}; "
            "SELECT pg_current_wal_insert_lsn(); COMMIT;"
        ).strip()

    def rows(self) -> dict:
        return {(r["region"], r["id"]): r for r in self.pg.rows("SELECT * FROM accounts", self.database)}


def wait_captured(pg, slots: list[str], lsn: str) -> None:
    deadline = time.monotonic() + CAPTURE_TIMEOUT
    names = ", ".join(f"'{s}'" for s in slots)
    while True:
        done = pg.value(
            f"SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ({names}) AND confirmed_flush_lsn >= '{lsn}'"
        )
        if int(done) == len(slots):
            return
        slots_now = "SELECT slot_name, confirmed_flush_lsn FROM pg_replication_slots"
        assert time.monotonic() < deadline, f"the connectors did not confirm {lsn} in time: {pg.rows(slots_now)}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def mirrored(postgres_server, kafka_connect, apicurio_registry, tmp_path_factory):
    """The workload run against a fresh database, captured by three connectors (JSON with and
    without Connect's schemas, and Avro through Apicurio Registry); the source rows before and
    after ALTER TABLE."""
    pg = postgres_server
    database = "mirror"
    pg.sql(f"DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database};")
    workload = Workload(pg, database)
    workload.create(300)
    avro = apicurio_registry.converter_config("key") | apicurio_registry.converter_config("value")
    connectors = {
        "with-schemas": ("cdc_schemas", True, {}),
        "without-schemas": ("cdc_plain", False, {}),
        "avro": ("cdc_avro", False, avro),
    }
    for prefix, (slot, schemas, converters) in connectors.items():
        kafka_connect.add_connector(
            prefix,
            debezium_postgres_config(
                pg.host,
                pg.port,
                database,
                slot,
                prefix,
                "public.accounts",
                partitions=3,
                schemas=schemas,
                **{"heartbeat.interval.ms": "500", "topic.heartbeat.prefix": "heartbeats", **converters},
            ),
        )
    for prefix in connectors:
        kafka_connect.wait_running(prefix)
    workload.changes(inserts=400, updates=700, deletes=120, tier=False)
    workload.key_updates(30)
    workload.rolled_back()
    workload.sql("ALTER TABLE accounts ADD COLUMN tier text;")
    workload.changes(inserts=200, updates=400, deletes=60, tier=True)
    workload.key_updates(15)
    wait_captured(pg, [slot for slot, _, _ in connectors.values()], workload.last_change())
    try:
        yield workload.rows(), tmp_path_factory.mktemp("cdc")
    finally:
        for prefix in connectors:
            kafka_connect.delete_connector(prefix)


def cdc_config(tmp: Path, bootstrap: str, prefix: str, declared: str | None = None, **sections) -> Path:
    """The example config of configs/examples, on this run's broker, topic and directories."""
    config = yaml.safe_load(EXAMPLE.read_text())
    name = f"accounts_{prefix.replace('-', '_')}"
    config["table"]["name"] = name
    config["table"]["path"] = str(tmp / "tables" / name)
    config["source"].update(bootstrap_servers=bootstrap, topics=[f"{prefix}.public.accounts"])
    config["stream"] = {"trigger_interval": "1 second", "checkpoint_location": str(tmp / "checkpoints" / name)}
    if declared is not None:
        config["decode"]["value"]["schema"] = declared
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)

    return write_config(tmp / "configs", config)


def source_rows(table: dict) -> dict:
    return {key: {c: row.get(c) for c in COLUMNS} for key, row in table.items()}


def read_rows(rows: list[dict]) -> dict:
    keyed = {(r["region"], r["id"]): {c: r[c] for c in COLUMNS} for r in rows}
    assert len(keyed) == len(rows), "a key is read twice"
    return keyed


def assert_mirrors(path: str, source: dict, hudi_judge) -> None:
    expected = source_rows(source)
    ours = read_rows(MorTable.load(path).snapshot(columns=COLUMNS).to_pylist())
    assert ours == expected, _difference(ours, expected)
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
    rs = read_rows([r for b in batches for r in b.select(COLUMNS).to_pylist()])
    assert rs == expected, "hudi-rs: " + _difference(rs, expected)
    judged = read_rows(hudi_judge.snapshot(path).select(COLUMNS).to_pylist())
    assert judged == expected, "Apache Hudi: " + _difference(judged, expected)


def _difference(got: dict, want: dict) -> str:
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    changed = [(got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]][:3]
    return f"{len(got)} rows, {len(want)} in PostgreSQL; missing {missing}, extra {extra}, different {changed}"


def ignored_counts(path: str) -> dict[str, int]:
    table = MorTable.load(path)
    timeline = table.timeline()
    counts: dict[str, int] = {}
    for instant in timeline.completed("deltacommit"):
        stats = CommitMetadata.from_json(timeline.read_content(instant)).extra_metadata.get(BATCH_STATS_KEY)
        for kind, n in json.loads(stats or "{}").get("ignored", {}).items():
            counts[kind] = counts.get(kind, 0) + n
    return counts


def test_the_json_stream_with_schemas_mirrors_the_table_across_a_kill_and_the_added_column(
    mirrored, kafka_bootstrap, hudi_judge
):
    source, tmp = mirrored
    heartbeats = r"heartbeats\.with-schemas"  # topic patterns leave out topics named __*, Debezium's default
    path = cdc_config(
        tmp,
        kafka_bootstrap,
        "with-schemas",
        source={
            "topics": None,
            "topic_pattern": rf"with-schemas\.public\.accounts|{heartbeats}",
            "max_offsets_per_trigger": 700,
            "initial_load_max_records": 0,
        },
    )
    table_path = yaml.safe_load(path.read_text())["table"]["path"]
    job = JobOutput(streamer_process(["run", str(path)]))
    try:
        job.wait_for(lambda: has_read(table_path, "with-schemas.public.accounts", 1400), "two batches committed")
    finally:
        job.proc.send_signal(signal.SIGKILL)
        job.finish()

    code, out = run_streamer(["run", str(path), "--once"])
    assert code == 0, out[-5000:]
    assert "tier" in MorTable.load(table_path).schema().names, "the column added in PostgreSQL is not a column"
    assert_mirrors(table_path, source, hudi_judge)
    ignored = ignored_counts(table_path)
    assert ignored.get("heartbeat", 0) > 0, f"Debezium's heartbeats were read and passed over: {ignored}"
    assert ignored.get("tombstone", 0) == 0, "tombstones of a table partitioned by a key column are deletes"


def test_doctor_reads_the_newest_change_event_against_the_config(mirrored, kafka_bootstrap, capsys):
    _, tmp = mirrored
    healthy = cdc_config(tmp / "doctor", kafka_bootstrap, "with-schemas")
    assert cli.main(["doctor", str(healthy), "--timeout", "5"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "change events" in line]
    assert line.startswith("ok") and "a postgresql change event" in line and "by the log position" in line

    by_visits = cdc_config(tmp / "doctor-visits", kafka_bootstrap, "with-schemas", table={"ordering_field": "visits"})
    cli.main(["doctor", str(by_visits), "--timeout", "5"])
    [line] = [line for line in capsys.readouterr().out.splitlines() if "change events" in line]
    assert line.startswith("warning") and "ordered by 'visits', not by the log position" in line

    unkeyed = cdc_config(tmp / "doctor-keys", kafka_bootstrap, "without-schemas", table={"record_key": ["account"]})
    assert cli.main(["doctor", str(unkeyed), "--timeout", "5"]) == 1
    [line] = [line for line in capsys.readouterr().out.splitlines() if "change events" in line]
    assert line.startswith("problem") and "no field(s) ['account']" in line


# -- Avro through a schema registry -------------------------------------------------------------
def first_row_schema(registry_url: str, subject: str) -> dict:
    """The row of the first value schema registered under `subject`, as Avro: the
    table's reader schema from before ALTER TABLE, so that the added column is followed from the
    registry."""
    with urllib.request.urlopen(f"{registry_url}/subjects/{subject}/versions/1", timeout=10) as answer:
        first = json.loads(json.load(answer)["schema"])
    # `before` defines the row's record; `after` names it
    [row] = [t for f in first["fields"] if f["name"] == "before" for t in f["type"] if t != "null"]
    return row


@pytest.fixture(scope="module")
def one_application(mirrored, kafka_bootstrap, apicurio_registry):
    """Two more tables of the same changes in one `streamer run <directory> --once`: the JSON
    topic without Connect's schemas, every column declared; and the Avro topic, which Debezium's
    connector wrote through Apicurio's Avro converter in Confluent's wire format, its schemas
    read from the registry's Confluent-compatible API."""
    _, tmp = mirrored
    row = first_row_schema(apicurio_registry.url, "avro.public.accounts-value")
    assert "tier" not in [f["name"] for f in row["fields"]], "the first schema is from before ALTER TABLE"
    work = tmp / "one-application"
    work.mkdir()
    (work / "row.avsc").write_text(json.dumps(row))
    declared = "region STRING, id INT, name STRING, balance DOUBLE, visits BIGINT, active BOOLEAN, tier STRING"
    paths = {
        "without-schemas": cdc_config(work, kafka_bootstrap, "without-schemas", declared),
        "python-reader": cdc_config(
            work,
            kafka_bootstrap,
            "without-schemas",
            declared,
            table={"name": "accounts_python_reader", "path": str(work / "tables" / "accounts_python_reader")},
            stream={"checkpoint_location": str(work / "checkpoints" / "accounts_python_reader")},
            source={"options": {"reader": "python"}},
        ),
        "avro": cdc_config(
            work,
            kafka_bootstrap,
            "avro",
            decode={
                "key": {"format": "confluent-avro"},
                "value": {"format": "confluent-avro", "envelope": "debezium", "schema_file": str(work / "row.avsc")},
                "schema_registry": {"url": apicurio_registry.url},
            },
        ),
    }
    code, out = run_streamer(["run", str(work / "configs"), "--once"])
    assert code == 0, out[-5000:]
    return {name: yaml.safe_load(path.read_text())["table"]["path"] for name, path in paths.items()}


def test_the_json_stream_without_schemas_mirrors_the_table_with_the_declared_columns(
    mirrored, one_application, hudi_judge
):
    table_path = one_application["without-schemas"]
    assert_mirrors(table_path, mirrored[0], hudi_judge)
    assert len(list_partitions(MorTable.load(table_path).storage)) == len(REGIONS)


def test_the_python_reader_mirrors_the_table_as_the_native_one_does(mirrored, one_application, hudi_judge):
    """The same stream through the python reader (source option `reader`), in the same run."""
    assert_mirrors(one_application["python-reader"], mirrored[0], hudi_judge)


def test_the_avro_stream_through_a_schema_registry_mirrors_the_table_and_follows_the_added_column(
    mirrored, one_application, hudi_judge
):
    table_path = one_application["avro"]
    assert "tier" in MorTable.load(table_path).schema().names
    assert_mirrors(table_path, mirrored[0], hudi_judge)
