"""Many tables in one streaming query: a mirror of Debezium's topics, and a directory of table
configs that read from the same brokers. Real broker, real Spark, `streamer run` in its own
process.
"""

from __future__ import annotations

import random
import signal
import uuid
from pathlib import Path

import pytest
import yaml

from streamer.checkpoint import table_checkpoint
from streamer.cli.doctor import Verdict, diagnose
from streamer.sandbox.debezium_events import Record, SourceTable
from streamer.sandbox.topics import create_topic, produce
from table.mor_table import MorTable
from tests.support.ingestion import (
    JobOutput,
    assert_table_matches,
    order_config,
    produce_orders,
    run_streamer,
    settled_change_events,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e

COLUMNS = [("region", "string"), ("id", "int32"), ("name", "string"), ("balance", "double"), ("visits", "int64")]


class SourceDatabase:
    """Tables whose changes go to Debezium-shaped topics, and the rows the mirror must end with."""

    def __init__(self, bootstrap: str, prefix: str, seed: int = 7):
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.random = random.Random(seed)
        self.lsn = 1000
        self.rows: dict[str, dict[tuple, dict]] = {}

    def create(self, name: str, key: tuple[str, ...] | None = ("region", "id"), partitions: int = 2) -> SourceTable:
        table = SourceTable("public", name, COLUMNS, key)
        create_topic(self.bootstrap, table.topic(self.prefix), partitions=partitions)
        self.rows[name] = {}
        return table

    def changes(self, table: SourceTable, inserts: int, updates: int, deletes: int) -> None:
        """Inserts, then updates and deletes of rows inserted, produced to the table's topic."""
        rows = self.rows[table.name]
        records: list[Record] = []
        for _ in range(inserts):
            row = self._row(len(rows) + 1)
            rows[(row["region"], row["id"])] = row
            records.append(table.insert(row, self._next_lsn()))
        for key in self.random.sample(sorted(rows), min(updates, len(rows))):
            rows[key] = {
                **rows[key],
                "name": f"renamed-{self.random.randrange(10**6)}",
                "visits": rows[key]["visits"] + 1,
            }
            records.append(table.update(rows[key], self._next_lsn()))
        for key in self.random.sample(sorted(rows), min(deletes, len(rows))):
            records.extend(table.delete(rows.pop(key), self._next_lsn()))
        produce(self.bootstrap, table.topic(self.prefix), records)

    def _row(self, row_id: int) -> dict:
        r = self.random
        return {
            "region": r.choice(["emea", "apac", "amer"]),
            "id": row_id,
            "name": f"name-{r.randrange(10**6)}",
            "balance": round(r.uniform(-100, 100), 2),
            "visits": r.randrange(1000),
        }

    def _next_lsn(self) -> int:
        self.lsn += 8
        return self.lsn


def mirrored_rows(path: Path) -> dict[tuple, dict]:
    rows = MorTable.load(str(path)).snapshot(columns=[c for c, _ in COLUMNS]).to_pylist()
    assert len(rows) == len({(r["region"], r["id"]) for r in rows}), f"a key appears twice in {path}"
    return {(r["region"], r["id"]): r for r in rows}


def test_a_mirror_streams_every_table_of_a_connector_in_one_query_and_takes_a_table_created_while_it_runs(
    kafka_bootstrap, tmp_path
):
    prefix = f"shop{uuid.uuid4().hex[:6]}"
    db = SourceDatabase(kafka_bootstrap, prefix)
    accounts = db.create("accounts")
    orders = db.create("orders", partitions=3)
    audit_log = db.create("audit_log")  # excluded below
    history = db.create("history", key=None)  # no primary key: refused by name
    for table in (accounts, orders, audit_log):
        db.changes(table, inserts=60, updates=20, deletes=10)
    produce(kafka_bootstrap, history.topic(prefix), [history.insert(db._row(1), db._next_lsn())])
    mirror = {
        "mirror": {
            "topic_prefix": prefix,
            "exclude": ["public.audit_*"],
            "partition_by": ["region"],
            "tables": {"public.orders": {"index": {"initial_buckets": 3}}},
        },
        "table": {"name": "{schema}_{table}", "path": "lake/{table}"},
        "source": {"bootstrap_servers": kafka_bootstrap},
        "index": {"initial_buckets": 2},
        "stream": {"trigger_interval": "1 second"},
    }
    config = tmp_path / "shop.yaml"
    config.write_text(yaml.safe_dump(mirror))
    lake = tmp_path / "lake"

    job = JobOutput(streamer_process(["run", str(config)]))
    try:
        job.wait_for(lambda: _holds(lake / "accounts", db.rows["accounts"]), "the accounts table")
        job.wait_for(lambda: _holds(lake / "orders", db.rows["orders"]), "the orders table")
        customers = db.create("customers")  # CREATE TABLE while the job runs: a new topic
        db.changes(customers, inserts=30, updates=5, deletes=3)
        db.changes(accounts, inserts=10, updates=10, deletes=5)
        job.wait_for(lambda: _holds(lake / "customers", db.rows["customers"]), "the new customers table")
        job.wait_for(lambda: _holds(lake / "accounts", db.rows["accounts"]), "the accounts table's new changes")
    finally:
        job.proc.send_signal(signal.SIGINT)
        code = job.finish()
    out = job.text
    assert code == 0, out[-5000:]
    assert out.count("one query streaming") == 1, out[-5000:]
    assert not (lake / "audit_log").exists()
    assert not (lake / "history").exists()
    assert "public.history: not mirrored: the source table has no primary key" in out, out[-5000:]
    assert "message.key.columns" in out
    for name in ("accounts", "orders", "customers"):
        table = MorTable.load(str(lake / name))
        assert table.config.name == f"public_{name}"
        assert table.config.record_key_fields == ("region", "id")
        assert table.config.partition_fields == ("region",)
        checkpoint = table_checkpoint(table)
        assert checkpoint is not None and list(checkpoint.offsets) == [f"{prefix}.public.{name}"]


def _holds(path: Path, rows: dict[tuple, dict]) -> bool:
    return (
        MorTable.exists(str(path))
        and table_checkpoint(MorTable.load(str(path))) is not None
        and mirrored_rows(path) == rows
    )


def test_tables_of_one_broker_share_a_query_each_exactly_once_on_its_own_through_a_kill_and_a_failing_table(
    kafka_bootstrap, kafka_topic, tmp_path
):
    """A directory of three table configs: a kill between two tables' commits of one batch, then
    a table whose bad record stops it alone, then that table catching up from its own offsets."""
    configs = tmp_path / "configs"
    topics = [kafka_topic(partitions=2, prefix=f"orders-{n}") for n in range(3)]
    events = {topic: settled_change_events(300, seed=n) for n, topic in enumerate(topics)}
    for topic, batch in events.items():
        produce_orders(kafka_bootstrap, topic, batch)
    paths = []
    for n, topic in enumerate(topics):
        config = order_config(tmp_path, f"orders_{n}", kafka_bootstrap, topic, decode={"on_error": "fail"})
        write_config(configs, config)
        paths.append(config["table"]["path"])

    code, out = run_streamer(["run", str(configs), "--once"], env={"MOR_STREAMER_FAILPOINT": "sink.batch_committed:1"})
    assert code == -signal.SIGKILL, out[-5000:]
    committed = [p for p in paths if MorTable.exists(p) and table_checkpoint(MorTable.load(p)) is not None]
    assert 1 <= len(committed) < len(paths), "the kill came between the tables' commits of one batch"

    produce(kafka_bootstrap, topics[2], [(b"bad", b'{"order_id": "x", "amount": "lots"', None)])
    code, out = run_streamer(["run", str(configs), "--once"])
    assert code == 1, out[-5000:]
    assert out.count("one query streaming") == 1, out[-5000:]
    assert_table_matches(paths[0], events[topics[0]])
    assert_table_matches(paths[1], events[topics[1]])
    failed = [line for line in out.splitlines() if line.startswith("orders_2:")]
    assert failed and "FAILED" in failed[0] and "could not be decoded" in failed[0], out[-5000:]
    assert not any("FAILED" in line for line in out.splitlines() if line.startswith(("orders_0:", "orders_1:")))

    skipping = order_config(tmp_path, "orders_2", kafka_bootstrap, topics[2], decode={"on_error": "skip"})
    write_config(configs, skipping)
    code, out = run_streamer(["run", str(configs), "--once"])
    assert code == 0, out[-5000:]
    assert_table_matches(paths[2], events[topics[2]])
    assert "orders_2: 1 batches, " in out, out[-5000:]
    assert "orders_0: 0 batches, " in out, out[-5000:]


def test_doctor_checks_the_table_each_topic_of_a_mirror_makes_and_names_the_ones_it_cannot(kafka_bootstrap, tmp_path):
    prefix = f"doc{uuid.uuid4().hex[:6]}"
    db = SourceDatabase(kafka_bootstrap, prefix)
    for name in ("accounts", "orders"):
        db.changes(db.create(name), inserts=3, updates=0, deletes=0)
    history = db.create("history", key=None)
    produce(kafka_bootstrap, history.topic(prefix), [history.insert(db._row(1), db._next_lsn())])
    mirror = {
        "mirror": {"topic_prefix": prefix, "tables": {"public.orders": {"table": {"partition_by": ["nowhere"]}}}},
        "source": {"bootstrap_servers": kafka_bootstrap},
    }
    config = tmp_path / "shop.yaml"
    config.write_text(yaml.safe_dump(mirror))
    report = diagnose(config, timeout=10)
    by_table = {c.table: c for c in report.checks if c.subject == "mirror shop"}
    assert by_table["public.history"].verdict is Verdict.WARNING
    assert "no primary key" in by_table["public.history"].found
    problem = next(c for c in report.checks if c.table == "public_orders")
    assert problem.verdict is Verdict.PROBLEM and "nowhere" in problem.found
    assert "1 of 3 topic(s) make valid tables: public.accounts" in by_table[""].found
    assert report.exit_code == 1
