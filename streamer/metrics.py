"""What a running job shows to Prometheus and to a health check.

One `Metrics` per application holds every metric family in a registry of its own; each table
gets a `TableMetrics`, whose children carry the table's name as the `table` label. The sink and
the table services report to it as they go, from what they know already: the batch's report,
the layout the writer's routing listed (`table.file_group.layout_stats`), the services' timeline. Kafka's
lag is the one value asked for at scrape time, so that a job whose batches stopped still shows
it growing. `MetricsServer` serves `/metrics` (Prometheus' text format) and `/health` (JSON).

docs/operations.md says what each metric means and which alerts are worth setting.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from streamer.decode.debezium import SKIP_KINDS

if TYPE_CHECKING:
    from streamer.sink import BatchReport

log = logging.getLogger(__name__)

PREFIX = "mor_streamer_"
SERVICES = ("clustering", "compaction", "clean", "archive")
STATES = ("starting", "streaming", "idle", "stuck", "failed")
HEALTHY = ("starting", "streaming", "idle")
#: Kafka's lag is asked for at most this often, however often the endpoints are read.
LAG_REFRESH_SECONDS = 2.0
#: How often a scrape reads the verdict `streamer verify` keeps with the table.
VERDICT_REFRESH_SECONDS = 30.0
SECONDS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


class Metrics:
    """Every metric family of the application, in its own registry."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.tables: dict[str, TableMetrics] = {}
        r, t = self.registry, ("table",)

        def counter(name: str, doc: str, labels=t) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels=t) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=r)

        self.records_read = counter("records_read", "Kafka records the table's batches read.")
        self.records_written = counter("records_written", "Rows upserted (the commits' write stats).")
        self.records_deleted = counter("records_deleted", "Keys deleted (the commits' write stats).")
        self.records_bad = counter("records_bad", "Records that could not be decoded (skipped or quarantined).")
        self.records_ignored = counter(
            "records_ignored",
            "Records that write nothing, by kind: tombstones "
            "skipped, Debezium's truncates, heartbeats, schema changes...",
            ("table", "kind"),
        )
        self.batches = counter("batches", "Micro-batches committed.")
        self.commit_conflicts = counter(
            "commit_conflicts",
            "Micro-batch writes refused for another writer's commit in the same file groups, then written again "
            "(table.concurrency: optimistic_concurrency_control).",
        )
        self.batch_seconds = Histogram(
            PREFIX + "batch_duration_seconds",
            "A micro-batch from its start to its services' end.",
            t,
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.phase_seconds = counter(
            "batch_phase_seconds",
            "Seconds spent in each phase of the batches (task-seconds for fetch, decode, route and write).",
            ("table", "phase"),
        )
        self.lag = gauge(
            "kafka_lag_records",
            "Records between the table's offsets and the partition's end.",
            ("table", "topic", "partition"),
        )
        self.newest_record = gauge(
            "newest_committed_record_timestamp_seconds",
            "The Kafka timestamp of the newest record committed to the table.",
        )
        self.freshness = gauge("freshness_seconds", "Now less the Kafka timestamp of the newest committed record.")
        self.commit_latency = Histogram(
            PREFIX + "commit_latency_seconds",
            "From the Kafka timestamp of a batch's oldest record to the commit that made it visible.",
            t,
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.last_commit = gauge("last_commit_timestamp_seconds", "When the table's last deltacommit completed.")
        self.last_commit_age = gauge("last_commit_age_seconds", "Seconds since the table's last deltacommit.")
        self.log_files_max = gauge(
            "log_files_per_file_group_max", "The most log files a snapshot read merges in one file group."
        )
        self.log_files_p95 = gauge("log_files_per_file_group_p95", "Log files per file group, 95th percentile.")
        self.log_bytes_max = gauge("log_bytes_per_file_group_max", "The most bytes of log files in one file group.")
        self.log_bytes_p95 = gauge(
            "log_bytes_per_file_group_p95", "Bytes of log files per file group, 95th percentile."
        )
        self.log_files_bound = gauge(
            "log_files_per_file_group_bound", "services.compaction.max_log_files_per_group (absent when unbounded)."
        )
        self.pending_compactions = gauge("pending_compactions", "Compaction plans not completed yet.")
        self.pending_resizes = gauge("pending_resizes", "Clustering (bucket resize) plans not completed yet.")
        self.buckets = gauge("buckets", "Buckets (file groups) of a partition.", ("table", "partition"))
        self.bucket_skew = gauge(
            "bucket_skew", "A partition's largest bucket's bytes over its median bucket's.", ("table", "partition")
        )
        self.service_runs = counter("service_runs", "Service executions, failed ones included.", ("table", "service"))
        self.service_failures = counter("service_failures", "Service executions that failed.", ("table", "service"))
        self.service_seconds = Histogram(
            PREFIX + "service_duration_seconds",
            "Duration of service executions.",
            ("table", "service"),
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.backpressure = counter(
            "backpressure",
            "Times the stream was held until compaction brought the log files per file group under the bound.",
        )
        self.backpressure_seconds = counter("backpressure_seconds", "Seconds the stream was held by the bound.")
        self.catalog_behind = gauge(
            "catalog_commits_behind",
            "Completed writes of the table the metastore's registration (last_commit_time_sync) does not reach yet.",
        )
        self.catalog_syncs = counter("catalog_syncs", "Catalog syncs, failed ones included.")
        self.catalog_failures = counter(
            "catalog_sync_failures", "Catalog syncs that failed (retried at the next commit)."
        )
        self.catalog_seconds = Histogram(
            PREFIX + "catalog_sync_duration_seconds",
            "Duration of catalog syncs.",
            t,
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.triggers_without_commit = gauge(
            "triggers_without_commit", "Trigger intervals records have waited in Kafka without a commit."
        )
        self.verify_differing_rows = gauge(
            "verify_differing_rows",
            "Rows `streamer verify` last found missing, extra or different in the table (absent before a verify).",
        )
        self.verify_timestamp = gauge("verify_timestamp_seconds", "When `streamer verify` last compared the table.")
        self.state = gauge(
            "table_state", "1 for the state /health gives the table, 0 for the others.", ("table", "state")
        )

    def table(
        self, name: str, trigger_seconds: float, stuck_after_triggers: int, log_files_bound: int | None = None
    ) -> TableMetrics:
        table = TableMetrics(self, name, trigger_seconds, stuck_after_triggers, log_files_bound)
        self.tables[name] = table
        return table

    def refresh(self) -> None:
        """Before a read of the endpoints: Kafka's lag and each table's state, as of now."""
        for table in self.tables.values():
            table.refresh()

    def health(self) -> dict:
        self.refresh()
        tables = {name: t.health() for name, t in self.tables.items()}
        healthy = all(h["state"] in HEALTHY for h in tables.values())
        return {"status": "ok" if healthy else "unhealthy", "tables": tables}


@dataclass
class Lag:
    """Kafka's lag as last asked: (topic, partition) -> records, or why it is unknown."""

    partitions: dict[tuple[str, int], int] | None = None
    unknown: str | None = None
    asked_at: float = -math.inf


class TableMetrics:
    """One table's children of every family, and what `/health` needs to judge it."""

    def __init__(
        self,
        metrics: Metrics,
        table: str,
        trigger_seconds: float,
        stuck_after_triggers: int,
        log_files_bound: int | None,
    ):
        self._m = metrics
        self.table = table
        self.trigger_seconds = trigger_seconds
        self.stuck_after_triggers = stuck_after_triggers
        self.started = time.time()
        self.last_commit_time: float | None = None
        self.caught_up_time: float | None = None  # when nothing was last seen waiting in Kafka
        self.failure: str | None = None
        self.lag_source: Callable[[], dict[tuple[str, int], int]] | None = None
        #: The last verdict `streamer verify` kept with the table: {"time", "missing", "extra", "different", ...}.
        self.verdict_source: Callable[[], dict | None] | None = None
        self._verdict_asked_at = -math.inf
        self._lag = Lag()
        self._lag_lock = threading.Lock()
        self._newest_record: float | None = None
        m = metrics
        for family in (
            m.records_read,
            m.records_written,
            m.records_deleted,
            m.records_bad,
            m.batches,
            m.backpressure,
            m.backpressure_seconds,
            m.pending_compactions,
            m.pending_resizes,
        ):
            family.labels(table)  # present from the start, at 0
        for kind in SKIP_KINDS:
            m.records_ignored.labels(table, kind)
        m.batch_seconds.labels(table)
        m.commit_latency.labels(table)
        for service in SERVICES:
            m.service_runs.labels(table, service)
            m.service_failures.labels(table, service)
            m.service_seconds.labels(table, service)
        if log_files_bound is not None:
            m.log_files_bound.labels(table).set(log_files_bound)
        m.freshness.labels(table).set_function(lambda: _age(self._newest_record))
        m.last_commit_age.labels(table).set_function(lambda: _age(self.last_commit_time))
        m.triggers_without_commit.labels(table).set_function(self.triggers_without_commit)
        self._show_state("starting")

    # ---- from the sink -------------------------------------------------------------------------

    def last_commit_before(self, committed_at: float | None) -> None:
        """At start: when the table's last deltacommit (of an earlier run) was made."""
        if committed_at is not None:
            self.last_commit_time = committed_at
            self._m.last_commit.labels(self.table).set(committed_at)

    def batch_committed(self, report: BatchReport, seconds: float) -> None:
        m, t = self._m, self.table
        m.batches.labels(t).inc()
        m.commit_conflicts.labels(t).inc(report.conflicts)
        m.records_read.labels(t).inc(report.records)
        m.records_written.labels(t).inc(report.upserted)
        m.records_deleted.labels(t).inc(report.deleted)
        m.records_bad.labels(t).inc(report.bad)
        for kind, count in report.ignored.items():
            m.records_ignored.labels(t, kind).inc(count)
        m.batch_seconds.labels(t).observe(seconds)
        for phase, spent in report.phases.items():
            m.phase_seconds.labels(t, phase).inc(spent)
        self.last_commit_time = report.committed_at
        m.last_commit.labels(t).set(report.committed_at)
        if report.lag and not any(report.lag.values()):
            self.caught_up_time = report.committed_at
        if report.freshness is not None:
            self._newest_record = report.committed_at - report.freshness[0]
            m.newest_record.labels(t).set(self._newest_record)
            m.commit_latency.labels(t).observe(report.freshness[1])
        if report.layout is not None:
            layout = report.layout
            m.log_files_max.labels(t).set(layout.log_files())
            m.log_files_p95.labels(t).set(layout.log_files(0.95))
            m.log_bytes_max.labels(t).set(layout.log_bytes())
            m.log_bytes_p95.labels(t).set(layout.log_bytes(0.95))
            for partition, count in layout.buckets().items():
                m.buckets.labels(t, partition).set(count)
            for partition, skew in layout.skew().items():
                m.bucket_skew.labels(t, partition).set(skew)

    def query_failed(self, error: str) -> None:
        self.failure = error
        self._show_state("failed")

    # ---- from the table services ---------------------------------------------------------------

    def service_ran(self, service: str, seconds: float, failed: bool) -> None:
        m, t = self._m, self.table
        m.service_runs.labels(t, service).inc()
        m.service_seconds.labels(t, service).observe(seconds)
        if failed:
            m.service_failures.labels(t, service).inc()

    def plans_pending(self, compactions: int, resizes: int) -> None:
        self._m.pending_compactions.labels(self.table).set(compactions)
        self._m.pending_resizes.labels(self.table).set(resizes)

    def catalog_synced(self, commits_behind: int, seconds: float | None, failed: bool) -> None:
        """A catalog sync ended (`seconds` None: nothing was due, only the distance changed)."""
        m, t = self._m, self.table
        m.catalog_behind.labels(t).set(commits_behind)
        if seconds is not None:
            m.catalog_syncs.labels(t).inc()
            m.catalog_seconds.labels(t).observe(seconds)
            if failed:
                m.catalog_failures.labels(t).inc()

    def held_back(self, seconds: float) -> None:
        self._m.backpressure.labels(self.table).inc()
        self._m.backpressure_seconds.labels(self.table).inc(seconds)

    # ---- at read time --------------------------------------------------------------------------

    def triggers_without_commit(self) -> int:
        """Trigger intervals since the last commit, the start, or the last moment nothing waited
        in Kafka, whichever came last: how long records have waited for a commit."""
        since = max(self.started, self.last_commit_time or 0.0, self.caught_up_time or 0.0)
        return int((time.time() - since) // self.trigger_seconds)

    def refresh(self) -> None:
        self._refresh_lag()
        self._refresh_verdict()
        self._show_state(self.health()["state"])

    def _refresh_verdict(self) -> None:
        if self.verdict_source is None or time.monotonic() - self._verdict_asked_at < VERDICT_REFRESH_SECONDS:
            return
        self._verdict_asked_at = time.monotonic()
        try:
            verdict = self.verdict_source()
        except (OSError, ValueError) as e:  # a view for monitors: never fails a scrape
            log.warning("%s: could not read the last verify verdict: %s", self.table, e)
            return
        if verdict is None:
            return
        differing = sum(int(verdict.get(kind, 0)) for kind in ("missing", "extra", "different"))
        self._m.verify_differing_rows.labels(self.table).set(differing)  # streamer.verify.verdict's counts
        stamp = datetime.strptime(verdict["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        self._m.verify_timestamp.labels(self.table).set(stamp.timestamp())

    def _show_state(self, state: str) -> None:
        for each in STATES:
            self._m.state.labels(self.table, each).set(1 if each == state else 0)

    def health(self) -> dict:
        lag = self._lag
        waiting = None if lag.partitions is None else sum(lag.partitions.values())
        triggers = self.triggers_without_commit()
        if self.failure is not None:
            state, why = "failed", self.failure
        elif waiting == 0:
            state, why = "idle", "no records waiting in Kafka"
        elif triggers < self.stuck_after_triggers:
            state = (
                "streaming"
                if self.last_commit_time is not None and self.last_commit_time >= self.started
                else "starting"
            )
            why = f"{waiting:,} records waiting" if waiting is not None else f"lag unknown: {lag.unknown}"
        else:
            state = "stuck"
            waiting_text = f"{waiting:,} records waiting" if waiting is not None else f"lag unknown ({lag.unknown})"
            why = f"{waiting_text} and no commit for {triggers} trigger intervals"
        return {
            "state": state,
            "reason": why,
            "lag": waiting,
            "triggers_without_commit": triggers,
            "last_commit_age_seconds": None
            if self.last_commit_time is None
            else round(time.time() - self.last_commit_time, 3),
        }

    def _refresh_lag(self) -> None:
        if self.lag_source is None:
            return
        with self._lag_lock:
            if time.monotonic() - self._lag.asked_at < LAG_REFRESH_SECONDS:
                return
            try:
                partitions = self.lag_source()
            except Exception as e:  # noqa: BLE001 - Kafka unreachable: the lag is unknown, the job may be fine
                self._lag = Lag(None, str(e), time.monotonic())
                return
            self._lag = Lag(partitions, None, time.monotonic())
            if not any(partitions.values()):
                self.caught_up_time = time.time()
        for (topic, partition), records in partitions.items():
            self._m.lag.labels(self.table, topic, str(partition)).set(records)


def _age(moment: float | None) -> float:
    return math.nan if moment is None else time.time() - moment


class MetricsServer:
    """`/metrics` and `/health` on one port, in a daemon thread. `/health` answers 200 while
    every table streams, is idle or starts, 503 when one is stuck or failed."""

    def __init__(self, metrics: Metrics, host: str, port: int):
        self.metrics = metrics
        self._server = ThreadingHTTPServer((host, port), _handler(metrics))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-endpoint", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), port  # an IP socket's address: (host, port)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics at http://%s:%d/metrics, health at /health", *self.address)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                metrics.refresh()
                self._answer(200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry))
            elif path == "/health":
                health = metrics.health()
                self._answer(200 if health["status"] == "ok" else 503, "application/json", json.dumps(health).encode())
            else:
                self._answer(404, "text/plain", b"/metrics or /health\n")

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name; scrapes are no news
            pass

    return Handler
