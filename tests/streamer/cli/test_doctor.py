"""`streamer doctor` against real parts, each broken on purpose: a broker down (a port nothing
listens on), a topic missing and records deleted past the table's offsets (the session's Apache
Kafka), a read-only table disk (a tmpfs remounted read-only: root ignores file modes), a new
table's directory under a regular file, the writer lease held by a live process and then left by
a killed one, a pending compaction, a schema registry that stopped, quarantined records.

Tables are written by the table engine alone (no Spark). Each test reads the one line of the
check it broke: its verdict, what was found and the fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from streamer.cli import main as cli
from streamer.quarantine import SCHEMA as QUARANTINE_SCHEMA
from streamer.quarantine import QuarantineTable
from streamer.sandbox.change_events import change_events
from table.services.compaction import CompactionStrategy, schedule_compaction
from table.write.writer import WriteOptions
from tests.support import kafka_broker
from tests.support.ingestion import REPO, committed_table, order_config, produce_orders, run_streamer, write_config

LINE = re.compile(r"^(?P<verdict>ok|warning|problem) +orders +(?P<subject>[a-z ]+?)  +(?P<text>.*)$")
LEASE_HOLDER = """
import sys, time
from table.storage.lease import WriterLease
from table.storage.file_io import Storage
WriterLease(Storage(sys.argv[1]), "a writer of the test").acquire()
print("held", flush=True)
time.sleep(300)
"""


def doctor(configs: Path, capsys, timeout: float = 0.5) -> tuple[int, dict[str, tuple[str, str]]]:
    """The exit code, and each table check's (verdict, text) by subject."""
    code = cli.main(["doctor", str(configs), "--timeout", str(timeout)])
    out = capsys.readouterr().out
    checks = {m["subject"]: (m["verdict"], m["text"]) for line in out.splitlines() if (m := LINE.match(line))}
    return code, checks


def dead_broker() -> str:
    return f"127.0.0.1:{kafka_broker.free_port()}"  # nothing listens there


def configs_of(tmp_path: Path, bootstrap: str, topic: str = "orders", **overrides) -> Path:
    return write_config(tmp_path / "configs", order_config(tmp_path, "orders", bootstrap, topic, **overrides)).parent


@pytest.mark.unit
def test_with_the_broker_down_doctor_names_it_in_a_short_output_within_seconds(tmp_path):
    bootstrap = dead_broker()
    committed_table(tmp_path / "tables" / "orders", change_events(200, seed=11), {"orders": {0: 200}})

    started = time.monotonic()
    code, out = run_streamer(["doctor", str(configs_of(tmp_path, bootstrap)), "--timeout", "2"], timeout=60)
    seconds = time.monotonic() - started

    assert code == 1, out
    assert seconds < 10 and len(out.splitlines()) < 30, (seconds, out)
    assert "Traceback" not in out and "rdkafka#" not in out, out  # no log line of librdkafka itself
    (brokers,) = [line for line in out.splitlines() if " brokers " in line]
    assert brokers.startswith("problem") and f"{bootstrap} unreachable (" in brokers and "Connection refused" in brokers
    assert "fix: start the brokers, or correct source.bootstrap_servers" in brokers
    assert re.search(r"^ok +orders +storage ", out, re.MULTILINE), out  # the table is checked all the same
    assert out.splitlines()[-1].startswith("1 problem(s), ")


@pytest.mark.unit
def test_an_invalid_config_is_a_problem_naming_the_key(tmp_path, capsys):
    mapping = order_config(tmp_path, "orders", dead_broker(), "orders")
    del mapping["table"]["record_key"]
    configs = write_config(tmp_path / "configs", mapping).parent

    code = cli.main(["doctor", str(configs)])

    out = capsys.readouterr().out
    assert code == 1
    assert re.search(
        r"^problem +config +.*orders\.yaml: table\.record_key: .*; fix: correct the config$", out, re.MULTILINE
    ), out


