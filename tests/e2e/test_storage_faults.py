"""Storage faults: the disk of a table (and of its Spark checkpoint) fills up or turns read-only.

The faults are real: each test mounts a small tmpfs for the table and the checkpoint, then fills
it or remounts it read-only (root cannot be stopped by file modes; the tests run as root with
CAP_SYS_ADMIN). The batch fails with the OS error, nothing of it is committed or visible to a
reader, and once the fault is gone the next run completes it.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from streamer import app
from streamer.config.loading import config_from_mapping
from streamer.errors import StartupError
from streamer.sandbox.change_events import change_events
from table.mor_table import MorTable
from table.timeline.timeline import State
from tests.support.ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e


def _remount(disk: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(disk)], check=True)


def _fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; returns it."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
    while True:  # and the last few bytes
        try:
            with open(filler, "ab", buffering=0) as f:
                f.write(b"\0")
        except OSError:
            return filler


def _inflight_deltacommits(table_path: str) -> list:
    if not MorTable.exists(table_path):
        return []
    return [i for i in MorTable.load(table_path).timeline().pending("deltacommit") if i.state is State.INFLIGHT]


def test_a_full_disk_fails_the_batch_with_the_os_error_and_the_next_run_completes_it(
    spark, kafka_bootstrap, kafka_topic, table_disk, monkeypatch
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(6_000, seed=81)
    first, second = events[:3_000], events[3_000:]
    produce_orders(kafka_bootstrap, topic, first)
    config = config_from_mapping(order_config(table_disk, "orders", kafka_bootstrap, topic))
    table_path = config.table.path
    assert config.checkpoint_location.startswith(str(table_disk))  # the Spark checkpoint shares the disk
    assert app.run([config], spark, once=True).tables[0].error is None
    committed = MorTable.load(table_path).timeline().completed_writes()

    produce_orders(kafka_bootstrap, topic, second)
    monkeypatch.setenv("MOR_STREAMER_PAUSE", "deltacommit.inflight=5")  # the batch waits there
    filled: list[Path] = []

    def fill_once_the_batch_is_inflight() -> None:
        deadline = time.monotonic() + 240
        while not _inflight_deltacommits(table_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        filled.append(_fill(table_disk))

    filler = threading.Thread(target=fill_once_the_batch_is_inflight, daemon=True)
    filler.start()
    (outcome,) = app.run([config], spark, once=True).tables
    filler.join(10)

    assert filled, "the batch never went inflight"
    assert outcome.error.startswith(f"TableWriteError: orders: batch 1 could not be written to {table_path}: ")
    assert "[Errno 28] No space left on device" in outcome.error
    assert "nothing of it was committed" in outcome.error
    timeline = MorTable.load(table_path).timeline()
    assert timeline.completed_writes() == committed  # no partial commit
    assert len(timeline.pending("deltacommit")) == 1  # left for the next run to roll back
    assert_table_matches(table_path, first)  # readers (ours and hudi-rs) see nothing of it
    with pytest.raises(
        StartupError,
        match=rf"cannot write to the table at {re.escape(table_path)}: "
        r".*No space left on device",
    ):
        app.run([config], spark, once=True)  # a start on the full disk fails at once

    os.remove(filled[0])
    monkeypatch.delenv("MOR_STREAMER_PAUSE")
    (outcome,) = app.run([config], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(second)
    assert_table_matches(table_path, events)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)
    timeline = MorTable.load(table_path).timeline()
    assert timeline.pending("deltacommit") == [] and len(timeline.completed("rollback")) == 1


def test_a_read_only_disk_stops_a_running_job_with_the_os_error_and_a_restart_completes_the_batch(
    spark, kafka_bootstrap, kafka_topic, table_disk
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = change_events(6_000, seed=83)
    first, second = events[:3_000], events[3_000:]
    produce_orders(kafka_bootstrap, topic, first)
    mapping = order_config(table_disk, "orders", kafka_bootstrap, topic, stream={"trigger_interval": "2 seconds"})
    path = write_config(table_disk.parent / "configs", mapping)
    table_path = str(table_disk / "tables" / "orders")
    spark_done = table_disk / "checkpoints" / "orders" / "commits" / "0"  # Spark's record of batch 0
    job = streamer_process(["run", str(path)])
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not spark_done.exists():
            assert job.poll() is None and time.monotonic() < deadline, "".join(lines)[-5000:]
            time.sleep(0.5)
        committed = MorTable.load(table_path).timeline().completed_writes()
        _remount(table_disk, "ro")
        produce_orders(kafka_bootstrap, topic, second)
        # Batch 1 fails at its first write, Spark's offset log on the same disk; the job stops.
        job.wait(240)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        reader.join(10)
    out = "".join(lines)

    assert job.returncode == 1, out[-5000:]
    (summary,) = [line for line in out.splitlines() if line.startswith("orders: ") and "FAILED: " in line]
    assert "Read-only file system" in summary and str(table_disk / "checkpoints") in summary, summary
    timeline = MorTable.load(table_path).timeline()
    assert timeline.completed_writes() == committed
    assert_table_matches(table_path, first)

    _remount(table_disk, "rw")
    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables  # the restart

    assert outcome.error is None
    assert_table_matches(table_path, events)
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)
    assert MorTable.load(table_path).timeline().pending("deltacommit") == []


def test_a_new_table_on_a_read_only_disk_fails_at_start_naming_the_path(
    spark, kafka_bootstrap, kafka_topic, table_disk
):
    topic = kafka_topic(partitions=1, prefix="orders")
    produce_orders(kafka_bootstrap, topic, change_events(100, seed=83))
    config = config_from_mapping(order_config(table_disk, "orders", kafka_bootstrap, topic))
    _remount(table_disk, "ro")

    with pytest.raises(
        StartupError,
        match=rf"cannot create the table at {re.escape(config.table.path)}: "
        r".*Read-only file system",
    ):
        app.run([config], spark, once=True)
    assert not MorTable.exists(config.table.path)
