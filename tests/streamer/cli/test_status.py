"""`streamer status` as an operator runs it in an incident: the table's own state is shown whatever
else is down, the Kafka-dependent lag is marked unknown after a short timeout (naming the brokers
and why), and the exit code tells which it was. The tables are written by the table engine (no
Spark); the broker is the session's Apache Kafka, or a port nothing listens on."""

from __future__ import annotations

import json
import time

import pytest

from streamer.cli import main as cli
from streamer.last_error import record_error
from streamer.sandbox.change_events import change_events
from tests.support import kafka_broker
from tests.support.ingestion import committed_table, order_config, produce_orders, run_streamer, write_config


@pytest.mark.unit
def test_with_the_broker_down_status_shows_the_table_and_marks_the_lag_unknown_within_the_timeout(tmp_path):
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"  # nothing listens there
    committed_table(tmp_path / "tables" / "orders", change_events(300, seed=5), {"orders": {0: 180, 1: 120}})
    configs = write_config(tmp_path / "configs", order_config(tmp_path, "orders", bootstrap, "orders")).parent

    started = time.monotonic()
    code, out = run_streamer(["status", str(configs), "--kafka-timeout", "2"], timeout=60)
    seconds = time.monotonic() - started

    assert code == 4, out  # could not reach Kafka
    assert seconds < 10 and len(out.splitlines()) < 30, (seconds, out)
    assert "Traceback" not in out and "rdkafka#" not in out, out
    lines = out.splitlines()
    assert lines[0].startswith("orders: last commit ") and lines[0].endswith(" ago)")
    assert "  offsets  orders 0:180 1:120" in lines
    (lag,) = [line for line in lines if line.startswith("  lag ")]
    assert lag.startswith(f"  lag      unknown: {bootstrap} unreachable (") and "Connection refused" in lag


@pytest.mark.unit
def test_status_json_has_the_same_fields_with_the_lag_null_and_why(tmp_path, capsys):
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"
    table = committed_table(tmp_path / "tables" / "orders", change_events(100, seed=6), {"orders": {0: 100}})
    configs = write_config(tmp_path / "configs", order_config(tmp_path, "orders", bootstrap, "orders")).parent

    code = cli.main(["status", str(configs), "--json", "--kafka-timeout", "1"])

    (status,) = json.loads(capsys.readouterr().out)
    assert code == 4
    assert status["last_commit"] == table.timeline().last_completed_write().timestamp
    assert status["last_commit_time"].endswith("Z") and 0 <= status["last_commit_age_seconds"] < 60
    assert status["offsets"] == {"orders": {"0": 100}}
    assert status["lag"] is None and status["lag_unknown"].startswith(f"{bootstrap} unreachable (")
    assert status["pending"] == [] and status["last_error"] is None and status["problem"] is None


@pytest.mark.unit
def test_a_job_error_after_the_last_commit_is_a_table_problem_and_wins_over_an_unreachable_broker(tmp_path, capsys):
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"
    committed_table(tmp_path / "tables" / "orders", change_events(100, seed=7), {"orders": {0: 100}})
    configs = write_config(tmp_path / "configs", order_config(tmp_path, "orders", bootstrap, "orders")).parent
    time.sleep(1)  # errors are recorded to the second
    record_error(str(tmp_path / "tables" / "orders"), "BadRecordError: orders[0]@100: not JSON\nmore detail")

    code = cli.main(["status", str(configs), "--kafka-timeout", "1"])

    out = capsys.readouterr().out
    assert code == 3, out
    assert ": BadRecordError: orders[0]@100: not JSON\n" in out and "more detail" not in out
    assert "  problem  the job stopped with the last error, and nothing was committed since" in out


@pytest.mark.e2e
def test_with_the_broker_up_status_shows_the_lag_and_exits_zero(kafka_bootstrap, kafka_topic, tmp_path, capsys):
    topic = kafka_topic(partitions=1, prefix="orders")
    events = change_events(500, seed=8)
    produce_orders(kafka_bootstrap, topic, events)
    committed_table(tmp_path / "tables" / "orders", events[:350], {topic: {0: 350}})
    configs = write_config(tmp_path / "configs", order_config(tmp_path, "orders", kafka_bootstrap, topic)).parent

    code = cli.main(["status", str(configs)])

    out = capsys.readouterr().out
    assert code == 0, out
    assert f"  lag      {topic} 150 behind" in out.splitlines()
