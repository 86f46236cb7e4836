"""Fixtures of the tests Apache Hudi judges."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def conformance_matrix(hudi_judge, terminal_summary):
    """Table state x reader, filled by the tests Apache Hudi judges; printed at the end of the run."""
    from tests.support.conformance_matrix import Matrix

    matrix = Matrix()
    yield matrix
    if matrix.rows:
        terminal_summary.extend(matrix.lines(hudi_judge.versions))
