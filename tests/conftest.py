"""Fixtures shared by several test folders: the Kafka broker (session), a Spark session (per
module), the Hive Metastore and Apache Hudi, the judge (session), the schema registry (session),
table directories, disks and unique topic names (per test). Fixtures of one folder alone live in
that folder's conftest.py (tests/e2e: S3, PostgreSQL and Kafka Connect; tests/hudi: the
conformance matrix).

Nothing here replaces a real part: the broker is Apache Kafka (or the broker named by
KAFKA_BOOTSTRAP_SERVERS), Spark is a real local[2] session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.class_data import TEST_JAVA_OPTIONS, share_with_spark_jvms
from tests.support import kafka_broker
from tests.support.distribution import plain_nodeid, spread
from tests.support.durations import RECORD, REPO, FixtureTimer, RunDurations, is_whole_run

_session_broker: kafka_broker.TestBroker | None = None


# -- Kafka --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kafka_broker_handle(tmp_path_factory) -> kafka_broker.TestBroker:
    """The session's broker (see tests/support/kafka_broker.py): `.kind` (external/kafka),
    `.bootstrap`, `.pid` and `.log_path` (the ones this session started)."""
    global _session_broker
    broker = kafka_broker.start_test_broker(tmp_path_factory.mktemp("kafka"))
    _session_broker = broker
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker_handle) -> str:
    """bootstrap.servers of the session's broker."""
    return kafka_broker_handle.bootstrap


def _slug(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:limit] or "t"


@pytest.fixture
def unique_topic(request):
    """Factory: `unique_topic("orders")` -> a topic name no other test uses (not created)."""

    def make(prefix: str = "t") -> str:
        return f"{_slug(prefix, 40)}-{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def kafka_topic(kafka_bootstrap, unique_topic):
    """Factory: `kafka_topic(partitions=3, prefix="orders", config={...})` creates a fresh topic on
    the session's broker and returns its name."""

    def make(partitions: int = 1, prefix: str = "t", config: dict | None = None) -> str:
        return kafka_broker.create_topic(kafka_bootstrap, unique_topic(prefix), partitions=partitions, config=config)

    return make


# -- Spark --------------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)  # before xdist reads the units of work from the marks
def pytest_collection_modifyitems(items):
    """The tests grouped into units of work for the workers, heaviest first
    (`tests.support.distribution`)."""
    spread(items)


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected
def pytest_collection_finish(session):
    """Unless every test chosen is a unit test, Spark's driver JVMs map one class-data archive,
    whichever test starts them (`harness.class_data`): each starts in about half the time."""
    if any(item.get_closest_marker("unit") is None for item in session.items):
        started = time.monotonic()
        share_with_spark_jvms()
        _durations.add_fixture("class-data archive (collection)", time.monotonic() - started)


@pytest.fixture(scope="module")
def spark_jars() -> tuple[str, ...]:
    """Jars the module's Spark session needs on its classpath; a module that needs some (Spark's
    Kafka connector) overrides this fixture."""
    return ()


_jvm_jars: frozenset[str] = frozenset()  # the jars the running Spark JVM was launched with


def _ensure_jvm_with(jars: tuple[str, ...]) -> None:
    """A JVM takes jars on its classpath only at launch, and PySpark launches one per process:
    when the running one was launched with other jars, end it so that the next session launches a
    new one. (Exactly those jars: a module that checks what happens without a connector must not
    find it left by an earlier module.)"""
    global _jvm_jars
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None and set(jars) != _jvm_jars:
        gateway.shutdown()
        gateway.proc.stdin.close()  # the gateway JVM exits when its stdin closes
        gateway.proc.wait(60)
        SparkContext._gateway = SparkContext._jvm = None
    if SparkContext._gateway is None:
        _jvm_jars = frozenset(jars)


