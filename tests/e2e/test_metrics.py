"""What a running job shows: a real Prometheus scrapes its /metrics, /health tells an idle job
from a stuck one, and the bound on log files per file group holds while the stream outruns an
async compaction."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.prometheus import PrometheusServer
from streamer import app
from streamer.config.loading import config_from_mapping
from streamer.config.model import JobConfig
from streamer.sandbox.change_events import change_events
from table.failpoints import PAUSE_ENV_VAR
from table.file_group.layout_stats import after_each_deltacommit
from table.mor_table import MorTable
from table.plans.pending import pending_compactions
from tests.support.dashboard import ALERTS, alert_names, dashboard_metric_names
from tests.support.ingestion import assert_table_matches, has_read, order_config, produce_orders, settled_change_events
from tests.support.kafka_broker import free_port

pytestmark = pytest.mark.e2e


@contextmanager
def running(spark, config: JobConfig):
    """The job of `config`, streaming until the block ends."""
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(app.run([config], spark)), daemon=True)
    runner.start()
    try:
        yield outcome
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(timeout=120)


def wait_until(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.3)


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
    except OSError:  # not listening yet
        return 0, {}


def table_state(port: int, table: str = "orders") -> tuple[int, str | None]:
    status, body = health(port)
    return status, body.get("tables", {}).get(table, {}).get("state")


def scraped(port: int) -> dict[str, float]:
    """The job's /metrics as Prometheus reads it: sample name with labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        f"{s.name}{json.dumps(s.labels, sort_keys=True)}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(prometheus: PrometheusServer, expression: str) -> float | None:
    result = prometheus.query(expression)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_reads_what_the_job_did_and_health_tells_idle_from_stuck(
    spark, kafka_bootstrap, kafka_topic, tmp_path, monkeypatch
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(2_000, seed=3)
    produce_orders(kafka_bootstrap, topic, events)
    port = free_port()
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 500},
            stream={"trigger_interval": "500 milliseconds"},
            services={"compaction": {"mode": "inline", "every_delta_commits": 2, "max_log_files_per_group": 50}},
            metrics={"port": port, "host": "127.0.0.1", "stuck_after_triggers": 3},
        )
    )
    path = config.table.path

    with (
        running(spark, config),
        PrometheusServer([f"127.0.0.1:{port}"], tmp_path / "prometheus", rule_files=[ALERTS]) as prometheus,
    ):
        wait_until(lambda: has_read(path, topic, len(events)), "commit of every record")
        assert wait_until(lambda: table_state(port) == (200, "idle"), "idle health")

        records = 'mor_streamer_records_read_total{table="orders"}'
        assert wait_until(lambda: value(prometheus, records) == len(events), "the scrape of every record read")
        batches = value(prometheus, 'mor_streamer_batches_total{table="orders"}')
        assert batches >= 4  # 500 records a trigger
        assert value(prometheus, 'mor_streamer_batch_duration_seconds_count{table="orders"}') == batches
        assert value(prometheus, 'mor_streamer_records_bad_total{table="orders"}') == 0
        # The lag is asked of Kafka when the endpoint is read: a scrape after the health check shows none.
        lag = 'sum(mor_streamer_kafka_lag_records{table="orders"})'
        assert wait_until(lambda: value(prometheus, lag) == 0, "the scrape of no lag", timeout=15)
        assert value(prometheus, 'mor_streamer_service_runs_total{table="orders",service="compaction"}') >= 1
        assert value(prometheus, 'mor_streamer_service_failures_total{table="orders",service="compaction"}') == 0
        assert value(prometheus, 'count(mor_streamer_buckets{table="orders"} == 2)') == len(
            {e["region"] for e in events}
        )
        assert value(prometheus, 'mor_streamer_freshness_seconds{table="orders"}') > 0
        assert value(prometheus, 'mor_streamer_batch_phase_seconds_total{table="orders",phase="write"}') > 0
        # the catalog panels' metrics: only tables with a sync: section export them (tests/e2e/test_catalog_job.py);
        # the verify panel's, tables `streamer verify` compared (tests/streamer/test_metrics.py)
        absent = {
            n for n in dashboard_metric_names() if n.startswith(("mor_streamer_catalog_", "mor_streamer_verify_"))
        }
        assert dashboard_metric_names() - absent <= set(prometheus.metric_names())
        assert wait_until(
            lambda: (
                {r["name"]: r["health"] for r in prometheus.rules()}.keys() == alert_names()
                and all(r["health"] == "ok" for r in prometheus.rules())
            ),
            "the alerts evaluated",
        )

        # Records arrive, and the batch that takes them cannot complete its commit for a while.
        monkeypatch.setenv(PAUSE_ENV_VAR, "deltacommit.files_written=16")
        produce_orders(kafka_bootstrap, topic, change_events(300, seed=4))
        status, body = wait_until(
            lambda: (h := health(port))[1]["tables"]["orders"]["state"] == "stuck" and h, "stuck health", timeout=16
        )
        assert status == 503 and body["tables"]["orders"]["lag"] > 0, body
        # The pause stays asked for until a scrape has seen the state: health may say stuck before
        # the batch reaches the paused step, and a batch that no longer pauses commits at once.
        stuck = 'mor_streamer_table_state{table="orders",state="stuck"}'
        assert wait_until(
            lambda: value(prometheus, f"max_over_time({stuck}[2m])") == 1, "the stuck state scraped", timeout=30
        )
        monkeypatch.delenv(PAUSE_ENV_VAR)
        assert wait_until(lambda: table_state(port) == (200, "idle"), "idle again once the commit is made")


def test_the_bound_on_log_files_per_file_group_holds_while_the_stream_outruns_async_compaction(
    spark, kafka_bootstrap, kafka_topic, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv(PAUSE_ENV_VAR, "compaction.files_written=3")
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(4_800, seed=7)
    produce_orders(kafka_bootstrap, topic, events)
    port = free_port()
    bound = 3
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 400},
            stream={"trigger_interval": "200 milliseconds"},
            services={
                "compaction": {"mode": "async", "every_delta_commits": 2, "max_log_files_per_group": bound},
                "clean": {"mode": "off"},
                "archive": {"mode": "off"},
            },
            metrics={"port": port, "host": "127.0.0.1"},
        )
    )
    path = config.table.path

    with running(spark, config):
        wait_until(
            lambda: has_read(path, topic, len(events)) and not pending_compactions(MorTable.load(path)),
            "every record committed and compacted",
            timeout=240,
        )
        shown = scraped(port)

    held = shown['mor_streamer_backpressure_total{"table": "orders"}']
    assert held >= 1 and shown['mor_streamer_backpressure_seconds_total{"table": "orders"}'] > 0
    assert "the next batch waits for compaction" in caplog.text
    read = after_each_deltacommit(MorTable.load(path))
    assert len(read) >= 12
    assert max(layout.log_files() for _, layout in read) <= bound
    assert_table_matches(path, events)
