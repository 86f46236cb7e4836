"""How long the suite takes, and where: the slowest tests and the fixtures that start servers,
recorded by every full run and kept in docs/architecture.md ("Where the suite's time goes").

The list in the docs is also what the suite orders its work by (`tests.support.distribution`):
the slowest groups start first, so that no long test is left for the end of a parallel run.
`python -m tests.support.durations` writes the last full run's list into the docs.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
RECORD = REPO / ".cache" / "suite-durations.json"
BEGIN = "<!-- durations: begin -->"
END = "<!-- durations: end -->"
#: How many of the slowest tests the docs list.
LISTED = 50
#: The fixtures the docs list: those whose starts took this long in all.
SHOWN_FIXTURE_SECONDS = 0.5
_ROW = re.compile(r"^\| (?P<seconds>[\d.]+) \| (?:[\d.]+ \| ){2}`(?P<test>[^`]+)` \|$")


@dataclass
class RunDurations:
    """One run's times: each test's setup, call and teardown, and the run's set-up outside tests."""

    tests: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    fixtures: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    wall_seconds: float = 0.0
    workers: int = 0

    def add_report(self, nodeid: str, when: str, seconds: float) -> None:
        self.tests[nodeid][when] = seconds

    def add_fixture(self, name: str, seconds: float) -> None:
        self.fixtures[name].append(seconds)

    def total(self, nodeid: str) -> float:
        return sum(self.tests[nodeid].values())

    def slowest(self, count: int = LISTED) -> list[str]:
        return sorted(self.tests, key=self.total, reverse=True)[:count]

    def save(self, path: Path = RECORD) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "wall_seconds": self.wall_seconds,
            "workers": self.workers,
            "tests": self.tests,
            "fixtures": self.fixtures,
        }
        path.write_text(json.dumps(record, indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: Path = RECORD) -> RunDurations:
        record = json.loads(path.read_text())
        run = cls(wall_seconds=record["wall_seconds"], workers=record["workers"])
        for nodeid, phases in record["tests"].items():
            run.tests[nodeid].update(phases)
        for name, times in record["fixtures"].items():
            run.fixtures[name].extend(times)
        return run


def is_whole_run(config: pytest.Config) -> bool:
    """True when the run is the whole suite: its test paths, no marker or keyword chosen."""
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.markexpr
        and not config.option.keyword
    )


class FixtureTimer:
    """A pytest plugin that adds each session and module fixture's setup time to a run."""

    def __init__(self, run: RunDurations):
        self.run = run

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        started = time.monotonic()
        yield
        if fixturedef.scope in ("session", "module"):
            self.run.add_fixture(fixturedef.argname, time.monotonic() - started)


def render(run: RunDurations) -> str:
    """The docs' section: the run's totals, the set-up outside tests, the slowest tests."""
    minutes, seconds = divmod(round(run.wall_seconds), 60)
    in_tests = sum(run.total(t) for t in run.tests)
    lines = [
        BEGIN,
        f"The last full run recorded: {len(run.tests):,} tests in {minutes} min {seconds} s of pytest on "
        f"{run.workers or 1} worker(s), {in_tests / 60:.1f} min inside tests (setup, call and teardown "
        "added up over the workers).",
        "",
        "Session and module fixtures, the servers, sessions and job runs that tests share (the seconds of "
        "all their starts, each inside the setup of the test that first needs it; servers also start "
        "in parallel on the two workers):",
        "",
        "| fixture | starts | seconds, all starts |",
        "| --- | ---: | ---: |",
    ]
    shown = [(name, times) for name, times in run.fixtures.items() if sum(times) >= SHOWN_FIXTURE_SECONDS]
    for name, times in sorted(shown, key=lambda item: -sum(item[1])):
        lines.append(f"| `{name}` | {len(times)} | {sum(times):.1f} |")
    lines += [
        "",
        f"The {LISTED} slowest tests:",
        "",
        "| seconds | setup | call | `test` |",
        "| ---: | ---: | ---: | --- |",
    ]
    for nodeid in run.slowest():
        phases = run.tests[nodeid]
        lines.append(
            f"| {run.total(nodeid):.1f} | {phases.get('setup', 0):.1f} | {phases.get('call', 0):.1f} | `{nodeid}` |"
        )
    lines.append(END)
    return "\n".join(lines)


def listed(doc: Path = DOC) -> dict[str, float]:
    """The slowest tests as the docs list them: node id -> seconds."""
    section = _section(doc.read_text())
    return {m["test"]: float(m["seconds"]) for m in map(_ROW.match, section.splitlines()) if m}


def write_docs(run: RunDurations, doc: Path = DOC) -> None:
    text = doc.read_text()
    doc.write_text(text.replace(_section(text), render(run)))


def _section(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC.name} has no durations section ({BEGIN} ... {END})")
    return text[start : end + len(END)]


if __name__ == "__main__":
    if not RECORD.exists():
        sys.exit(f"no run recorded at {RECORD}: run the whole suite first (make test)")
    write_docs(RunDurations.load())
    print(f"{DOC.relative_to(REPO)}: the durations of the run recorded in {RECORD.relative_to(REPO)}")
