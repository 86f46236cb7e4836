"""The job on a Spark standalone cluster: a master and two workers, each its own JVM started from
PySpark's jars (`harness/spark_cluster.py`), the executors in JVMs of their own. The job is
submitted as docs/operations.md ("Running on a cluster") says, over the session's broker; its
table lies on this machine's disk, which every JVM here shares as a cluster's nodes share S3 or
HDFS. One worker is lost mid-run, its executor and Python workers with it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import streamer.spark_app
from harness.class_data import TEST_JAVA_OPTIONS
from harness.spark_cluster import SPARK_HOME, SparkCluster, node_environment
from table.mor_table import MorTable
from table.services.archive import read_archived_instants
from table.storage.markers import marker_dir
from tests.support.ingestion import (
    assert_data_files_belong_to_instants,
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    settled_change_events,
    shadowing_directory,
    write_config,
)

pytestmark = pytest.mark.e2e

EVENTS = 24_000
PER_BATCH = 1_000  # about 24 micro-batches: enough to lose a worker in the middle of them
COMMITS_BEFORE_LOSS = 3


def submit(cluster: SparkCluster, configs: Path, log_path: Path, cwd: Path) -> subprocess.Popen:
    """`spark-submit` of the application file in client mode from `cwd`, as docs/operations.md
    says: the executors run the Python that `spark.pyspark.python` names, with mor-streamer
    installed (this venv, at the same path on every node here). Nothing else tells them where our
    code is."""
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        cluster.master_url,
        "--deploy-mode",
        "client",
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        "spark.executor.memory=768m",
        "--driver-java-options",
        TEST_JAVA_OPTIONS,
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        streamer.spark_app.__file__,
        str(configs),
        "--once",
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command, cwd=cwd, env=node_environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )


def deltacommits(table_path: str) -> list[str]:
    """Every completed deltacommit, the archived ones too: archival moves the oldest off the
    active timeline while the job runs."""
    table = MorTable.load(table_path)
    done = [*read_archived_instants(table), *table.timeline().completed()]
    return [i.timestamp for i in done if i.action == "deltacommit" and i.state == "completed"]


def batch_writing(table_path: str, after_commits: int) -> str | None:
    """The instant of the deltacommit whose log files are being written (its tasks have marked
    some), once `after_commits` have completed."""
    if not MorTable.exists(table_path):
        return None
    timeline = MorTable.load(table_path).timeline()
    if len(timeline.completed("deltacommit")) < after_commits:
        return None
    writing = [
        i.timestamp for i in timeline.pending("deltacommit") if (Path(table_path) / marker_dir(i.timestamp)).is_dir()
    ]
    return writing[0] if writing else None


def wait_until(condition, what: str, job: subprocess.Popen, log_path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.poll() is None, f"the job exited while waiting for {what}:\n{tail(log_path)}"
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f}s:\n{tail(log_path)}"
        time.sleep(0.05)


def tail(log_path: Path, characters: int = 6000) -> str:
    return log_path.read_text(errors="replace")[-characters:]


def test_a_job_on_a_standalone_cluster_survives_losing_a_worker(kafka_bootstrap, kafka_topic, tmp_path):
    """Submitted from a directory that holds the table in `table/` beside files named like our
    packages, which none of the job's processes imports in place of ours."""
    topic = kafka_topic(partitions=3, prefix="orders")
    events = settled_change_events(EVENTS, seed=181)
    produce_orders(kafka_bootstrap, topic, events)
    config = order_config(tmp_path, "orders", kafka_bootstrap, topic, source={"max_offsets_per_trigger": PER_BATCH})
    config["table"]["path"] = "table"  # beside the config: the working directory's `table/`
    work = shadowing_directory(tmp_path / "work")
    config_path = write_config(work, config)
    table_path = str(work / "table")
    log_path = tmp_path / "driver.log"

    with SparkCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cluster:
        job = submit(cluster, config_path, log_path, cwd=work)
        try:
            lost, kept = cluster.workers
            in_flight = None

            def lost_mid_write() -> bool:
                nonlocal in_flight
                in_flight = batch_writing(table_path, COMMITS_BEFORE_LOSS)
                return (
                    in_flight is not None
                    and bool(kept.executor_pids())
                    and bool(lost.running_tasks())
                    and lost.lose_mid_task()
                )

            wait_until(
                lost_mid_write,
                f"a worker lost in the middle of a write task of a batch after "
                f"{COMMITS_BEFORE_LOSS} deltacommits, while the other has an executor",
                job,
                log_path,
            )
            committed_before_loss = len(deltacommits(table_path))
            code = job.wait(300)
        finally:
            if job.poll() is None:
                job.kill()
        assert [w["port"] for w in cluster.alive_workers()] == [kept.port]

    output = log_path.read_text(errors="replace")
    assert code == 0, tail(log_path)
    summary = re.search(r"^orders: (\d+) batches, ([\d,]+) records, 0 bad, .*: ok$", output, re.M)
    assert summary, tail(log_path)
    assert int(summary.group(2).replace(",", "")) == len(events)
    committed = deltacommits(table_path)
    assert int(summary.group(1)) == len(committed)  # one deltacommit a batch, none rolled back and redone
    assert in_flight in committed  # the batch the lost worker was writing completed without it
    assert len(committed) - committed_before_loss >= 10  # and many after it
    assert_table_matches(table_path, events)
    assert_data_files_belong_to_instants(table_path)  # nothing left of the lost task's attempt
    assert committed_offsets(table_path, topic) == end_offsets(kafka_bootstrap, topic)
    assert MorTable.load(table_path).timeline().pending() == []
