"""The ingestion application: one Spark application; a streaming query per group of tables that
read from the same brokers (`streamer.shared_query`), or per table that reads alone.

`run` prepares every table first (so a bad config stops the start, not a running job), starts
the queries, and waits. A table that fails stops only itself unless its config says
`stream.on_failure: stop_application`. SIGTERM and SIGINT stop the application cleanly: the
batch in progress finishes (or, past the grace period, is abandoned and rolled back by the next
run), and Spark never records a batch the table did not commit.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import pairwise
from socketserver import BaseServer

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streamer.collector import collect_in_large_steps
from streamer.config.choices import QueryFailurePolicy, SourceFormat
from streamer.config.mirror import MirrorConfig
from streamer.config.model import JobConfig
from streamer.driver_write import DriverWrites
from streamer.errors import StartupError, StopRequestedError
from streamer.job import TableJob
from streamer.kafka.consumer import describe_reader
from streamer.kafka.datasource import register_kafka_source
from streamer.last_error import record_error
from streamer.logs.failures import failure_line, query_error_line
from streamer.logs.lines import LOG_FORMAT_ENV, LOG_LEVEL_ENV, formatter
from streamer.metrics import Metrics, MetricsServer
from streamer.mirror import Mirror
from streamer.scheduler import BackgroundExecutor
from streamer.shared_query import SharedQuery, shared_groups
from table import MIB

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 120.0
#: How long a query may take to initialise its source before the next table's query starts.
SOURCE_START_SECONDS = 120.0


@dataclass
class TableOutcome:
    """What a run did for one table: the batches it committed and their counts, the batch that
    failed (`failed_batch`, with its counts when it had been read), the table's last deltacommit
    (`last_instant`; `earlier` when an earlier run made it), and the error that stopped it."""

    name: str
    batches: int = 0
    records: int = 0
    bad: int = 0
    last_instant: str | None = None
    error: str | None = None
    earlier: bool = False
    failed_batch: str | None = None  # "batch 3", "initial load"
    failed_records: int = 0
    failed_bad: int = 0

    def line(self) -> str:
        """The run's summary of the table, one line."""
        counts = f"{self.batches} batches, {self.records:,} records, {self.bad:,} bad"
        last = f"last commit {self.last_instant or '-'}" + (" (an earlier run's)" if self.earlier else "")
        if not self.error:
            return f"{self.name}: {counts}, {last}: ok"
        failed = ""
        if self.failed_batch:
            read = (
                f" ({self.failed_records:,} records, {self.failed_bad:,} bad)"
                if self.failed_records or self.failed_bad
                else ""
            )
            failed = f"; {self.failed_batch}{read} failed, nothing of it written"
        return f"{self.name}: {counts} committed{failed}; {last}: FAILED: {self.error}"


@dataclass
class RunResult:
    tables: list[TableOutcome] = field(default_factory=list)
    stopped_by_signal: bool = False
    refused: list[str] = field(default_factory=list)  # a mirror's topics that are not tables, and why

    @property
    def failed(self) -> list[TableOutcome]:
        return [t for t in self.tables if t.error]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


#: Python's safe-path mode: neither the working directory nor a script's own is put on the path.
SAFE_PATH_ENV = "PYTHONSAFEPATH"