@pytest.mark.e2e
def test_a_healthy_table_passes_every_check(kafka_bootstrap, kafka_topic, tmp_path, capsys):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(400, seed=12)
    produce_orders(kafka_bootstrap, topic, events)
    committed_table(tmp_path / "tables" / "orders", [], {topic: {0: 0, 1: 0}})

    code, checks = doctor(configs_of(tmp_path, kafka_bootstrap, topic), capsys, timeout=10)

    assert code == 0, checks
    assert {subject: verdict for subject, (verdict, _) in checks.items()} == dict.fromkeys(
        (
            "brokers",
            "topics",
            "partitions",
            "offsets held",
            "storage",
            "writer lease",
            "pending",
            "timeline",
            "compaction",
            "keys",
        ),
        "ok",
    )
    assert checks["topics"][1] == f"{topic} (2 partitions)"
    assert checks["offsets held"][1] == "yes; the table is 400 records behind"


@pytest.mark.e2e
def test_a_missing_topic_is_a_problem_with_the_command_that_creates_it(kafka_bootstrap, unique_topic, tmp_path, capsys):
    topic = unique_topic("orders")  # never created

    code, checks = doctor(configs_of(tmp_path, kafka_bootstrap, topic), capsys, timeout=10)

    assert code == 1
    verdict, text = checks["topics"]
    assert verdict == "problem" and text.startswith(
        f"{topic} not on {kafka_bootstrap}; fix: create it (kafka-topics.sh --create --topic {topic})"
    )


@pytest.mark.e2e
def test_records_deleted_past_the_tables_offsets_are_a_problem_naming_how_many(
    kafka_bootstrap, kafka_topic, tmp_path, capsys
):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = kafka_topic(partitions=1, prefix="orders")
    produce_orders(kafka_bootstrap, topic, change_events(500, seed=13))
    committed_table(tmp_path / "tables" / "orders", [], {topic: {0: 100}})
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 300)]).values()  # as retention does
    deleted.result(30)

    code, checks = doctor(configs_of(tmp_path, kafka_bootstrap, topic), capsys, timeout=10)

    assert code == 1
    verdict, text = checks["offsets held"]
    assert verdict == "problem"
    assert text == (
        f"{topic}[0] goes on from 100 but the broker holds 300 to 499 (200 records deleted by "
        "retention); fix: to accept the loss, set source.fail_on_data_loss: false and restart"
    )


@pytest.mark.unit
def test_a_read_only_table_disk_is_a_problem(table_disk, tmp_path, capsys):
    path = table_disk / "orders"
    committed_table(path, change_events(100, seed=14), {"orders": {0: 100}})
    configs = write_config(
        tmp_path / "configs", order_config(tmp_path, "orders", dead_broker(), "orders", table={"path": str(path)})
    )
    subprocess.run(["mount", "-o", "remount,ro", str(table_disk)], check=True)

    code, checks = doctor(configs, capsys)

    assert code == 1
    verdict, text = checks["storage"]
    assert verdict == "problem" and text.startswith(f"{path} is readable but not writable: ")
    assert "Read-only file system" in text and "fix: make it writable" in text
    assert checks["timeline"][0] == "ok"  # what can be read still is


@pytest.mark.unit
def test_a_new_table_under_a_regular_file_is_a_problem(tmp_path, capsys):
    (tmp_path / "data").write_text("not a directory")
    path = tmp_path / "data" / "tables" / "orders"
    configs = configs_of(tmp_path, dead_broker(), table={"path": str(path)})

    code, checks = doctor(configs, capsys)

    assert code == 1
    assert checks["storage"] == (
        "problem",
        f"no table yet, and none can be created at {path}: {tmp_path / 'data'} "
        "is not a directory; fix: make it writable (free space, a read-write "
        "mount, this user's permissions), or correct table.path",
    )


