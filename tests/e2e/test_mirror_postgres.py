"""A whole PostgreSQL database mirrored by one config and verified against the source, with real
parts: pgbench's schema and its TPC-B-like workload, a generated schema of 50 tables of every
type the mirror compares, Debezium 3.6.1's connector in Kafka Connect, Apache Kafka, the Hive
Metastore, and Apache Hudi 0.15 reading the tables by name.

The job runs continuously while pgbench and the generated workload run; it is killed once, a
table is created mid-run, and afterwards `streamer verify` finds every table equal, and our
reader, hudi-rs and Apache Hudi read what `SELECT *` reads in PostgreSQL. One forged change
event then makes `verify` name its key and column.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import hudi
import pyarrow as pa
import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from harness.kafka_connect import debezium_mirror_config
from harness.pgbench import initialize_pgbench, start_pgbench
from harness.source_schema import SourceSchema
from streamer.checkpoint import table_checkpoint
from streamer.sandbox.topics import produce
from streamer.verify.lake import LakeRows
from streamer.verify.postgres import PostgresSource
from table.mor_table import MorTable
from tests.support.ingestion import JobOutput, run_streamer, streamer_process

pytestmark = [pytest.mark.e2e, pytest.mark.hudi]

DATABASE = "shop"
PREFIX = "shop"
SLOT = "shop_mirror"
CAPTURE_TIMEOUT = 180
SCHEMA_SEED = 7
#: Tables read through every reader: pgbench's busiest, one of each key kind (int, bigint, text,
#: text and int, smallint and date), and the one created mid-run.
READ_BACK = (
    "pgbench_accounts",
    "pgbench_branches",
    *(t.name for t in SourceSchema(seed=SCHEMA_SEED, tables=5).tables),
    "added_00",
)


@pytest.fixture(scope="module")
def mirror(postgres_server, kafka_connect, hive_metastore, tmp_path_factory):
    """The database, captured by one connector, mirrored by a job that runs through the
    workload, a kill and a table created mid-run; yields the mirror file and the job's output."""
    pg = postgres_server
    pg.sql(f"DROP DATABASE IF EXISTS {DATABASE}; CREATE DATABASE {DATABASE};")
    schema = SourceSchema(seed=SCHEMA_SEED, tables=50)
    pg.sql(schema.ddl(), DATABASE)
    pg.sql(schema.initial_load(max_rows=40), DATABASE)
    initialize_pgbench(pg, DATABASE, scale=1)
    kafka_connect.add_connector(PREFIX, debezium_mirror_config(pg.host, pg.port, DATABASE, SLOT, PREFIX))
    kafka_connect.wait_running(PREFIX)
    work = tmp_path_factory.mktemp("mirror")
    config = work / "shop.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "mirror": {
                    "topic_prefix": PREFIX,
                    "partition_by": ["tenant"],  # the generated tables keyed (tenant, day)
                    "database_url": f"postgresql://postgres@{pg.host}:{pg.port}/{DATABASE}",
                    "replication_slot": SLOT,
                },
                "table": {"path": "lake/{table}"},
                "source": {"bootstrap_servers": kafka_connect.bootstrap},
                "stream": {"trigger_interval": "1 second"},
                "sync": {"metastore_uris": hive_metastore.uri, "database": "shop_lake", "table_name": "{table}"},
            }
        )
    )
    pgbench = start_pgbench(pg, DATABASE, seconds=15, clients=2)
    jobs: list[JobOutput] = []
    try:
        jobs.append(JobOutput(streamer_process(["run", str(config)])))
        jobs[0].wait_for(lambda: _committed(work / "lake" / "pgbench_accounts"), "pgbench_accounts' first commit")
        pg.sql(schema.workload(seed=1, count=300), DATABASE)
        jobs[0].proc.kill()
        jobs[0].finish()
        jobs.append(JobOutput(streamer_process(["run", str(config)])))
        pg.sql(schema.new_table(rows=30), DATABASE)  # CREATE TABLE while the job runs
        pg.sql(schema.workload(seed=2, count=300), DATABASE)
        pgbench.wait(120)
        jobs[1].wait_for(lambda: _committed(work / "lake" / "added_00"), "the table created mid-run")
        _wait_captured(pg)
        yield config, jobs[1], work
    finally:
        pgbench.stop()
        for job in jobs:
            if job.proc.poll() is None:
                job.proc.send_signal(signal.SIGINT)
                job.finish()
        kafka_connect.delete_connector(PREFIX)


