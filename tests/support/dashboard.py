"""What the Grafana dashboard and the Prometheus alerting rules of docker/ query."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "mor-streamer.json"
ALERTS = DOCKER / "prometheus-alerts.yml"
METRIC_NAME = re.compile(r"\bmor_streamer_[a-z0-9_]+")


def _expressions(node) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        query = node.get("query")
        if isinstance(query, dict) and isinstance(query.get("query"), str):
            found.append(query["query"])
        return found + [e for value in node.values() for e in _expressions(value)]
    if isinstance(node, list):
        return [e for item in node for e in _expressions(item)]
    return []


def dashboard_metric_names() -> set[str]:
    """The metrics the dashboard's panels and variables query."""
    return {name for expr in _expressions(json.loads(DASHBOARD.read_text())) for name in METRIC_NAME.findall(expr)}


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def alert_names() -> set[str]:
    return {rule["alert"] for rule in alert_rules()}
