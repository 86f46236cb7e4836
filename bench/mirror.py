"""Scenario `mirror`: many tables in one streaming query, against few tables and against one.

A mirror file makes a table of every Debezium topic `<prefix>.<schema>.<table>`, and its tables
share one streaming query (`streamer.shared_query`): each micro-batch plans every topic once and
writes a deltacommit per table that has records. What that costs is what this scenario shows:
the time to the first batch, a batch that touches a few of many tables, the same records over
many tables or in one, and the memory of the job.

The topics hold Kafka Connect JSON change events with schemas, as Debezium's PostgreSQL connector
writes them (`streamer.sandbox.debezium_events`), one partition per topic, all produced before
anything is timed. Each mirror has topics of its own prefix:

- `wide`: `tables` tables (100) sharing `records` inserts;
- `narrow`: the first `changed` (10) of those tables, with the same rows;
- `single`: one table holding all `records`;
- `stretch`: `stretch_tables` (1,000) tables of 100 inserts each.

Every run is `streamer run <mirror.yaml> --once` in its own process (local[2], services off,
`--log-level DEBUG`), its peak memory sampled from outside (`bench.measure`) and its times read
from its log. After the initial runs come `rounds` of changes (half updates, half inserts) to the
first `changed` topics of `wide` and of `narrow`, each round taken by a --once run of each mirror
in turn.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from bench import broker, spark, streaming
from bench.measure import PathResult, run_measured
from bench.report import Check, Section
from bench.workload import W1
from streamer.sandbox.debezium_events import Record, SourceTable
from table import MorTable

COLUMNS = [("id", "int64"), ("region", "string"), ("name", "string"), ("balance", "double"), ("visits", "int64")]
REGIONS = ("emea", "apac", "amer")
FIRST_LSN = 1_000


@dataclass(frozen=True)
class MirrorSize:
    tables: int  # of the wide mirror
    changed: int  # tables a batch of changes touches; the narrow mirror's tables
    records: int  # inserts over the wide mirror's tables, and in the single table
    changes: int  # per changed table and round
    rounds: int
    stretch_tables: int  # 0: no stretch run
    stretch_records: int = 100  # per stretch table


SIZES = {
    "quick": MirrorSize(tables=20, changed=2, records=10_000, changes=500, rounds=1, stretch_tables=0),
    "full": MirrorSize(tables=100, changed=10, records=100_000, changes=1_000, rounds=3, stretch_tables=1_000),
}

# The lines of a run's log that time it (`streamer.sink.BatchReport.line`, `streamer.app`).
LOG_TIME = r"^(\S+ \S+)"
TABLE_BATCH = re.compile(
    LOG_TIME + r" INFO streamer\.sink: (\S+) batch (\d+): ([\d,]+) records, .* -> deltacommit \S+ in ([\d.]+)s"
)
TABLE_PHASES = re.compile(r"DEBUG streamer\.sink: (\S+) batch (\d+) phases: (.*?)(?:; freshness .*)?$")
TABLE_PREPARED = re.compile(LOG_TIME + r" INFO streamer\.mirror: \S+: table \S+ mirrors ", re.MULTILINE)
QUERY_STARTED = re.compile(LOG_TIME + r" INFO streamer\.app: .*: one query streaming ", re.MULTILINE)

NOTES = [
    "every run is `streamer run <mirror.yaml> --once` in its own process (local[2], table services off, "
    "one partition per topic); the topics hold Debezium change events (Connect JSON with schemas), "
    "produced before anything is timed. Tables are unpartitioned, with the mirror's default buckets.",
    "start: from the command's start (Python, Spark's JVM, every table prepared: its topic's first event "
    "read, its table created or loaded) to the log line of the shared query starting ('query'), and to "
    "the start of the first table's write in the first batch ('first write', the batch's planning "
    "included).",
    "stream s: from the query's start to the last table's commit of the run; 'planning' up to the first "
    "table's write (the batch planned over every topic, the router's split), 'writing' the rest: each "
    "table's write and commit, the router's few at a time. 'tables' own seconds' sums the sink lines' "
    "seconds. records/s of an initial run are its records over stream s; 'x ours' is against the single "
    "table; 'p50 batch s' is a table's part of a batch.",
    "a batch of changes: half updates of rows the table holds, half inserts, to the first tables of the "
    "wide and the narrow mirror, taken by a --once run of each in turn, `rounds` times; its seconds are "
    "stream s (the median over rounds), and the cost ratio is the wide mirror's over the narrow one's.",
    "peak PSS: summed over the job's process tree (driver, JVM, Python workers), the peak over the mirror's runs. "
    "'load average after': the machine's over the minute before a run ended; other work on it slows a run.",
]


@dataclass(frozen=True)
class TableBatch:
    """One table's part of a micro-batch, as its sink logged it."""

    table: str
    ended: datetime
    records: int
    seconds: float
    phases: dict[str, float]

    @property
    def started(self) -> datetime:
        return self.ended - timedelta(seconds=self.seconds)


