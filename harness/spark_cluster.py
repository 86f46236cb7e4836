"""A Spark standalone cluster on loopback: a master and workers, each its own JVM, run from the jars
of the installed PySpark (its package directory is a Spark home).

    with SparkCluster(work_dir, workers=2) as cluster:
        spark-submit --master cluster.master_url ...
        cluster.workers[0].lose()    # the node is gone: the worker and every process it started
        cluster.workers[0].lose_mid_task()    # the same, if a task runs there now

Each process logs to `<work_dir>/<name>.log`; workers keep their executors' directories (stdout
and stderr of each executor) under `<work_dir>/<name>-work/`. `start` returns once the master
lists every worker as alive; `stop` ends what is left by pid. With `die_with_parent` (the default
when `setpriv` exists) the kernel kills the master and workers if the starting process dies, and
an executor exits when its worker does, so a crashed test run leaves no cluster behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pyspark

from harness.errors import HarnessError
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import java_executable

SPARK_HOME = Path(pyspark.__file__).parent
#: The master and worker daemons only schedule: a small heap and the quick compiler start them fast.
DAEMON_JVM_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


class ClusterStartError(HarnessError):
    """The master or a worker did not come up; the message holds the end of its log."""


class _Daemon:
    """One JVM of the cluster, started from Spark's jars, its output in `log_path`."""

    def __init__(self, name: str, work_dir: Path, die_with_parent: bool):
        self.name = name
        self.log_path = work_dir / f"{name}.log"
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.started().pid

    def started(self) -> subprocess.Popen:
        """The JVM's process, once `spawn` started it."""
        if self.proc is None:
            raise HarnessError(f"the {self.name} was not started")
        return self.proc

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, main: str, *args: str) -> None:
        command = [java_executable(), *DAEMON_JVM_OPTIONS, "-cp", str(SPARK_HOME / "jars" / "*"), main, *args]
        if self.die_with_parent:
            command = ["setpriv", "--pdeathsig", "KILL", "--", *command]
        env = node_environment()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, close_fds=True
            )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; the processes it started go with it."""
        if self.proc is None:
            return
        children = _descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        _kill(children)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


#: An executor's log lines that start and end a task attempt, by its task id.
_TASK_STARTED = re.compile(r"Executor: Running task \S+ in stage \S+ \(TID (\d+)\)")
_TASK_ENDED = re.compile(
    r"Executor: (?:Finished|Executor killed) task \S+ in stage \S+ \(TID (\d+)\)"
    r"|Executor: Exception in task \S+ in stage \S+ \(TID (\d+)\)"
)


class Worker(_Daemon):
    def __init__(self, name: str, work_dir: Path, die_with_parent: bool):
        super().__init__(name, work_dir, die_with_parent)
        self.directory = work_dir / f"{name}-work"
        self.port: int | None = None

    def executor_pids(self) -> list[int]:
        """The executor JVMs this worker runs now (its Java children)."""
        return [p.pid for p in _children(self.pid) if "CoarseGrainedExecutorBackend" in " ".join(_cmdline(p))]

    def running_tasks(self) -> set[int]:
        """The ids of the tasks its executors run now, as their logs (`<app>/<executor>/stderr`
        under its work directory) tell: started, and not finished, killed or failed yet."""
        started: set[int] = set()
        ended: set[int] = set()
        for log in self.directory.glob("*/*/stderr"):
            text = log.read_text(errors="replace")
            started.update(int(tid) for tid in _TASK_STARTED.findall(text))
            ended.update(int(a or b) for a, b in _TASK_ENDED.findall(text))
        return started - ended

    def lose(self) -> None:
        """The node is gone: SIGKILL the worker and every process below it (its executors and their
        Python workers), which an executor would otherwise outlive until it noticed."""
        proc = self.started()
        below = _descendants(proc.pid)
        proc.kill()
        proc.wait(10)
        _kill(below)

    def lose_mid_task(self, settle: float = 0.5) -> bool:
        """Lose the node if one of its executors is in the middle of a task, and say whether it
        was. The executors and their Python workers are frozen (SIGSTOP) first, so no task can
        finish between the look at their logs and the kill; `settle` gives the worker time to copy
        what they had logged. When no task was running they are thawed and go on."""
        below = _descendants(self.pid)
        _signal(below, signal.SIGSTOP)
        time.sleep(settle)
        if self.running_tasks():
            self.lose()
            return True
        _signal(below, signal.SIGCONT)
        return False


class SparkCluster:
    """A standalone master and `workers` workers of `cores` cores and `memory` each, on `host`."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        host: str = "127.0.0.1",
        startup_timeout: float = 90.0,
        die_with_parent: bool | None = None,
    ):
        self.work_dir = Path(work_dir)
        self.host = host
        self.cores = cores
        self.memory = memory
        self.startup_timeout = startup_timeout
        die = shutil.which("setpriv") is not None if die_with_parent is None else die_with_parent
        self.master = _Daemon("master", self.work_dir, die)
        self.workers = [Worker(f"worker-{n}", self.work_dir, die) for n in range(1, workers + 1)]
        self.port: int | None = None
        self.webui_port: int | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def start(self) -> SparkCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_master()
            for worker in self.workers:
                self._start_worker(worker)
            self._wait(
                lambda state: len(self.alive_workers(state)) == len(self.workers),
                f"{len(self.workers)} workers registered",
                *self.workers,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Workers first (each ends its executors), then the master."""
        for daemon in (*self.workers, self.master):
            daemon.stop()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def state(self) -> dict:
        """The master's view of the cluster: its web UI's JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://{self.host}:{self.webui_port}/json", timeout=5) as response:
            return json.load(response)

    def alive_workers(self, state: dict | None = None) -> list[dict]:
        return [w for w in (state or self.state())["workers"] if w["state"] == "ALIVE"]

    def _start_master(self) -> None:
        self.port, self.webui_port = free_port(self.host), free_port(self.host)
        self.master.spawn(
            "org.apache.spark.deploy.master.Master",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        )
        self._wait(lambda state: state.get("status") == "ALIVE", "the master alive", self.master)

    def _start_worker(self, worker: Worker) -> None:
        worker.directory.mkdir(parents=True, exist_ok=True)
        worker.port = free_port(self.host)
        worker.spawn(
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host",
            self.host,
            "--port",
            str(worker.port),
            "--webui-port",
            str(free_port(self.host)),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(worker.directory),
        )

    def _wait(self, condition, what: str, *daemons: _Daemon) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            for daemon in (self.master, *daemons):
                if not daemon.is_running():
                    raise ClusterStartError(
                        f"{daemon.name} exited while waiting for {what}; {daemon.log_path}:\n{daemon.log_tail()}"
                    )
            try:
                if condition(self.state()):
                    return
            except OSError:  # the master's web UI is not listening yet
                pass
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"no {what} after {self.startup_timeout:.0f}s; {self.master.log_path}:\n{self.master.log_tail()}"
                )
            time.sleep(0.3)


def node_environment() -> dict[str, str]:
    """The environment of a daemon, and so of the executors it starts: this machine's, less the
    Python settings of the process that starts the cluster (a node knows nothing of them), with
    the Spark home its executors are launched from."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYSPARK_")}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_SCALA_VERSION": "2.13"}


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _signal(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signum)


def _kill(processes: list[psutil.Process]) -> None:
    _signal(processes, signal.SIGKILL)
    psutil.wait_procs(processes, timeout=10)