#: Settings the job runs with unless told otherwise (`--conf`, spark-submit).
JOB_SPARK_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # Arrow batches from the JVM to Python of a few MiB: a write task starts on the first packed
    # rows of its file groups while the shuffle still reads the rest.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(8 * MIB),
    # A micro-batch's write has one plan, one shuffle by file group into about a task per core:
    # adaptive execution would only run it as two jobs and plan the second one again.
    "spark.sql.adaptive.enabled": "false",
    # The shuffle's map output is the same rows whenever a task runs again (the same offsets, the
    # same routing), so the order-independent checksum that detects output that differs between
    # attempts only costs a hash of every byte shuffled. Spark computes it while either setting
    # is on (both are by default).
    "spark.sql.shuffle.orderIndependentChecksum.enabled": "false",
    "spark.sql.shuffle.orderIndependentChecksum.enableFullRetryOnMismatch": "false",
    # The JVM only plans, shuffles and hands over packed batches: its optimising compiler would
    # spend more CPU compiling Spark's planner than it saves, on the cores Python needs. Code run
    # once a batch is compiled after 40 batches rather than 200, and a heap larger than the one
    # the job settles at is touched at start: the driver's memory stops growing in minutes, not
    # after an hour of the collector touching pages and the compiler adding code. The shuffle of
    # a `kafka-arrow` batch carries PySpark's pickled chunks of a few MB each; regions of 8 MB
    # keep them out of G1's humongous regions, which grew the heap by 0.5 GB over a large backlog.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:CompileThresholdScaling=0.2 -Xms320m -XX:+AlwaysPreTouch "
    "-XX:G1HeapRegionSize=8m",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:G1HeapRegionSize=8m",
    # Writes the checkpoint's offset and commit logs through the FileSystem API: on a local disk
    # the FileContext API spawns a process per file to resolve links.
    "spark.sql.streaming.checkpointFileManagerClass": "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    # Spark keeps the plans, jobs, stages and tasks of past queries for its UI, 1,000 queries and
    # 100,000 tasks by default: a few micro-batches a minute fill that for an hour, and the
    # driver's JVM grows all that time. The last 100 show what the job does now.
    "spark.sql.ui.retainedExecutions": "100",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    # Each batch's shuffle and broadcast are removed once the JVM has collected their objects,
    # which may take no full collection for 30 minutes (the default): their files wait that long.
    "spark.cleaner.periodicGC.interval": "5min",
    # Workers forked from a daemon that has already imported what they use share those pages.
    "spark.python.daemon.module": "streamer.worker_daemon",
    # An executor talks to its Python workers over a Unix socket, not loopback TCP: over TCP
    # each task's input waited about 40 ms for the executor's delayed acknowledgement, which a
    # micro-batch of ten short tasks on two cores paid about 0.2 s of its wall time for.
    "spark.python.unix.domain.socket.enabled": "true",
    # Spark's Python processes start in the job's working directory, which Python otherwise puts
    # first on their path: a user's folder named `table` or `streamer` there would be imported
    # in place of ours. Executors' workers, and (local or spark-submit) the driver's.
    f"spark.executorEnv.{SAFE_PATH_ENV}": "1",
}


#: PySpark's loggers that log an analysis or execution error with its query context and stack
#: traces, before the job tells it in one line. (py4j logs an error raised in the sink, a Python
#: function the JVM calls, with its traceback at ERROR.)
PYSPARK_STACK_TRACE_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    """One line per event on stderr, text or JSON (`streamer.logs.lines`): batches, starts and
    stops. The stack traces PySpark and py4j log of an error stay out unless `level` is DEBUG;
    the job tells each failure in one line. Spark's Python workers, started later, log at the
    same level and in the same format (`client_logs.configure_worker_logging`)."""
    from pyspark.logger import PySparkLogger

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    os.environ[LOG_LEVEL_ENV] = level
    os.environ[LOG_FORMAT_ENV] = log_format
    for ours in ("streamer", "table"):
        logging.getLogger(ours).setLevel(level)
    shown = level == "DEBUG"
    logging.getLogger("py4j").setLevel(logging.WARNING if shown else logging.CRITICAL)  # never its INFO chatter
    for name in PYSPARK_STACK_TRACE_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.ERROR if shown else logging.CRITICAL)


def spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The session of this application. Under spark-submit its settings rule; run directly, it
    is local unless a master is given."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ[SAFE_PATH_ENV] = "1"  # the JVM launched here passes it on to every Python it starts
    builder = SparkSession.builder.appName("mor-streamer")
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master("local[*]")
    settings = {**JOB_SPARK_SETTINGS, **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


#: The modules Spark's Python worker daemons run (`python -m <module> <worker module>`): PySpark's
#: own, which Spark's planners of a Python data source use, and the job's.
PYTHON_DAEMON_MODULES = ("pyspark.daemon", JOB_SPARK_SETTINGS["spark.python.daemon.module"])


def stop_spark(spark: SparkSession) -> None:
    """Stop Spark, its Python worker daemons ended first (`end_python_daemons`), without waiting
    on PySpark's accumulator server (`_let_accumulator_server_end`)."""
    end_python_daemons(spark)
    context = spark.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    context._accumulatorServer = None  # type: ignore[assignment]  # stopped below, not by `stop`
    spark.stop()
    if server is not None:
        _let_accumulator_server_end(server)


def _let_accumulator_server_end(server: BaseServer) -> None:
    """Stop PySpark's accumulator server on a thread of its own. It serves the JVM's one
    connection in a loop that looks for its stop flag once a second, and `SparkContext.stop`
    waits for that loop: up to a second at the end of every run. Its socket file is removed
    now, so that none is left if the process ends first."""
    address = server.server_address
    if isinstance(address, str) and os.path.exists(address):
        os.remove(address)
    server.server_shutdown = True  # type: ignore[attr-defined]  # PySpark's flag for that loop
    threading.Thread(target=server.shutdown, name="accumulator-server-stop", daemon=True).start()


def end_python_daemons(spark: SparkSession, timeout: float = 5.0) -> None:
    """End the Python worker daemons of the driver's JVM, and with them their workers. Stopping,
    Spark closes its idle workers' connections before it ends their daemons: an idle worker of
    PySpark's own daemon (the data source lookup's, idle since the start) then fails to answer
    the closed connection and prints a traceback, cut off where its daemon ends it. A daemon
    ended first ends its workers quietly; Spark starts another if it needs one again."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # no gateway to the driver's JVM
        return
    daemons = [
        child
        for child in jvm.java.lang.ProcessHandle.current().children().toArray()
        if _runs_a_python_daemon(child.info().commandLine().orElse(""))
    ]
    for daemon in daemons:
        daemon.destroy()
    deadline = time.monotonic() + timeout
    while any(d.isAlive() for d in daemons) and time.monotonic() < deadline:
        time.sleep(0.02)


def _runs_a_python_daemon(command: str) -> bool:
    return any(flag == "-m" and module in PYTHON_DAEMON_MODULES for flag, module in pairwise(command.split()))


#: Spark's log lines that repeat what the job says itself: a query's failure with Spark's stack
#: traces (the job logs the failure's own line, and the whole of it at DEBUG), and a warning that
#: adaptive query execution does not apply to streams (the job never asks for it there).
QUIET_SPARK_LOGGERS = tuple(
    f"org.apache.spark.sql.execution.streaming.{package}{name}"
    for name in ("MicroBatchExecution", "ResolveWriteToStream")
    for package in ("runtime.", "")
)  # the package, and the one of Spark 4.0


#: Spark's loggers of a failed task, whose lines carry the task's Java (and Python) stack trace:
#: the executor's (ERROR), and the scheduler's "Lost task" warnings (its ERROR line that the job
#: is aborted stays). Quiet unless the job logs at DEBUG.
TASK_FAILURE_LOGGERS = {
    "org.apache.spark.executor.Executor": "OFF",
    "org.apache.spark.scheduler.TaskSetManager": "ERROR",
}


def quiet_spark_loggers(spark: SparkSession) -> None:
    """Turn off Spark's `QUIET_SPARK_LOGGERS` in the driver's JVM, and its `TASK_FAILURE_LOGGERS`
    unless the job logs at DEBUG."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # no gateway to the driver's JVM: Spark's lines stay
        return
    levels = dict.fromkeys(QUIET_SPARK_LOGGERS, "OFF")
    if not log.isEnabledFor(logging.DEBUG):
        levels.update(TASK_FAILURE_LOGGERS)
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name, level in levels.items():
            configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.getLevel(level))
    except Exception as e:  # noqa: BLE001 - another logging backend under spark-submit: Spark's lines stay
        log.debug("could not quiet Spark's loggers: %s", e)


