"""What one path measured, and its peak memory, taken from outside its process.

Every path runs in a process of its own, so its peak RSS is its own (not the benchmark's, nor
a previous path's JVM), and `run_measured` samples that process tree with psutil: the Python
driver, the JVM it starts, and the Python workers the JVM forks (counted apart, since they are
what a Python-heavy path adds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SAMPLE_SECONDS = 0.1


@dataclass
class PathResult:
    """One path's numbers. `records` and `seconds` cover the upsert batches only (the initial
    load is `load_seconds`), unless the path has no load, like the Kafka consumption ceiling."""

    name: str
    label: str
    records: int
    seconds: float
    batch_seconds: list[float] = field(default_factory=list)
    load_seconds: float | None = None
    table_rows: int | None = None
    expected_rows: int | None = None
    peak_rss: dict[str, int] = field(default_factory=dict)  # bytes: total, driver, jvm, workers; pss
    details: dict = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def batch_percentile(self, q: int) -> float | None:
        """The q-th percentile of per-batch latency (nearest rank, so p95 of few batches is the
        slowest one rather than an interpolation)."""
        if not self.batch_seconds:
            return None
        ordered = sorted(self.batch_seconds)
        return ordered[min(len(ordered) - 1, max(0, -(-q * len(ordered) // 100) - 1))]

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "records_per_second": self.records_per_second,
            "p50_batch_seconds": self.batch_percentile(50),
            "p95_batch_seconds": self.batch_percentile(95),
            "mean_batch_seconds": statistics.fmean(self.batch_seconds) if self.batch_seconds else None,
        }

    @classmethod
    def from_json(cls, obj: dict) -> PathResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in obj.items() if k in names})


#: The roles of a path's process tree: the Python driver, the JVM it starts, the Python workers
#: the JVM forks.
ROLES = ("driver", "jvm", "workers")


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds each role's processes had used by `at` (seconds since the epoch); one that
    exited counts as of the last sample that saw it."""

    at: float
    seconds: dict[str, float]


def cpu_between(samples: list[CpuSample], start: float, end: float) -> dict[str, float]:
    """CPU seconds each role used from `start` to `end` (epoch seconds), by the samples nearest
    them."""
    if not samples:
        return {}
    first = min(samples, key=lambda s: abs(s.at - start))
    last = min(samples, key=lambda s: abs(s.at - end))
    return {role: last.seconds[role] - first.seconds[role] for role in ROLES}


class PeakRss:
    """Samples a process tree every 100 ms: the peak RSS of each role, the peak of the tree's
    summed PSS every `PSS_EVERY` samples, and each role's CPU time (`cpu`). Python workers forked
    from one daemon share its pages: the RSS sum counts those once per worker, the PSS sum once."""

    PSS_EVERY = 5

    def __init__(self, root_pid: int):
        self.root = psutil.Process(root_pid)
        self.peak = {"total": 0, **dict.fromkeys(ROLES, 0), "pss": 0}
        self.cpu: list[CpuSample] = []
        self._cpu_seconds: dict[int, tuple[str, float]] = {}  # pid -> its role and CPU seconds, last seen
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):  # the root exited or a process vanished between listing and reading
                self._sample()
            self._stop.wait(SAMPLE_SECONDS)

    def _sample(self) -> None:
        procs = {}  # pid -> (parent pid, is a JVM, rss, CPU seconds)
        for proc in [self.root, *self.root.children(recursive=True)]:
            try:
                cpu = proc.cpu_times()
                procs[proc.pid] = (proc.ppid(), proc.name() == "java", proc.memory_info().rss, cpu.user + cpu.system)
            except psutil.NoSuchProcess:
                continue
        now = dict.fromkeys(self.peak, 0)
        if self._samples % self.PSS_EVERY == 0:
            now["pss"] = sum(_pss(pid) for pid in procs)
        self._samples += 1
        for pid, (ppid, is_jvm, rss, cpu_seconds) in procs.items():
            parent = ppid
            while parent in procs and not procs[parent][1]:
                parent = procs[parent][0]
            role = "jvm" if is_jvm else "workers" if parent in procs else "driver"
            now[role] += rss
            now["total"] += rss
            self._cpu_seconds[pid] = (role, cpu_seconds)
        for role, rss in now.items():
            self.peak[role] = max(self.peak[role], rss)
        used = dict.fromkeys(ROLES, 0.0)
        for role, cpu_seconds in self._cpu_seconds.values():
            used[role] += cpu_seconds
        self.cpu.append(CpuSample(time.time(), used))


def _pss(pid: int) -> int:
    """Proportional set size in bytes (0 for a process gone meanwhile)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_measured(
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    stop_when: Callable[[], bool] | None = None,
) -> tuple[int, float, dict[str, int]]:
    """Run a command from the repo root with its output in `log_path`; returns its exit code,
    wall seconds and the peak RSS per role of its process tree. A command that runs until
    stopped (a continuous job) gets SIGTERM once `stop_when()` is true."""
    code, wall, rss, _ = run_sampled(argv, log_path, env, timeout, stop_when)
    return code, wall, rss


def run_sampled(
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    stop_when: Callable[[], bool] | None = None,
) -> tuple[int, float, dict[str, int], list[CpuSample]]:
    """`run_measured`, with its process tree's CPU time by role as sampled."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable, **(env or {})}
    with open(log_path, "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        with PeakRss(proc.pid) as rss:
            deadline = started + timeout
            while stop_when is not None and proc.poll() is None and time.monotonic() < deadline:
                if stop_when():
                    proc.send_signal(signal.SIGTERM)
                    break
                time.sleep(1)
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        return code, time.monotonic() - started, rss.peak, rss.cpu
