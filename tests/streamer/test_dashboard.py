"""The Grafana dashboard, the alerting rules and the compose file that provisions them, against
what the job exports: every metric a panel or an alert queries is one the job exports, every
metric the job exports is on the dashboard, and every file the compose file mounts is in the
repository. (tests/e2e/test_metrics.py has a real Prometheus load the rules and scrape them all.)"""

from __future__ import annotations

import pytest
import yaml

from streamer.config.loading import load_config
from streamer.metrics import Metrics
from tests.support.dashboard import DOCKER, METRIC_NAME, alert_rules, dashboard_metric_names

pytestmark = pytest.mark.unit

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",), "stateset": ("",)}


def exported_families() -> dict[str, set[str]]:
    """Each metric family of the job -> the names of its samples."""
    metrics = Metrics()
    metrics.table("orders", trigger_seconds=1.0, stuck_after_triggers=3, log_files_bound=5)
    return {f.name: {f.name + suffix for suffix in _SUFFIXES[f.type]} for f in metrics.registry.collect()}


def test_every_metric_the_dashboard_queries_is_one_the_job_exports():
    exported = set().union(*exported_families().values())
    assert dashboard_metric_names() - exported == set()


def test_every_metric_an_alert_queries_is_one_the_job_exports():
    exported = set().union(*exported_families().values())
    queried = {name for rule in alert_rules() for name in METRIC_NAME.findall(rule["expr"])}
    assert queried and queried - exported == set()


def test_the_dashboard_shows_every_metric_the_job_exports():
    queried = dashboard_metric_names()
    assert [family for family, names in exported_families().items() if not names & queried] == []


def test_every_file_the_compose_file_mounts_is_in_the_repository():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    mounted = [
        volume.split(":")[0]
        for service in compose["services"].values()
        for volume in service.get("volumes", [])
        if volume.startswith(".")
    ]
    assert "./grafana/dashboards" in mounted
    assert [m for m in mounted if not (DOCKER / m).exists()] == []


def test_prometheus_in_compose_scrapes_the_port_the_streamer_serves(monkeypatch):
    monkeypatch.delenv("MOR_STREAMER_METRICS_PORT", raising=False)
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    port = compose["services"]["streamer"]["environment"]["MOR_STREAMER_METRICS_PORT"]
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    (target,) = [t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert target == f"streamer:{port}"
    assert load_config(DOCKER.parent / "configs" / "orders.yaml").metrics.port is None  # off unless set