@pytest.mark.unit
def test_the_writer_lease_held_by_a_live_process_names_it_and_once_killed_is_stale(tmp_path, capsys):
    path = tmp_path / "tables" / "orders"
    committed_table(path, change_events(100, seed=15), {"orders": {0: 100}})
    configs = configs_of(tmp_path, dead_broker())
    holder = subprocess.Popen(
        [sys.executable, "-c", LEASE_HOLDER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline() == "held\n"

        _, checks = doctor(configs, capsys)

        verdict, text = checks["writer lease"]
        assert verdict == "warning" and text.startswith("held by a live writer: a writer of the test (host ")
        assert (
            f"pid {holder.pid}), renewed " in text
            and f"fix: nothing if that is the job; else stop it (kill {holder.pid} on " in text
        )
    finally:
        holder.kill()
        holder.wait()

    _, checks = doctor(configs, capsys)

    verdict, text = checks["writer lease"]
    assert verdict == "warning"
    assert text.startswith("stale: held by a writer of the test (host ") and text.endswith(
        f"pid {holder.pid}), a process that is gone; the next start takes it over at once"
    )


@pytest.mark.unit
def test_a_pending_compaction_says_what_the_next_start_does_with_it(tmp_path, capsys):
    path = tmp_path / "tables" / "orders"
    events = change_events(300, seed=16)
    committed_table(path, events[:200], {"orders": {0: 200}})
    table = committed_table(path, events[200:], {"orders": {0: 300}})  # log files to compact
    with table.writer(WriteOptions(initial_buckets=2)) as writer:
        instant = schedule_compaction(writer, CompactionStrategy())
    assert instant is not None

    _, inline = doctor(configs_of(tmp_path, dead_broker()), capsys)
    _, off = doctor(configs_of(tmp_path, dead_broker(), services={"compaction": {"mode": "off"}}), capsys)

    assert inline["pending"] == ("warning", f"1: {instant} compaction requested: executed at the next start")
    assert off["pending"] == (
        "warning",
        f"1: {instant} compaction requested: left for `streamer compact {path}` (the service is off)",
    )
    assert inline["compaction"][0] == "ok" and inline["compaction"][1].startswith("at most 1 log files per file group")


@pytest.mark.unit
def test_a_schema_registry_that_does_not_answer_is_a_problem(tmp_path, capsys, schema_registry_url):
    def avro_through(url: str) -> Path:
        decode = {"value": {"format": "confluent-avro"}, "schema_registry": {"url": url}}
        return configs_of(tmp_path, dead_broker(), decode=decode)

    stopped = f"http://{dead_broker()}"
    _, up = doctor(avro_through(schema_registry_url), capsys)
    code, down = doctor(avro_through(stopped), capsys)

    verdict, text = up["schema registry"]
    assert verdict == "ok" and re.fullmatch(rf"{re.escape(schema_registry_url)} answered \(\d+ subjects\)", text)
    verdict, text = down["schema registry"]
    assert code == 1 and verdict == "problem"
    assert text.startswith(f"schema registry {stopped}: GET /subjects failed: ") and "refused" in text
    assert text.endswith("fix: start the registry, or correct decode.schema_registry")


@pytest.mark.unit
def test_quarantined_records_are_counted_and_the_newest_shown(tmp_path, capsys):
    committed_table(tmp_path / "tables" / "orders", change_events(50, seed=17), {"orders": {0: 60}})
    quarantine = QuarantineTable(str(tmp_path / "tables" / "orders_quarantine"), "orders").table
    rows = [
        {
            "record_id": f"0-{o}",
            "topic": "orders",
            "partition": 0,
            "offset": o,
            "timestamp": None,
            "key": None,
            "value": b"{",
            "reason": f"malformed JSON at offset {o}",
            "query_id": "q",
            "batch_id": 0,
        }
        for o in (50, 51, 57)
    ]
    with quarantine.writer(WriteOptions(initial_buckets=1)) as writer:
        writer.upsert(pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA))
    configs = configs_of(tmp_path, dead_broker(), decode={"on_error": "quarantine"})

    cli.main(["doctor", str(configs), "--timeout", "0.5"])

    lines = capsys.readouterr().out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if LINE.match(line) and LINE.match(line)["subject"] == "quarantine"]
    assert lines[at].startswith("warning") and f"3 records at {tmp_path}/tables/orders_quarantine; fix: " in lines[at]
    assert [line.strip() for line in lines[at + 1 : at + 4]] == [
        f"orders[0]@{o}: malformed JSON at offset {o}" for o in (57, 51, 50)
    ]