def test_a_database_mirrored_through_pgbench_a_kill_and_a_new_table_verifies_equal_through_every_reader(
    mirror, postgres_server, hudi_judge
):
    config, job, work = mirror
    code, out = run_streamer(["verify", str(config)], timeout=600)
    lines = out.splitlines()
    assert code == 0, out[-6000:]
    equal = [line for line in lines if line.endswith(")") and ": equal (" in line]
    assert len(equal) == 54, out[-6000:]  # 50 generated, pgbench's 3 with a key, the new one
    assert any(line.startswith("public.pgbench_history -> ") and "skipped: " in line for line in lines)
    assert "public.pgbench_history: not mirrored: the source table has no primary key" in job.text
    source = PostgresSource(f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{DATABASE}")
    try:
        for name in READ_BACK:
            described = source.table("public", name)
            with source.snapshot() as snap:
                expected = snap.rows(described)
            path = str(work / "lake" / name)
            ours = LakeRows.read(path, described).rows()
            assert ours == expected, f"our reader: {name}"
            batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
            assert LakeRows(pa.Table.from_batches(batches), described).rows() == expected, f"hudi-rs: {name}"
            judged = hudi_judge.table(f"shop_lake.{name}_rt")
            assert LakeRows(judged, described).rows() == expected, f"Apache Hudi 0.15: {name}"
    finally:
        source.close()
    status_code, status = run_streamer(["status", str(config)])
    assert status_code == 0, status[-3000:]
    assert "verified at " in status and ": equal (" in status, status[-3000:]


def test_a_forged_change_event_is_named_by_verify_with_its_key_and_column(mirror):
    config, _, work = mirror
    topic = f"{PREFIX}.public.pgbench_branches"
    bootstrap = yaml.safe_load(config.read_text())["source"]["bootstrap_servers"]
    key, value = _newest_event(bootstrap, topic)
    event = json.loads(value)
    forged_row = {**event["payload"]["after"], "bbalance": 123456789}
    event["payload"].update(op="u", after=forged_row)
    event["payload"]["source"]["lsn"] = event["payload"]["source"]["lsn"] + 10**12
    produce(bootstrap, topic, [(key, json.dumps(event).encode(), None)])
    path = work / "lake" / "pgbench_branches"
    deadline = time.monotonic() + 120
    while not _holds_balance(path, 123456789):
        assert time.monotonic() < deadline, "the forged event was not committed"
        time.sleep(0.5)
    code, out = run_streamer(["verify", str(config), "--table", "public.pgbench_branches"], timeout=300)
    assert code == 1, out
    bid = forged_row["bid"]
    assert f"  different (bid={bid}): bbalance" in out, out
    assert "0 missing, 0 extra, 1 different" in out


def _newest_event(bootstrap: str, topic: str) -> tuple[bytes, bytes]:
    """The last change event of the topic's partition 0 with a value (its key and value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "forger", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, max(low, high - 20))])
        newest = None
        while True:
            message = consumer.poll(5)
            if message is None:
                break
            if message.error() is None and message.value() is not None:
                newest = (message.key(), message.value())
            if message.offset() >= high - 1:
                break
        assert newest is not None, f"no change event in {topic}"
        return newest
    finally:
        consumer.close()


def _committed(path: Path) -> bool:
    return MorTable.exists(str(path)) and table_checkpoint(MorTable.load(str(path))) is not None


def _holds_balance(path: Path, balance: int) -> bool:
    rows = MorTable.load(str(path)).snapshot(columns=["bid", "bbalance"]).to_pylist()
    return any(r["bbalance"] == balance for r in rows)


def _wait_captured(pg) -> None:
    """Until the connector confirmed every change made so far."""
    lsn = pg.value("SELECT pg_current_wal_lsn()")
    deadline = time.monotonic() + CAPTURE_TIMEOUT
    while (
        pg.value(
            f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{SLOT}' AND confirmed_flush_lsn >= '{lsn}'"
        )
        != "1"
    ):
        assert time.monotonic() < deadline, f"the connector did not confirm {lsn} in time"
        time.sleep(0.5)