def run(
    configs: list[JobConfig], spark: SparkSession, once: bool = False, mirrors: list[MirrorConfig] | None = None
) -> RunResult:
    """Run the table jobs until stopped (or, with `once`, until their topics are drained).
    Tables that read from the same brokers share one streaming query (`streamer.shared_query`);
    each mirror's tables share its own."""
    samples = [*configs, *(m.sample for m in mirrors or () if m.sample is not None)]
    for line in [*_reader_lines(samples), *_driver_write_lines(samples, spark.sparkContext.master)]:
        log.info("%s", line)
    register_kafka_source(spark)
    quiet_spark_loggers(spark)
    executor = BackgroundExecutor()
    metrics = Metrics()
    server: MetricsServer | None = None
    jobs: list[TableJob] = []
    queries: list[SharedQuery] = []
    try:
        for config in configs:
            jobs.append(TableJob.prepare(config, spark, executor, metrics))
        for mirror_config in mirrors or ():
            mirror = Mirror(mirror_config, spark, executor, metrics)
            queries.append(mirror.query(mirror.prepare()))
        collect_in_large_steps()
        server = _metrics_server([*configs, *(m.sample for m in mirrors or () if m.sample is not None)], metrics)
        groups, alone = shared_groups(jobs)
        queries += [SharedQuery(_group_name(group), group) for group in groups]
        result = _Runner(spark, alone, queries, once).run()
        result.refused = [
            f"{q.name}: {refusal.reason}"
            for q in queries
            for refusal in q.router.routes.refused.values()
            if refusal.reported
        ]
        every = [*alone, *(job for q in queries for job in q.jobs)]
        if once:
            for job in every:
                job.finish()
        elif not executor.wait_idle(STOP_GRACE_SECONDS):
            log.warning(
                "a background table service is still running; it is abandoned and its plan "
                "is executed again at the next start"
            )
        return result
    finally:
        if server is not None:
            server.stop()
        executor.shutdown()
        for job in [*jobs, *(job for q in queries for job in q.jobs if job not in jobs)]:
            try:
                job.close()
            except OSError as e:  # a lease left behind is taken over at the next start
                log.warning("%s: could not release the table's writer lease: %s", job.name, e)
        for query in queries:
            query.close()


def _reader_lines(configs: list[JobConfig]) -> list[str]:
    """What reads Kafka for the `kafka-arrow` tables: the native reader or the python one
    (`streamer.kafka.consumer`), one line per choice the configs make."""
    choices = {
        str({k.lower(): v for k, v in c.source.options.items()}.get("reader", "auto")).lower()
        for c in configs
        if c.source.format == SourceFormat.KAFKA_ARROW
    }
    return [f"kafka-arrow reads Kafka with the {describe_reader(choice)}" for choice in sorted(choices)]


def _driver_write_lines(configs: list[JobConfig], master: str | None) -> list[str]:
    """Which batches the driver writes itself (`streamer.driver_write`), one line per choice the
    configs make."""
    kafka_arrow = [c for c in configs if c.source.format == SourceFormat.KAFKA_ARROW and not c.transform]
    return sorted({DriverWrites.of(master, c.stream.driver_write_max_records).describe() for c in kafka_arrow})


def _group_name(jobs: list[TableJob]) -> str:
    """A shared query's name: its tables'."""
    names = sorted(job.name for job in jobs)
    return f"tables {names[0]}..{names[-1]} ({len(names)})"


