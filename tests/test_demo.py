"""`make demo` on a bare machine: the embedded tansu broker (the demo's zero-setup broker, while
the rest of the suite runs on Apache Kafka), the demo's table config and `streamer run --once`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ingestion import REPO, assert_table_matches, committed_offsets

from streamer.cli.demo import MALFORMED, TOPIC, change_events
from table.mor_table import MorTable

pytestmark = pytest.mark.e2e

EVENTS = 2_000


def test_the_demo_ingests_its_stream_from_tansu_and_quarantines_the_malformed_messages(tmp_path):
    env = {**os.environ, "DEMO_EVENTS": str(EVENTS), "DEMO_OUTPUT": str(tmp_path), "PYSPARK_PYTHON": sys.executable}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    demo = subprocess.run([sys.executable, "-m", "streamer.cli.demo"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)

    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "embedded Kafka-compatible broker" in demo.stdout and "same row count" in demo.stdout
    table_path = str(tmp_path / "tables" / "orders")
    assert_table_matches(table_path, change_events(EVENTS))
    # Every message read once: the offsets start at 0, so they sum to what was produced.
    assert sum(committed_offsets(table_path, TOPIC).values()) == EVENTS + len(MALFORMED)
    quarantined = MorTable.load(f"{table_path}_quarantine").snapshot(columns=["value"])["value"].to_pylist()
    assert sorted(quarantined) == sorted(MALFORMED)