@pytest.fixture(scope="module")
def spark(request, tmp_path_factory, spark_jars):
    """One local[2] SparkSession per test module, stopped at the module's end."""
    # Workers must run this interpreter (this venv), not whatever `python3` is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:  # left over by a module that made its own; ours needs our settings
        active.stop()
    _ensure_jvm_with(spark_jars)
    base = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName(f"tests:{request.module.__name__}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        # Only read when this process launches the JVM.
        .config("spark.driver.extraJavaOptions", os.environ.get("SPARK_TEST_JAVA_OPTIONS", TEST_JAVA_OPTIONS))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.unix.domain.socket.enabled", "true")  # as the job: no 40 ms stall per task
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.jars", ",".join(sorted(_jvm_jars)))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


# -- a Hive Metastore ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory):
    """Apache Hive's standalone metastore (harness/hive_metastore.py, embedded Derby) for the whole
    run, fetched on first use, stopped by its pid at the end. The judge's catalog is this one."""
    from harness.hive_metastore import HiveMetastore

    server = HiveMetastore(tmp_path_factory.mktemp("hive-metastore")).start()
    try:
        yield server
    finally:
        server.close()


# -- Apache Hudi, the judge --------------------------------------------------------------------
@pytest.fixture(scope="session")
def hudi_judge(tmp_path_factory, hive_metastore):
    """One Spark 3.5 session with Apache Hudi 0.15's bundle for the whole run (a server process,
    see harness/hudi_judge.py), installed on first use; stopped by its pid at the end. Its
    catalog is the session's Hive Metastore, so it reads synced tables by name."""
    from harness.hudi_judge import HudiJudge

    judge = HudiJudge.start(
        tmp_path_factory.mktemp("hudi-judge"),
        spark_conf={"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": hive_metastore.uri},
    )
    try:
        yield judge
    finally:
        judge.stop()


@pytest.fixture(scope="session")
def hudi_1x_judge(tmp_path_factory):
    """The second judge: Apache Hudi 1.0.2's Spark 3.5 bundle on the judge's pyspark, for the run."""
    from harness.hudi_judge import HUDI_1X_BUNDLE, HudiJudge

    judge = HudiJudge.start(tmp_path_factory.mktemp("hudi-1x-judge"), bundle=HUDI_1X_BUNDLE)
    try:
        yield judge
    finally:
        judge.stop()


# -- tables -------------------------------------------------------------------------------------
@pytest.fixture
def table_dir(tmp_path) -> Path:
    """A fresh directory path for one table: the parent exists, the directory itself does not
    (creating it is the table's business). Further tables: `tmp_path / "other"`."""
    return tmp_path / "table"


# -- reporting ----------------------------------------------------------------------------------
_summary_lines: list[str] = []
_durations = RunDurations()
_run_started = time.monotonic()


@pytest.fixture(scope="session")
def terminal_summary() -> list[str]:
    """Lines a test appends to show at the end of the run (the crash matrix's table)."""
    return _summary_lines


def pytest_configure(config):
    """Time the fixtures that start servers and sessions, wherever they are defined (a conftest's
    own hook would not see the session's fixtures)."""
    config.pluginmanager.register(FixtureTimer(_durations), "fixture-timer")


def pytest_runtest_logreport(report):
    """Each test's phases (in the controller under xdist, which receives every worker's reports)."""
    _durations.add_report(plain_nodeid(report.nodeid), report.when, report.duration)


def pytest_sessionfinish(session):
    """A worker hands its summary lines, its broker and its fixtures' times to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        if _session_broker is not None:
            _summary_lines.insert(0, f"kafka: {_session_broker.description}")
        workeroutput["summary_lines"] = _summary_lines
        workeroutput["fixtures"] = dict(_durations.fixtures)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller takes a finished worker's summary lines and fixture times."""
    output = getattr(node, "workeroutput", {})
    _summary_lines.extend(output.get("summary_lines", []))
    for name, times in output.get("fixtures", {}).items():
        for seconds in times:
            _durations.add_fixture(name, seconds)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _session_broker is not None:
        terminalreporter.write_line(f"kafka: {_session_broker.description}")
    for line in _summary_lines:
        terminalreporter.write_line(line)
    if not hasattr(config, "workerinput") and is_whole_run(config):
        # A whole run (no test or marker chosen): its times are the suite's (tests.support.durations).
        _durations.wall_seconds = time.monotonic() - _run_started
        _durations.workers = getattr(config.option, "numprocesses", 0) or 1
        _durations.save()
        terminalreporter.write_line(f"durations: {RECORD.relative_to(REPO)} (python -m tests.support.durations)")


# -- schema registry ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def apicurio_registry(tmp_path_factory):
    """Apicurio Registry for the session (see harness/schema_registry.py), a real registry server:
    Kafka Connect's Avro converter registers Debezium's schemas with it, and the decoders read
    them through its Confluent-compatible API."""
    from harness.schema_registry import ApicurioRegistry

    registry = ApicurioRegistry(tmp_path_factory.mktemp("apicurio")).start()
    try:
        yield registry
    finally:
        registry.close()


@pytest.fixture(scope="session")
def schema_registry_url(request) -> str:
    """URL of a Confluent-compatible schema registry: SCHEMA_REGISTRY_URL when set, else the
    session's Apicurio Registry."""
    return os.environ.get("SCHEMA_REGISTRY_URL") or request.getfixturevalue("apicurio_registry").url


# -- disks ----------------------------------------------------------------------------------------
@pytest.fixture
def table_disk(tmp_path) -> Path:
    """A 16 MiB tmpfs for the tables and checkpoints of one test, unmounted at its end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=False)
        if subprocess.run(["umount", str(disk)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)  # a child still had a file open


# -- a source database ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """PostgreSQL with `wal_level=logical` for the session (see harness/postgres.py), installed
    from Debian's packages on first use, stopped by its pid at the end. Tests make their own
    databases."""
    from harness.postgres import PostgresServer

    server = PostgresServer(tmp_path_factory.mktemp("postgres")).start()
    try:
        yield server
    finally:
        server.close()