@pytest.mark.unit
def test_a_kafka_connector_in_sparks_ivy_cache_is_found_without_asking_a_repository(tmp_path, monkeypatch, capsys):
    import pyspark

    from streamer.kafka import connector as kafka_connector

    version = kafka_connector.connector_version(pyspark.__version__, kafka_connector.published_versions())
    jars = tmp_path / "home" / ".ivy2.5.2" / "jars"  # where Spark's Ivy retrieves `spark.jars.packages`
    jars.mkdir(parents=True)
    (jars / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{version}.jar").write_bytes(b"")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    configs = configs_of(tmp_path, dead_broker(), source={"format": "kafka"})

    cli.main(["doctor", str(configs), "--timeout", "0.5"])

    out = capsys.readouterr().out
    assert re.search(
        rf"^ok +kafka connector +{kafka_connector.ARTIFACT}:{version} cached at {jars}/", out, re.MULTILINE
    ), out


@pytest.mark.unit
def test_keys_stored_in_two_partitions_are_counted_and_shown(tmp_path, capsys):
    path = tmp_path / "tables" / "orders"
    live = (
        committed_table(path, change_events(200, seed=18), {"orders": {0: 200}})
        .snapshot(columns=["order_id", "customer", "region", "amount", "status", "note", "updated_at"])
        .to_pylist()
    )
    moved = [dict(row, region="moved", updated_at=row["updated_at"] + 1, deleted=False) for row in live[:3]]
    committed_table(path, moved, {"orders": {0: 203}})  # the same order ids, now in region=moved
    keyed_by_both = configs_of(
        tmp_path / "both", dead_broker(), table={"path": str(path), "record_key": ["order_id", "region"]}
    )

    _, checks = doctor(configs_of(tmp_path, dead_broker()), capsys)
    _, both = doctor(keyed_by_both, capsys)

    verdict, text = checks["keys"]
    assert verdict == "warning"
    assert text.startswith(
        f"3 of {len(live)} keys are in two or more partitions: a key is unique within its "
        "partition, and region changed for these (read the keys of "
    )
    assert "fix: partition by fields that never change for a key, or add them to table.record_key" in text
    assert both["keys"] == ("ok", "the partition fields are part of the record key: a key is in one partition")


@pytest.mark.unit
def test_folders_and_files_named_like_our_packages_where_the_job_runs_are_a_warning(tmp_path, monkeypatch, capsys):
    configs = configs_of(tmp_path, dead_broker())
    (configs / "table").mkdir()  # a table of the user's beside the config
    work = tmp_path / "work"
    (work / "streamer").mkdir(parents=True)
    (work / "bench.py").write_text("")
    monkeypatch.chdir(work)

    cli.main(["doctor", str(configs), "--timeout", "0.5"])

    (line,) = [line for line in capsys.readouterr().out.splitlines() if "working directory" in line]
    assert line.startswith("warning")
    assert f"{work / 'streamer'}, {work / 'bench.py'}, {configs / 'table'}: named like mor-streamer's packages" in line
    assert "fix: run the `streamer` command or spark-submit there, or rename them" in line


@pytest.mark.unit
def test_a_working_directory_without_such_names_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    cli.main(["doctor", str(configs_of(tmp_path, dead_broker())), "--timeout", "0.5"])

    (line,) = [line for line in capsys.readouterr().out.splitlines() if "working directory" in line]
    assert line.startswith("ok") and "nothing named like mor-streamer's packages" in line