@dataclass
class Run:
    """One `streamer run --once` of a mirror."""

    started: datetime
    wall: float
    peak: dict[str, int]
    first_table_prepared: datetime
    query_started: datetime
    batches: list[TableBatch]
    load_average: float  # the machine's, over the minute before the run ended: other work slows a run

    @property
    def records(self) -> int:
        return sum(b.records for b in self.batches)

    @property
    def to_query(self) -> float:
        return (self.query_started - self.started).total_seconds()

    @property
    def to_first_write(self) -> float:
        return (self.first_write - self.started).total_seconds()

    @property
    def to_tables(self) -> float:
        """From the command's start to the first table prepared: Python and Spark's JVM."""
        return (self.first_table_prepared - self.started).total_seconds()

    @property
    def stream_seconds(self) -> float:
        return (self.last_commit - self.query_started).total_seconds()

    @property
    def planning_seconds(self) -> float:
        """From the query's start to its first table write: the batch planned over every topic."""
        return (self.first_write - self.query_started).total_seconds()

    @property
    def writing_seconds(self) -> float:
        return (self.last_commit - self.first_write).total_seconds()

    @property
    def table_seconds(self) -> float:
        """The tables' own batch seconds, summed (the router writes a few tables at once)."""
        return sum(b.seconds for b in self.batches)

    @property
    def first_write(self) -> datetime:
        return min(b.started for b in self.batches)

    @property
    def last_commit(self) -> datetime:
        return max(b.ended for b in self.batches)


