"""A new user's first hour, through the `streamer` command as they type it: start the local Apache
Kafka (`streamer kafka start`), try the demo on it and paste the command it ends with, produce a
topic of their own with a plain confluent-kafka `Producer` (batches of many records, as a producer
batches them), write one YAML for it with the table in `table/` beside it, `streamer run --once`
from that directory (which also holds a `streamer/` package and a `table.py` of the user's), and
`streamer status` from another: lag 0, and the table holds the latest version of every key that
was produced.

The broker is the user's (its own process and directory, stopped and deleted at the end), not the
test session's.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from table.mor_table import MorTable
from tests.support.ingestion import REPO, run_streamer, shadowing_directory

pytestmark = pytest.mark.e2e

RECORDS = 20_000
CURRENCIES = ("EUR", "USD", "GBP", "JPY")


def payment_events(count: int, seed: int = 5) -> list[dict]:
    """Payments and their updates: a payment keeps its currency, `ts` grows."""
    rng = random.Random(seed)
    currency = {}
    events = []
    for ts in range(count):
        payment_id = f"pay-{rng.randint(1, count // 4):06d}"
        currency.setdefault(payment_id, rng.choice(CURRENCIES))
        events.append(
            {
                "payment_id": payment_id,
                "currency": currency[payment_id],
                "amount": round(rng.uniform(1, 500), 2),
                "ts": ts,
            }
        )
    return events


def test_the_first_hour_from_a_local_broker_to_a_table_of_ones_own(tmp_path):
    kafka_dir = tmp_path / "kafka"
    code, out = run_streamer(["kafka", "start", "--dir", str(kafka_dir), "--port", "0"], timeout=300)
    assert code == 0, out
    bootstrap = re.search(r"^Apache Kafka \S+ started at (\S+) \(pid \d+\)$", out, re.MULTILINE).group(1)
    assert f"export KAFKA_BOOTSTRAP_SERVERS={bootstrap}" in out and f"streamer kafka stop --dir {kafka_dir}" in out
    try:
        demo = subprocess.run(
            [sys.executable, "-m", "streamer.cli.demo"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={
                **os.environ,
                "DEMO_EVENTS": "1000",
                "DEMO_OUTPUT": str(tmp_path / "demo"),
                "DEMO_KAFKA_DIR": str(kafka_dir),
                "PYSPARK_PYTHON": sys.executable,
                "PYTHONPATH": str(REPO),
            },
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert f"at {bootstrap} (pid " in demo.stdout and "running already" in demo.stdout
        assert "same row count" in demo.stdout
        (paste,) = [line.strip() for line in demo.stdout.splitlines() if line.strip().startswith("echo ")]
        pasted = subprocess.run(
            paste,
            shell=True,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert pasted.returncode == 0 and f"produced 1 record(s) to orders at {bootstrap}" in pasted.stdout, pasted

        events = payment_events(RECORDS)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("payments", 3, 1)])["payments"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 5000})
        delivered = []
        for event in events:
            producer.produce(
                "payments",
                key=event["payment_id"],
                value=json.dumps(event),
                on_delivery=lambda err, msg: delivered.append(err is None),
            )
            producer.poll(0)
        assert producer.flush(60) == 0 and delivered.count(True) == RECORDS

        # The user's project holds the table in `table/` beside the YAML, and files named like
        # our packages, which none of the job's processes imports in place of ours.
        project, elsewhere = shadowing_directory(tmp_path / "project"), tmp_path / "elsewhere"
        elsewhere.mkdir()
        (project / "payments.yaml").write_text(
            yaml.safe_dump(
                {
                    "table": {
                        "name": "payments",
                        "path": "table",
                        "record_key": "payment_id",
                        "partition_by": "currency",
                        "ordering_field": "ts",
                    },
                    "source": {"bootstrap_servers": bootstrap, "topics": "payments"},
                    "decode": {
                        "value": {
                            "format": "json",
                            "schema": "payment_id STRING, currency STRING, amount DOUBLE, ts BIGINT",
                        }
                    },
                }
            )
        )
        config = os.path.join("..", "project", "payments.yaml")

        code, out = run_streamer(["run", "payments.yaml", "--once"], timeout=600, cwd=project)
        assert code == 0, out[-3000:]
        assert re.search(
            rf"^payments: \d+ batches, {RECORDS:,} records, 0 bad, last commit \d{{17}}: ok$", out, re.MULTILINE
        ), out[-3000:]
        code, status = run_streamer(["status", config], timeout=120, cwd=elsewhere)
        assert code == 0 and "  lag      payments 0 behind" in status, status

        latest = {e["payment_id"]: e for e in events}  # ts grows: the last event of a key wins
        rows = (
            MorTable.load(str(project / "table"))
            .snapshot(columns=["payment_id", "currency", "amount", "ts"])
            .to_pylist()
        )
        assert sorted(rows, key=lambda r: r["payment_id"]) == [latest[k] for k in sorted(latest)]

        code, out = run_streamer(["kafka", "status", "--dir", str(kafka_dir)], timeout=120)
        assert code == 0 and f"  payments: 3 partition(s), {RECORDS:,} record(s)" in out, out
    finally:
        code, out = run_streamer(["kafka", "stop", "--dir", str(kafka_dir), "--delete-data"], timeout=120)
    assert code == 0 and out.startswith(f"stopped Apache Kafka at {bootstrap} (pid "), out
    assert not kafka_dir.exists()