def _metrics_server(configs: list[JobConfig], metrics: Metrics) -> MetricsServer | None:
    """The endpoints, when a config gives their port (the configs agree: `config.load_configs`)."""
    wanted = next(((c, c.metrics.port) for c in configs if c.metrics.port is not None), None)
    if wanted is None:
        return None
    config, port = wanted
    try:
        return MetricsServer(metrics, config.metrics.host, port).start()
    except OSError as e:
        raise StartupError(
            f"{config.config_path}: metrics.port: cannot listen on {config.metrics.host}:{port}: {e}"
        ) from e


class _Runner:
    """Starts the queries (a table's own, and those tables share), waits, and stops them."""

    def __init__(self, spark: SparkSession, jobs: list[TableJob], shared: list[SharedQuery], once: bool):
        self.spark = spark
        self.jobs = jobs  # the tables with a query of their own
        self.shared = shared
        self.once = once
        self.stop_requested = threading.Event()

    @property
    def every_job(self) -> list[TableJob]:
        return [*self.jobs, *(job for q in self.shared for job in q.jobs)]

    def run(self) -> RunResult:
        result = RunResult()
        restore = self._install_signal_handlers()
        until = "until the topics are drained" if self.once else "every {}"
        try:
            for n, job in enumerate(self.jobs, 1):
                job.start(self.spark, self.once)
                log.info(
                    "%s: streaming %s -> %s (%s)",
                    job.name,
                    _topics(job.config),
                    job.config.table.path,
                    until.format(job.config.stream.trigger_interval),
                )
                if n < len(self.jobs) or self.shared:
                    self._wait_for_source(job.query)
            for shared in self.shared:
                query = shared.start(self.spark, self.once)
                log.info(
                    "%s: one query streaming /%s/ -> %d table(s) (%s)",
                    shared.name,
                    shared.topic_pattern(),
                    len(shared.jobs),
                    until.format(shared.trigger_interval),
                )
                self._wait_for_source(query)
            self._wait()
            result.stopped_by_signal = self.stop_requested.is_set()
        finally:
            self._stop_all()
            restore()
        result.tables = [self._outcome(job) for job in self.every_job]
        return result

    def _wait_for_source(self, query: StreamingQuery | None) -> None:
        """Start queries one at a time: Spark gives each query's Python source process a fixed
        time to connect back to the JVM, which several starting at once on a busy driver miss."""
        deadline = time.monotonic() + SOURCE_START_SECONDS
        while query is not None and query.isActive and time.monotonic() < deadline and not self.stop_requested.is_set():
            if not query.status["message"].startswith("Initializing"):
                return
            self.stop_requested.wait(0.2)

    def _wait(self) -> None:
        pending: dict[str, TableJob | SharedQuery] = {job.name: job for job in self.jobs}
        pending.update({q.name: q for q in self.shared})
        while pending and not self.stop_requested.is_set():
            for name, waited in list(pending.items()):
                if waited.query is not None and waited.query.isActive:
                    continue
                del pending[name]
                stop_all = (
                    self._shared_query_ended(waited)
                    if isinstance(waited, SharedQuery)
                    else self._table_query_ended(waited)
                )
                if stop_all:
                    return
            self._await_end(pending, 0.5)

    def _await_end(self, pending: dict[str, TableJob | SharedQuery], seconds: float) -> None:
        """Wait up to `seconds` for the one query still running to end, or a stop request; with
        several running, for the stop request alone."""
        queries = [waited.query for waited in pending.values()]
        if not queries:
            return
        if len(queries) != 1 or queries[0] is None or self.stop_requested.is_set():
            self.stop_requested.wait(seconds)
            return
        with suppress(StreamingQueryException):  # its failure is read when it leaves `pending`
            queries[0].awaitTermination(seconds)  # type: ignore[arg-type]  # typed int, takes a float

    def _table_query_ended(self, job: TableJob) -> bool:
        """Log why a table's own query ended; True when that stops the application."""
        failure = self._failure(job)
        if not failure:
            return False
        job.metrics.query_failed(failure)
        log.error("%s: stopped with an error: %s", job.name, failure)
        query = job.query
        if log.isEnabledFor(logging.DEBUG) and query is not None and query.exception() is not None:
            log.debug("%s: the query's failure in full: %s", job.name, query.exception())
        if job.config.stream.on_failure == QueryFailurePolicy.STOP_APPLICATION:
            log.error("%s: stream.on_failure is stop_application: stopping every table", job.name)
            return True
        return False

    def _shared_query_ended(self, shared: SharedQuery) -> bool:
        """Log why a shared query ended (its tables' own failures the router logged); True when
        that stops the application."""
        router = shared.router
        if router.stop_application is not None:
            log.error(
                "%s: stream.on_failure is stop_application: stopping every table", router.stop_application.job.name
            )
            return True
        failure = self._query_failure(shared)
        if failure:
            log.error("%s: stopped with an error: %s", shared.name, failure)
            for job in shared.jobs:
                if job.name not in router.failures:
                    job.metrics.query_failed(failure)
        return False

    def _query_failure(self, shared: SharedQuery) -> str | None:
        """Why a shared query failed, unless it stopped as asked."""
        if self.stop_requested.is_set() or shared.router.stop_application is not None:
            return None
        exc = shared.query.exception() if shared.query is not None else None
        return query_error_line(str(exc)) if exc is not None else None

    def _stop_all(self) -> None:
        for job in self.jobs:
            if job.query is None or not job.query.isActive:
                continue
            if not job.sink.quiesce(STOP_GRACE_SECONDS):
                self._abandoned(job.name)
            job.query.stop()
        for shared in self.shared:
            if shared.query is None or not shared.query.isActive:
                continue
            if not shared.router.quiesce(STOP_GRACE_SECONDS):
                self._abandoned(shared.name)
            shared.query.stop()

    @staticmethod
    def _abandoned(name: str) -> None:
        log.warning(
            "%s: the batch in progress did not finish within %.0fs; abandoning it (the next run rolls it back)",
            name,
            STOP_GRACE_SECONDS,
        )

    def _failure(self, job: TableJob) -> str | None:
        shared = next((q for q in self.shared if job in q.jobs), None)
        if shared is not None:
            failed = shared.router.failures.get(job.name)
            return failed.error if failed is not None else self._query_failure(shared)
        sink_error = job.sink.failure
        if isinstance(sink_error, StopRequestedError):
            return None
        if sink_error is not None:
            return failure_line(sink_error)
        exc = job.query.exception() if job.query is not None else None
        return query_error_line(str(exc)) if exc is not None else None

    def _outcome(self, job: TableJob) -> TableOutcome:
        totals = job.sink.totals
        error = self._failure(job)
        if error:
            try:
                record_error(job.config.table.path, error, job.config.table.storage_options)
            except OSError as e:  # the storage fault that stopped the table, often
                log.warning("%s: could not record the error with the table: %s", job.name, e)
        last_instant = totals.last_instant or _last_deltacommit(job)
        failed = totals.failed if error else None
        return TableOutcome(
            name=job.name,
            batches=totals.batches,
            records=totals.records,
            bad=totals.bad,
            last_instant=last_instant,
            error=error,
            earlier=last_instant is not None and totals.last_instant is None,
            failed_batch=failed.what if failed else None,
            failed_records=failed.records if failed else 0,
            failed_bad=failed.bad if failed else 0,
        )

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum, _frame):
            log.info("received %s: finishing the batches in progress, then stopping", signal.Signals(signum).name)
            self.stop_requested.set()

        for s in previous:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore


def _last_deltacommit(job: TableJob) -> str | None:
    """The table's last completed deltacommit, whichever run made it."""
    try:
        done = job.table.timeline().completed("deltacommit")
    except OSError:  # the storage fault that stopped the table, often
        return None
    return done[-1].timestamp if done else None


def _topics(config: JobConfig) -> str:
    s = config.source
    return ",".join(s.topics) if s.topics else f"/{s.topic_pattern}/"
