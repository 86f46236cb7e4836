"""The machine and software a result came from, stored with it: numbers without them are not
comparable from one run to another (the load average tells whether something else ran too)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

PACKAGES = ("pyspark", "pyarrow", "deltalake", "confluent-kafka", "psutil")


def facts() -> dict:
    return {
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        **{name: _package_version(name) for name in PACKAGES},
    }


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def file_create_micros(directory: Path, files: int = 1_600, directories: int = 400) -> float:
    """Microseconds to create one small file, `files` of them spread over `directories` new
    directories under `directory`, as a micro-batch at 400 partitions creates its log files.
    What the kernel pays varies by orders of magnitude on some file systems (on ext4 without a
    journal, inodes freed in the last minutes are skipped one by one), so it is measured beside
    each run. The files stay: deleting them would slow what comes next."""
    paths = [directory / f"d{i % directories}" / f".f{i}.log" for i in range(files)]
    for path in {p.parent for p in paths}:
        path.mkdir(parents=True)
    started = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"\0" * 1024)
        os.close(fd)
    return (time.perf_counter() - started) / files * 1e6
