"""The machine and software a result came from, stored with it: numbers without them are not
comparable from one run to another (the load average tells whether something else ran too)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

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
