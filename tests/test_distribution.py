"""How the suite spreads its tests over the workers and keeps the list of where its time goes
(`tests.support.distribution`, `tests.support.durations`)."""

from __future__ import annotations

import re

import pytest

from tests.support.distribution import plain_nodeid, spread
from tests.support.durations import DOC, REPO, RunDurations, listed, render, write_docs

pytestmark = pytest.mark.unit

pytest_plugins = ["pytester"]

MODULES = {
    "test_light": "def test_a(): pass\ndef test_b(): pass\n",
    "test_heavy": "def test_slow(): pass\n",
    "test_reads_hudi": "def test_read(hudi_judge): pass\n",
    "test_syncs": "def test_sync(hive_metastore): pass\ndef test_plain(): pass\n",
}
CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def hudi_judge():
    return None

@pytest.fixture(scope="session")
def hive_metastore():
    return None
"""


def test_modules_sharing_a_heavy_server_are_one_unit_of_work_and_the_heaviest_unit_comes_first(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**MODULES)
    items = pytester.getitems(pytester.path)
    seconds = {"test_heavy.py::test_slow": 90.0, "test_reads_hudi.py::test_read": 30.0}
    monkeypatch.setattr("tests.support.distribution.listed", lambda: seconds)

    spread(items)

    units = [(item.nodeid, item.get_closest_marker("xdist_group").args[0]) for item in items]
    assert units == [
        ("test_heavy.py::test_slow", "test_heavy"),  # 90 s
        ("test_reads_hudi.py::test_read", "apache-hudi"),  # 30 s and the module beside it, 2 s
        ("test_syncs.py::test_sync", "apache-hudi"),
        ("test_syncs.py::test_plain", "apache-hudi"),  # a module is never split
        ("test_light.py::test_a", "test_light"),  # 2 s: unlisted tests count 1 s each
        ("test_light.py::test_b", "test_light"),
    ]


def test_on_two_workers_each_unit_of_work_runs_whole_on_one_worker(pytester, monkeypatch):
    """A real pytest-xdist run with the suite's grouping: a module's tests, and the modules that
    share a heavy server, never run on two workers."""
    pytester.makeconftest(
        CONFTEST
        + """
from tests.support.distribution import spread

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    spread(items)
"""
    )
    more = "".join(f"def test_more_{n}(): pass\n" for n in range(4))  # enough tests to spread
    pytester.makepyfile(**{name: source + more for name, source in MODULES.items()})
    monkeypatch.setenv("PYTHONPATH", str(REPO))

    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "-v")

    result.assert_outcomes(passed=22)
    workers = {}
    for match in re.finditer(r"^\[(gw\d)\] .*PASSED (test_\w+)\.py::", result.stdout.str(), re.MULTILINE):
        workers.setdefault(match[2], set()).add(match[1])
    assert set(workers) == set(MODULES) and all(len(w) == 1 for w in workers.values()), workers
    assert workers["test_reads_hudi"] == workers["test_syncs"]


def test_a_reported_node_id_loses_the_unit_xdist_appends_but_not_a_parameter():
    assert plain_nodeid("tests/e2e/test_s3.py::test_kill@tests.e2e.test_s3") == "tests/e2e/test_s3.py::test_kill"
    assert plain_nodeid("tests/t.py::test_url[a@b]") == "tests/t.py::test_url[a@b]"
    assert plain_nodeid("tests/t.py::test_url[a@b]@unit") == "tests/t.py::test_url[a@b]"


def test_the_docs_list_reads_back_what_a_run_recorded(tmp_path):
    run = RunDurations(wall_seconds=125.0, workers=2)
    run.add_report("tests/a.py::test_slow", "setup", 2.0)
    run.add_report("tests/a.py::test_slow", "call", 40.5)
    run.add_report("tests/b.py::test_quick[x]", "call", 0.25)
    run.add_fixture("kafka_broker_handle", 3.0)
    run.add_fixture("kafka_broker_handle", 2.5)
    doc = tmp_path / "architecture.md"
    doc.write_text("# Tests\n\n<!-- durations: begin -->\nold\n<!-- durations: end -->\n\n## Next\n")

    write_docs(run, doc)

    assert listed(doc) == {"tests/a.py::test_slow": 42.5, "tests/b.py::test_quick[x]": 0.2}
    text = doc.read_text()
    assert "2 tests in 2 min 5 s of pytest on 2 worker(s)" in text and "old" not in text
    assert "| `kafka_broker_handle` | 2 | 5.5 |" in text and text.endswith("\n\n## Next\n")
    assert render(run) in text


def test_every_test_the_docs_list_is_a_test_of_the_suite():
    """The list stays current: a test renamed or removed must leave it too."""
    listed_tests = listed(DOC)
    assert len(listed_tests) >= 25
    missing = []
    for nodeid in listed_tests:
        path, name = nodeid.split("::", 1)
        function = re.sub(r"\[.*\]$", "", name)
        source = REPO / path
        if not source.exists() or not re.search(rf"^def {function}\(", source.read_text(), re.MULTILINE):
            missing.append(nodeid)
    assert missing == [], "run `python -m tests.support.durations` after a whole run"
