"""The code's lint, format and types, as configured in pyproject.toml ([tool.ruff], [tool.mypy]):
each check runs over the whole clone and reports nothing. `make lint` runs the same commands, and
`make fix` applies the formatter and ruff's safe fixes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.unit


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_nothing_to_lint():
    result = _run(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted_as_ruff_formats_it():
    result = _run(str(BIN / "ruff"), "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_no_type_errors():
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout
