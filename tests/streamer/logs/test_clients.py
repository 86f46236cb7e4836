"""Spark's Python workers: their log set-up (`streamer.logs.clients.configure_worker_logging`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _worker_raising(error: str) -> subprocess.CompletedProcess:
    """A fresh Python process, set up as the source sets up a Spark worker, that fails with `error`."""
    script = f"from streamer.logs.clients import configure_worker_logging\nconfigure_worker_logging()\nraise {error}\n"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_a_worker_whose_jvm_has_gone_ends_without_a_traceback_and_other_failures_keep_theirs():
    for gone in ("BrokenPipeError(32, 'Broken pipe')", "ConnectionResetError(104, 'reset')", "EOFError()"):
        ended = _worker_raising(gone)
        assert ended.returncode == 1 and ended.stderr == "", ended.stderr
    failed = _worker_raising("ValueError('offsets out of order')")
    assert failed.returncode == 1
    assert "Traceback (most recent call last)" in failed.stderr
    assert "ValueError: offsets out of order" in failed.stderr