@dataclass
class Mirror:
    """A mirror file over topics of its own prefix (its name), the rows they hold, and its runs."""

    name: str
    work: Path
    bootstrap: str
    tables: list[SourceTable]
    held: dict[str, int] = field(default_factory=dict)  # rows inserted so far, by table
    lsn: int = FIRST_LSN
    runs: list[Run] = field(default_factory=list)

    @classmethod
    def create(cls, name: str, work: Path, bootstrap: str, tables: int) -> Mirror:
        source = [SourceTable("public", f"t{n:04d}", COLUMNS, ("id",)) for n in range(tables)]
        mirror = cls(name, work / name, bootstrap, source)
        mirror.work.mkdir(parents=True)
        broker.create_topics(bootstrap, [t.topic(name) for t in source], partitions=1)
        mirror.config_path.write_text(
            yaml.safe_dump(
                {
                    "mirror": {"topic_prefix": name},
                    "table": {"name": "{schema}_{table}", "path": str(mirror.work / "lake" / "{table}")},
                    "source": {"bootstrap_servers": bootstrap},
                    "services": streaming.SERVICES_OFF,
                },
                sort_keys=False,
            )
        )
        return mirror

    @property
    def config_path(self) -> Path:
        return self.work / f"{self.name}.yaml"

    def insert(self, per_table: int) -> None:
        """`per_table` new rows in each table."""
        broker.produce_records(self.bootstrap, {t.topic(self.name): self._inserts(t, per_table) for t in self.tables})

    def change(self, per_table: int, tables: int) -> None:
        """`per_table` changes in each of the first `tables` tables: updates of rows held, then
        as many inserts."""
        records = {}
        for t in self.tables[:tables]:
            updates = [t.update(_row(i, version=self.lsn), self._next_lsn()) for i in range(per_table // 2)]
            records[t.topic(self.name)] = updates + self._inserts(t, per_table - len(updates))
        broker.produce_records(self.bootstrap, records)

    def run(self) -> Run:
        """`streamer run --once` of the mirror, measured."""
        log_path = self.work / f"run-{len(self.runs)}.log"
        started = datetime.now()
        code, wall, peak = run_measured(streaming.command(self.config_path), log_path)
        log = log_path.read_text()
        if code != 0:
            raise RuntimeError(f"streamer run exited {code}; log {log_path}:\n" + "\n".join(log.splitlines()[-30:]))
        run = Run(
            started,
            wall,
            peak,
            _first_time(TABLE_PREPARED, log),
            _first_time(QUERY_STARTED, log),
            _batches(log),
            os.getloadavg()[0],
        )
        self.runs.append(run)
        print(
            f"  {self.name}: {run.records:,} records into {len(run.batches)} table(s); query after {run.to_query:.1f}s, "
            f"stream {run.stream_seconds:.1f}s, whole run {run.wall:.1f}s, peak PSS {peak['pss'] / 2**20:,.0f} MB, "
            f"load {run.load_average:.1f}",
            flush=True,
        )
        return run

    def rows(self) -> int:
        """The rows its tables hold, read back."""
        lake = self.work / "lake"
        return sum(MorTable.load(str(lake / t.name)).snapshot(columns=["id"]).num_rows for t in self.tables)

    def _inserts(self, table: SourceTable, count: int) -> list[Record]:
        first = self.held.get(table.name, 0)
        self.held[table.name] = first + count
        return [table.insert(_row(i, version=0), self._next_lsn()) for i in range(first, first + count)]

    def _next_lsn(self) -> int:
        self.lsn += 8
        return self.lsn


def _row(row_id: int, version: int) -> dict:
    return {
        "id": row_id,
        "region": REGIONS[row_id % len(REGIONS)],
        "name": f"name-{row_id}-{version}",
        "balance": row_id % 10_000 / 100,
        "visits": version,
    }


def _first_time(line: re.Pattern[str], log: str) -> datetime:
    found = line.search(log)
    if found is None:
        raise RuntimeError(f"no line /{line.pattern}/ in the job's log")
    return _time(found[1])


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f")


def _batches(log: str) -> list[TableBatch]:
    phases = {}
    for m in map(TABLE_PHASES.search, log.splitlines()):
        if m:
            phases[(m[1], m[2])] = {
                name: float(seconds.rstrip("s")) for name, seconds in (part.split(" ") for part in m[3].split(", "))
            }
    return [
        TableBatch(m[2], _time(m[1]), int(m[4].replace(",", "")), float(m[5]), phases.get((m[2], m[3]), {}))
        for m in map(TABLE_BATCH.match, log.splitlines())
        if m
    ]


def scenario(w: W1, work: Path, stretch_tables: int | None = None) -> Section:
    """W1's size picks the mirror's (quick below 1M initial rows, as `continuous` does);
    `stretch_tables` replaces the stretch run's table count (0 leaves it out)."""
    size = SIZES["quick" if w.initial_rows < 1_000_000 else "full"]
    if stretch_tables is not None:
        size = replace(size, stretch_tables=stretch_tables)
    work.mkdir(parents=True)
    with broker.kafka(work) as bootstrap:
        wide = Mirror.create("wide", work, bootstrap, size.tables)
        narrow = Mirror.create("narrow", work, bootstrap, size.changed)
        single = Mirror.create("single", work, bootstrap, 1)
        mirrors = [single, narrow, wide]
        for mirror in (wide, narrow):
            mirror.insert(size.records // size.tables)
        single.insert(size.records)
        if size.stretch_tables:
            mirrors.append(Mirror.create("stretch", work, bootstrap, size.stretch_tables))
            mirrors[-1].insert(size.stretch_records)
        print(f"  produced the initial rows of {', '.join(m.name for m in mirrors)}", flush=True)
        for mirror in mirrors:
            mirror.run()
        for _ in range(size.rounds):
            for mirror in (wide, narrow):
                mirror.change(size.changes, size.changed)
                mirror.run()
        results = [_initial(m) for m in mirrors] + [_changes(m) for m in (wide, narrow)]
        for mirror in mirrors:
            last = next(r for r in reversed(results) if r.name.startswith(mirror.name))
            last.table_rows, last.expected_rows = mirror.rows(), sum(mirror.held.values())
    title = (
        f"Many tables in one streaming query: {size.records:,} records over {size.tables} tables, over "
        f"{size.changed} and in 1; batches of {size.changes:,} changes to {size.changed} tables ({spark.MASTER})"
    )
    section = Section(title, "single-initial", results, NOTES, {"size": asdict(size)})
    section.tables = [_comparison(mirrors, size)]
    section.checks = targets(wide, narrow, single, size)
    return section


def _initial(mirror: Mirror) -> PathResult:
    run = mirror.runs[0]
    return PathResult(
        f"{mirror.name}-initial",
        f"{len(mirror.tables):,} table(s): initial run",
        run.records,
        run.stream_seconds,
        [b.seconds for b in run.batches],
        peak_rss=run.peak,
        details={"phases": _median_phases(run.batches), **_run_details(run)},
    )


def _changes(mirror: Mirror) -> PathResult:
    runs = mirror.runs[1:]
    return PathResult(
        f"{mirror.name}-changes",
        f"{len(mirror.tables):,} table(s): a batch of changes",
        runs[0].records,
        statistics.median(r.stream_seconds for r in runs),
        [b.seconds for r in runs for b in r.batches],
        peak_rss=_peak(runs),
        details={
            "phases": _median_phases([b for r in runs for b in r.batches]),
            "runs": [_run_details(r) for r in runs],
        },
    )


def _run_details(run: Run) -> dict:
    return {
        "records": run.records,
        "tables_written": len(run.batches),
        "to_tables_seconds": run.to_tables,
        "to_query_seconds": run.to_query,
        "to_first_write_seconds": run.to_first_write,
        "stream_seconds": run.stream_seconds,
        "planning_seconds": run.planning_seconds,
        "writing_seconds": run.writing_seconds,
        "table_seconds": run.table_seconds,
        "wall_seconds": run.wall,
        "peak": run.peak,
        "load_average": run.load_average,
    }


def _median_phases(batches: list[TableBatch]) -> dict[str, float]:
    names = batches[0].phases if batches else {}
    return {name: statistics.median(b.phases.get(name, 0.0) for b in batches) for name in names}


def _peak(runs: list[Run]) -> dict[str, int]:
    return {role: max(r.peak.get(role, 0) for r in runs) for role in runs[0].peak}


def _comparison(mirrors: list[Mirror], size: MirrorSize) -> str:
    """The mirrors side by side: their starts, their initial runs, their batches of changes."""

    def median(mirror: Mirror, value) -> str:
        runs = mirror.runs[1:]
        return f"{statistics.median(value(r) for r in runs):,.2f}" if runs else "-"

    rows = [
        ("tables", lambda m: f"{len(m.tables):,}"),
        ("initial run: records", lambda m: f"{m.runs[0].records:,}"),
        ("  start -> first table prepared s", lambda m: f"{m.runs[0].to_tables:,.1f}"),
        ("  start -> query s", lambda m: f"{m.runs[0].to_query:,.1f}"),
        ("  start -> first write s", lambda m: f"{m.runs[0].to_first_write:,.1f}"),
        ("  stream s", lambda m: f"{m.runs[0].stream_seconds:,.2f}"),
        ("    planning s", lambda m: f"{m.runs[0].planning_seconds:,.2f}"),
        ("    writing s", lambda m: f"{m.runs[0].writing_seconds:,.2f}"),
        ("  tables' own seconds, summed", lambda m: f"{m.runs[0].table_seconds:,.2f}"),
        ("  records/s", lambda m: f"{m.runs[0].records / m.runs[0].stream_seconds:,.0f}"),
        ("  whole run s", lambda m: f"{m.runs[0].wall:,.1f}"),
        ("  peak PSS MB", lambda m: f"{m.runs[0].peak['pss'] / 2**20:,.0f}"),
        ("  load average after", lambda m: f"{m.runs[0].load_average:.1f}"),
        (f"batch of changes to {size.changed} tables (median)", lambda m: "" if len(m.runs) > 1 else "-"),
        ("  start -> query s", lambda m: median(m, lambda r: r.to_query)),
        ("  stream s", lambda m: median(m, lambda r: r.stream_seconds)),
        ("    planning s", lambda m: median(m, lambda r: r.planning_seconds)),
        ("    writing s", lambda m: median(m, lambda r: r.writing_seconds)),
        ("  tables' own seconds, summed", lambda m: median(m, lambda r: r.table_seconds)),
        ("  whole run s", lambda m: median(m, lambda r: r.wall)),
        ("  peak PSS MB", lambda m: f"{_peak(m.runs[1:])['pss'] / 2**20:,.0f}" if len(m.runs) > 1 else "-"),
        ("  load average after", lambda m: median(m, lambda r: r.load_average)),
    ]
    lines = [
        "side by side (start: from the command's start; stream: from the query's start to its last commit)",
        f"{'':<44}" + "".join(f"{m.name:>12}" for m in mirrors),
    ]
    lines.append("-" * len(lines[-1]))
    lines += [f"{label:<44}" + "".join(f"{value(m):>12}" for m in mirrors) for label, value in rows]
    return "\n".join(lines)


def targets(wide: Mirror, narrow: Mirror, single: Mirror, size: MirrorSize) -> list[Check]:
    """The targets of many tables in one query, at this run's size."""
    start = wide.runs[0].to_first_write
    wide_batch = statistics.median(r.stream_seconds for r in wide.runs[1:])
    narrow_batch = statistics.median(r.stream_seconds for r in narrow.runs[1:])
    batch_ratio = wide_batch / narrow_batch
    wide_rate = wide.runs[0].records / wide.runs[0].stream_seconds
    single_rate = single.runs[0].records / single.runs[0].stream_seconds
    rate_ratio = wide_rate / single_rate
    pss = max(r.peak["pss"] for r in wide.runs) / 2**30
    return [
        Check(f"{size.tables} tables: start to first table write", f"{start:.1f}s", "<= 30 s", start <= 30),
        Check(
            f"batch of {size.changed} of {size.tables} over {size.changed} alone",
            f"{batch_ratio:.2f}x",
            "<= 1.5x",
            batch_ratio <= 1.5,
        ),
        Check(f"records/s over {size.tables} tables over 1", f"{rate_ratio:.2f}x", ">= 0.5x", rate_ratio >= 0.5),
        Check(f"peak PSS with {size.tables} tables", f"{pss:.2f} GiB", "<= 2.5 GiB", pss <= 2.5),
    ]
