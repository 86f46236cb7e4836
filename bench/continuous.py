"""Scenario `continuous`: our job against a producer that offers a steady rate.

A producer process (`python -m bench.continuous produce ...`) writes W1's events as JSON at a
fixed rate for a fixed time, each stamped with the time it was sent, into a new topic; our job
runs continuously beside it (`streamer run`, a 1-second trigger, default Spark settings). From
the job's log: records per second committed, the Kafka lag after each batch (does it grow while
the rate holds?), and each batch's freshness: from the Kafka timestamp of its oldest record to
the commit that makes it visible.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from bench import broker, spark, streaming
from bench.measure import REPO, PathResult, run_measured
from bench.report import Check, Section
from bench.workload import W1
from streamer.sandbox.topics import create_topic

TOPIC = "orders-live"
PARTITIONS = 2
TRIGGER = "1 second"
RATES = {"quick": (10_000, 30), "full": (50_000, 180)}  # records/s offered, seconds

BATCH_LINE = re.compile(
    r"^(\S+ \S+) INFO streamer\.sink: orders batch (\d+): ([\d,]+) records, .* in ([\d.]+)s; lag \S+ ([\d,]+)$"
)
FRESHNESS = re.compile(r"orders batch (\d+) phases: .*; freshness ([\d.]+)s to ([\d.]+)s$")


def scenario(w: W1, work: Path) -> Section:
    rate, seconds = RATES["quick" if w.initial_rows < 1_000_000 else "full"]
    work.mkdir(parents=True)
    with broker.kafka(work) as bootstrap:
        create_topic(bootstrap, TOPIC, partitions=PARTITIONS)
        result = _run(work, w, bootstrap, rate, seconds)
    notes = [
        f"a producer offers {rate:,} records/s for {seconds}s (W1's events, JSON, stamped when sent); "
        f"our job runs continuously beside it with a {TRIGGER} trigger and services off.",
        "freshness: per micro-batch, from the Kafka timestamp of its oldest record to its commit; "
        "lag: records behind the topic's end after each commit.",
    ]
    section = Section(
        f"continuous ingestion: {rate:,} records/s offered for {seconds}s ({spark.MASTER})",
        "ours",
        [result],
        notes,
        result.details,
    )
    d = result.details
    if "freshness_p95" in d:
        section.checks = [
            Check(
                "lag while the rate holds",
                f"{d['lag_slope_per_second']:+,.0f} records/s",
                f"does not grow (<= 1% of {rate:,}/s)",
                d["lag_slope_per_second"] <= rate / 100,
            ),
            Check("p95 freshness", f"{d['freshness_p95']:.1f}s", "<= 5s", d["freshness_p95"] <= 5.0),
        ]
    return section


def _run(work: Path, w: W1, bootstrap: str, rate: int, seconds: int) -> PathResult:
    settings = streaming.config(work, w, bootstrap, TOPIC, PARTITIONS)
    settings["source"]["max_offsets_per_trigger"] = 4 * rate
    settings["stream"]["trigger_interval"] = TRIGGER
    config_path = work / "orders.yaml"
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    argv = [
        sys.executable,
        "-m",
        "streamer.cli",
        "run",
        str(config_path),
        "--master",
        spark.MASTER,
        "--log-level",
        "DEBUG",
    ]
    for key, value in spark.CONF.items():
        argv += ["--conf", f"{key}={value}"]
    log_path = work / "streamer.log"
    producer: subprocess.Popen | None = None
    produced_until: list[float] = []

    def stop_when() -> bool:
        nonlocal producer
        log = log_path.read_text()
        if producer is None:
            if "orders: streaming" in log:  # the query runs: the offer starts now
                producer = subprocess.Popen(
                    [sys.executable, "-m", "bench.continuous", "produce", bootstrap, str(rate), str(seconds)],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            return False
        if producer.poll() is None:
            return False
        if not produced_until:
            produced_until.append(time.time())
        lines = [m for m in map(BATCH_LINE.match, log.splitlines()) if m]
        return (bool(lines) and lines[-1][5] == "0") or time.time() > produced_until[0] + 300

    code, _wall, rss = run_measured(argv, log_path, stop_when=stop_when, timeout=seconds + 900)
    sent = json.loads(producer.stdout.read()) if producer is not None else {}
    log = log_path.read_text()
    batches = [
        (
            datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp(),
            int(m[3].replace(",", "")),
            float(m[4]),
            int(m[5].replace(",", "")),
        )
        for m in map(BATCH_LINE.match, log.splitlines())
        if m
    ]
    freshness = {int(m[1]): float(m[3]) for m in map(FRESHNESS.search, log.splitlines()) if m}
    offered = [b for b in batches if sent and sent["started"] <= b[0] <= sent["ended"]]
    details = {
        "code": code,
        "offered_rate": rate,
        "offered_seconds": seconds,
        "sent": sent,
        "batches": len(batches),
        **_lag_and_freshness(offered, freshness, batches),
    }
    records = sum(b[1] for b in offered)
    span = (offered[-1][0] - offered[0][0]) if len(offered) > 1 else 0.0
    return PathResult(
        "ours",
        f"ours: streamer run, trigger {TRIGGER}",
        records,
        span,
        [b[2] for b in offered],
        None,
        None,
        None,
        rss,
        details,
    )


def _lag_and_freshness(offered: list[tuple], freshness: dict[int, float], batches: list[tuple]) -> dict:
    """Lag at the start, middle and end of the offer and its slope; p50/p95 freshness."""
    if len(offered) < 3:
        return {"error": "too few batches while the producer ran"}
    times = [b[0] - offered[0][0] for b in offered]
    lags = [b[3] for b in offered]
    slope = statistics.linear_regression(times, lags).slope
    third = max(1, len(lags) // 3)
    ids = {b[0]: i for i, b in enumerate(batches)}
    fresh = sorted(freshness.get(ids[b[0]], 0.0) for b in offered)
    return {
        "lag_first_third": statistics.mean(lags[:third]),
        "lag_last_third": statistics.mean(lags[-third:]),
        "lag_slope_per_second": slope,
        "freshness_p50": fresh[len(fresh) // 2],
        "freshness_p95": fresh[min(len(fresh) - 1, int(len(fresh) * 0.95))],
    }


def produce(bootstrap: str, rate: int, seconds: int) -> dict:
    """Offer W1's events at `rate` records/s for `seconds`; prints what it sent as JSON."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    events = _events(rate * seconds)
    chunk = max(1, rate // 50)  # 20 ms of records at a time
    started = time.time()
    sent = 0
    deadline = started + seconds
    while time.time() < deadline:
        due = int((time.time() - started) * rate)
        while sent < due:
            for _ in range(min(chunk, due - sent)):
                key, value = next(events)
                producer.produce(TOPIC, value, key)
                sent += 1
            producer.poll(0)
        time.sleep(0.005)
    producer.flush(60)
    return {"records": sent, "started": started, "ended": time.time()}


def _events(count: int):
    """W1's events as (key, JSON value), about `count` of them, generated as they are sent."""
    batch = 100_000
    w = W1(initial_rows=batch, batch_rows=batch, batches=max(1, count // batch))
    for table in w.tables():
        for row in table.to_pylist():
            yield row["order_id"].encode(), json.dumps(row, separators=(",", ":")).encode()


if __name__ == "__main__" and sys.argv[1:2] == ["produce"]:
    print(json.dumps(produce(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
