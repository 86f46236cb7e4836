"""The layer rules of pyproject.toml's [tool.importlinter]: the streamer uses the engine, never
the other way round; in the engine only `table.spark` imports Spark; no package imports one that
imports it back. And the engine, imported whole without `table.spark`, loads no Spark at all."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import table

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.unit


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_importing_the_engine_without_table_spark_loads_no_pyspark():
    modules = sorted(
        m.name
        for m in pkgutil.walk_packages(table.__path__, "table.")
        if not (m.name == "table.spark" or m.name.startswith("table.spark."))
    )
    assert "table.mor_table" in modules and "table.write.writer" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    assert _printed_by(code) == "[]"


def test_the_read_sources_import_without_pandas():
    """Spark plans a Python data source's reads in processes of their own, which import the
    source's module and nothing more: pandas (about 37 MiB a process) is left to the workers."""
    code = "import sys\nimport streamer.kafka.datasource, table.spark.datasource\nprint('pandas' in sys.modules)\n"
    assert _printed_by(code) == "False"


def _printed_by(code: str) -> str:
    """What `code` prints, run in a fresh interpreter: what it imports is all it has loaded."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return result.stdout.strip()
