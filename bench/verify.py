"""Scenario `verify`: `streamer verify`'s comparison of a mirrored table with its PostgreSQL
source, beside data-diff comparing the same rows inside PostgreSQL.

    PYTHONPATH=. python -m bench --scenario verify [--quick]

pgbench's accounts (`pgbench -i -s 10`: 1,000,000 rows; scale 1 with --quick) in the harness's
PostgreSQL, and the lake table a mirror holds of them, written by the engine from the source's
rows as Debezium's JSON change events carry them (the integers as int32, `filler char(84)` as its
padded text), with a constant `source_position`. Each path is timed `REPEATS` times (median):

- `verify`: `compare_table` of the equal table, then with one source row changed (its
  `abalance`), which it must name by key and column;
- `data-diff`: data-diff's hashdiff between pgbench_accounts and a copy of it in the same
  database, before and after that change. Hashdiff is the algorithm it runs between two
  databases, as ours is between PostgreSQL and a lake: its checksums over key segments run inside
  the database, bisected down to rows. On two tables of one database its default (`auto`) would
  pick joindiff, one outer join inside the database, timed once beside it for reference.

data-diff 0.11.2 pins pydantic 1, urllib3 < 2 and dbt-core, which the project's venv cannot take
without breaking streamer, so it lives in a venv of its own under `.cache/`.

One more comparison of the equal table is then taken apart, to show where ours spends its time:
the lake side (snapshot read, the texts and keys `LakeRows` makes, the row texts, the per-row MD5)
and the PostgreSQL side (count, split points, digests of the first cut).
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

from bench.measure import REPO, PathResult, run_measured
from bench.report import Check, Section
from bench.workload import W1
from harness.pgbench import initialize_pgbench
from harness.postgres import USER, PostgresServer
from streamer.verify.compare import FAN_OUT, compare_table
from streamer.verify.lake import LakeRows
from streamer.verify.postgres import PostgresSource, SourceTable
from streamer.verify.ranges import KeyRange
from streamer.verify.values import lake_row_texts, row_hashes
from table import MorTable, TableSpec, WriteOptions

DATABASE = "verify_bench"
REPEATS = 3
UPSERT_ROWS = 250_000
TARGET_SECONDS = 15.0  # the equal table at scale 10
DATA_DIFF = "data-diff==0.11.2"
#: What data-diff 0.11.2 needs besides itself: its PostgreSQL driver; dbt-core before 1.9, whose
#: later releases build a parser wheel downloaded at install time; pydantic 1, which its dbt
#: validators are written for (`Field(regex=)`).
DATA_DIFF_WITH = ("psycopg2-binary", "dbt-core<1.9", "pydantic<2")
DATA_DIFF_VENV = REPO / ".cache" / "bench-data-diff"
#: data-diff's runs of each case: algorithm, worker threads, repeats. The first is the yardstick
#: (its default of one thread); two threads are what this machine's two cores allow it.
DATA_DIFF_RUNS = {
    "equal": [("hashdiff", 1, REPEATS), ("hashdiff", 2, 1), ("joindiff", 1, 1)],
    "one-difference": [("hashdiff", 1, REPEATS)],
}
LAKE_SCHEMA = pa.schema(
    [
        ("aid", pa.int32()),
        ("bid", pa.int32()),
        ("abalance", pa.int32()),
        ("filler", pa.string()),
        ("source_position", pa.int64()),
    ]
)


def scenario(w: W1, work: Path) -> Section:
    scale = 1 if w.initial_rows < 1_000_000 else 10
    work.mkdir(parents=True, exist_ok=True)
    data_diff, start_up, data_diff_error = _data_diff_program(work)
    with PostgresServer(work / "postgres") as pg:
        print(f"  pgbench -i -s {scale}", flush=True)
        pg.sql(f"CREATE DATABASE {DATABASE}")
        initialize_pgbench(pg, DATABASE, scale)
        pg.sql(
            "CREATE TABLE accounts_copy AS SELECT * FROM pgbench_accounts; "
            "ALTER TABLE accounts_copy ADD PRIMARY KEY (aid); VACUUM ANALYZE accounts_copy;",
            DATABASE,
        )
        url = f"postgresql://{USER}@{pg.host}:{pg.port}/{DATABASE}"
        lake_path = str(work / "lake" / "pgbench_accounts")
        started = time.monotonic()
        rows = mirror_table(url, lake_path)
        print(f"  lake table of {rows:,} rows written in {time.monotonic() - started:.1f}s", flush=True)
        changed_aid = rows * 2 // 3 + 1
        source = PostgresSource(url)
        try:
            table = source.table("public", "pgbench_accounts")
            results = [_ours("verify-equal", "verify, equal", rows, lambda: _timed_verify(source, table, lake_path))]
            results += _data_diff_runs(data_diff, data_diff_error, url, work, rows, "equal", changed_aid)
            pg.sql(f"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = {changed_aid}", DATABASE)
            results.append(
                _ours(
                    "verify-one-difference",
                    f"verify, aid {changed_aid} changed",
                    rows,
                    lambda: _timed_verify(source, table, lake_path, changed_aid),
                )
            )
            results += _data_diff_runs(data_diff, data_diff_error, url, work, rows, "one-difference", changed_aid)
            pieces = where_time_goes(source, table, lake_path)
        finally:
            source.close()
    return _section(rows, scale, results, pieces, start_up, data_diff_error)


def mirror_table(url: str, lake_path: str) -> int:
    """The lake table of pgbench_accounts as a mirror holds it, read from the source by COPY (in
    CSV, which tells NULL, unquoted and empty, from an empty text, quoted); its rows."""
    copy_out = "COPY pgbench_accounts (aid, bid, abalance, filler) TO STDOUT (FORMAT csv)"
    with psycopg.connect(url) as connection, connection.cursor() as cursor, cursor.copy(copy_out) as copy:
        data = b"".join(bytes(block) for block in copy)
    names = LAKE_SCHEMA.names[:-1]
    rows = pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=names),
        convert_options=pacsv.ConvertOptions(
            column_types={n: LAKE_SCHEMA.field(n).type for n in names},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    rows = rows.append_column("source_position", pa.array([1] * rows.num_rows, pa.int64()))
    table = MorTable.create(lake_path, TableSpec("pgbench_accounts", LAKE_SCHEMA, ("aid",), "source_position"))
    with table.writer(WriteOptions()) as writer:
        for start in range(0, rows.num_rows, UPSERT_ROWS):
            writer.upsert(rows.slice(start, UPSERT_ROWS))
    return rows.num_rows


def _timed_verify(source: PostgresSource, table: SourceTable, lake_path: str, changed_aid: int | None = None) -> float:
    """One comparison's seconds; raises when its verdict is not the one expected: equal, or only
    `changed_aid`'s abalance differing."""
    started = time.monotonic()
    verdict = compare_table(source, table, lake_path, None, _no_lag)
    seconds = time.monotonic() - started
    expected = {} if changed_aid is None else {(changed_aid,): ["abalance"]}
    if verdict.missing or verdict.extra or verdict.different != expected or verdict.note is not None:
        raise RuntimeError(f"verify's verdict is not the expected {expected}:\n" + "\n".join(verdict.lines()))
    return seconds


def _no_lag(position: int) -> str | None:
    """The lake table is written once, before any comparison: it is always caught up."""
    return None


def _ours(name: str, label: str, rows: int, timed: Callable[[], float]) -> PathResult:
    print(f"  {label}", flush=True)
    seconds = [timed() for _ in range(REPEATS)]
    return PathResult(name, label, rows, statistics.median(seconds), seconds)


def _data_diff_program(work: Path) -> tuple[Path | None, float | None, str | None]:
    """data-diff's command in a venv of its own (made when missing) and the seconds of its
    start-up (`--version`, median, which every run includes); or why it cannot run."""
    program = DATA_DIFF_VENV / "bin" / "data-diff"
    log = work / "data-diff-install.log"
    steps = [] if program.exists() else [
        [sys.executable, "-m", "venv", "--clear", str(DATA_DIFF_VENV)],
        [str(DATA_DIFF_VENV / "bin" / "pip"), "install", DATA_DIFF, *DATA_DIFF_WITH],
    ]  # fmt: skip
    if steps:
        print(f"  installing {DATA_DIFF} into {DATA_DIFF_VENV}", flush=True)
    with open(log, "w") as out:
        for command in steps:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                return None, None, f"{' '.join(command[:4])} exited {done.returncode}: {_tail(log, 5)}"
    seconds = []
    for _ in range(REPEATS):
        code, took, _ = run_measured([str(program), "--version"], log, env={"PYTHONPATH": ""})
        if code != 0:
            return None, None, f"data-diff --version exited {code}: {_tail(log, 5)}"
        seconds.append(took)
    return program, statistics.median(seconds), None


def _data_diff_runs(
    program: Path | None, error: str | None, url: str, work: Path, rows: int, case: str, changed_aid: int
) -> list[PathResult]:
    """data-diff's runs of `case` (`DATA_DIFF_RUNS`) on the tables as they are now; a run that
    fails, or finds other rows than none or `changed_aid`, is a result with its error."""
    # data-diff's connector requires a password in the URL; the server trusts any
    with_password = url.replace(f"//{USER}@", f"//{USER}:trusted@")
    expected = set() if case == "equal" else {changed_aid}
    results = []
    for algorithm, threads, repeats in DATA_DIFF_RUNS[case]:
        name = f"data-diff-{algorithm}-j{threads}-{case}"
        label = f"data-diff {algorithm}, {threads} thread{'s' if threads > 1 else ''}, {case.replace('-', ' ')}"
        print(f"  {label}", flush=True)
        seconds, peak, failed = [], 0, error
        for n in range(repeats if program is not None else 0):
            log = work / f"{name}-{n}.log"
            command = [
                str(program), with_password, "pgbench_accounts", "accounts_copy", "--algorithm", algorithm,
                "--threads", str(threads), "-k", "aid", "-c", "bid", "-c", "abalance", "-c", "filler",
                "--json", "--no-tracking",
            ]  # fmt: skip
            code, took, rss = run_measured(command, log, env={"PYTHONPATH": ""})
            found = _differing_aids(log) if code == 0 else set()
            if code != 0 or found != expected:
                failed = (
                    f"exited {code}, found aids {sorted(found)[:5]}, wanted {sorted(expected)}; {log}: {_tail(log, 3)}"
                )
                break
            seconds.append(took)
            peak = max(peak, rss["total"])
        if failed is not None:
            results.append(PathResult(name, label, rows, 0.0, details={"error": failed}))
        else:
            results.append(PathResult(name, label, rows, statistics.median(seconds), seconds, peak_rss={"total": peak}))
    return results


def _tail(log: Path, lines: int) -> str:
    return " | ".join(log.read_text(errors="replace").splitlines()[-lines:])


def _differing_aids(log: Path) -> set[int]:
    """The keys of the rows data-diff reports (`--json`: a line per row, `["-" or "+", [values]]`)."""
    found = set()
    for line in log.read_text().splitlines():
        if line.startswith("["):
            _, values = json.loads(line)
            found.add(int(values[0]))
    return found


def where_time_goes(source: PostgresSource, table: SourceTable, lake_path: str) -> dict[str, float]:
    """The seconds of each piece of one comparison of the equal table, run one after the other as
    `compare_table` runs them (the row texts and MD5 timed again apart from `LakeRows`, which
    includes them)."""
    pieces = {}
    started = time.monotonic()

    def lap(piece: str) -> None:
        nonlocal started
        now = time.monotonic()
        pieces[piece] = now - started
        started = now

    rows = MorTable.load(lake_path).snapshot(columns=[r.column.name for r in table.rules])
    lap("lake: snapshot read (MorTable.snapshot)")
    lake = LakeRows(rows, table)
    lap("lake: LakeRows (texts, sorted keys as tuples, row texts, MD5)")
    texts = lake_row_texts(lake.texts, rows.num_rows)
    lap("  within LakeRows, timed again: row texts (Arrow, lake_row_texts)")
    row_hashes(texts)
    lap("  within LakeRows, timed again: MD5 per row (hashlib, row_hashes)")
    with source.snapshot() as snap:
        lap("postgres: snapshot")
        snap.count(table)
        lap("postgres: count(*)")
        cut = KeyRange().cut(snap.split_points(table, KeyRange(), FAN_OUT))
        lap(f"postgres: split points ({FAN_OUT} ranges)")
        snap.digests(table, cut)
        lap(f"postgres: digests of {len(cut)} ranges (md5 of every row)")
    return pieces


def _section(
    rows: int,
    scale: int,
    results: list[PathResult],
    pieces: dict[str, float],
    data_diff_start_up: float | None,
    data_diff_error: str | None,
) -> Section:
    by_name = {r.name: r for r in results}
    equal, one = by_name["verify-equal"], by_name["verify-one-difference"]
    yardstick = by_name["data-diff-hashdiff-j1-equal"]
    yardstick_one = by_name["data-diff-hashdiff-j1-one-difference"]

    def shown(r: PathResult) -> str:
        return "failed" if "error" in r.details else f"{r.seconds:.2f}"

    ratio = f"{yardstick.seconds / equal.seconds:.2f}" if "error" not in yardstick.details else "-"
    headline = [
        "verify against data-diff (median seconds)",
        f"{'rows':>10}  {'verify equal':>12}  {'verify 1 diff':>13}  {'data-diff equal':>15}  "
        f"{'data-diff 1 diff':>16}  {'data-diff / verify, equal':>25}",
        f"{rows:>10,}  {equal.seconds:>12.2f}  {one.seconds:>13.2f}  {shown(yardstick):>15}  "
        f"{shown(yardstick_one):>16}  {ratio:>25}",
    ]
    lake_seconds = sum(s for p, s in pieces.items() if p.startswith("lake: "))
    postgres_seconds = sum(s for p, s in pieces.items() if p.startswith("postgres: "))
    breakdown = ["where one comparison of the equal table spends its time (seconds, one run)"]
    breakdown += [f"  {piece:<66} {seconds:>7.2f}" for piece, seconds in pieces.items()]
    breakdown.append(f"  {'lake side in all':<66} {lake_seconds:>7.2f}")
    breakdown.append(f"  {'postgres side in all':<66} {postgres_seconds:>7.2f}")
    notes = [
        f"pgbench -i -s {scale}; the lake table written by the engine in upserts of {UPSERT_ROWS:,} rows into 4 "
        "buckets, so a snapshot read merges base and log files as a mirror's does",
        f"verify: compare_table in this process (no Python start-up), {REPEATS} runs each, one PostgreSQL "
        "connection; with a difference it reads the lake table twice (the second round re-checks the "
        "differing keys after catching up)",
        f"data-diff: its CLI in its own process ({DATA_DIFF}), its Python start-up included, columns aid, bid, "
        "abalance, filler; the yardstick is hashdiff with one thread (its default); peak RSS is its process's",
    ]
    if data_diff_start_up is not None:
        notes.append(
            f"data-diff's start-up (`data-diff --version`, median; it imports dbt among others): {data_diff_start_up:.2f}s"
        )
    if data_diff_error is not None:
        notes.append(f"data-diff could not run: {data_diff_error}")
    checks = []
    if scale == 10:
        checks.append(
            Check(
                f"verify of {rows:,} equal rows",
                f"{equal.seconds:.1f}s",
                f"<= {TARGET_SECONDS:.0f}s",
                equal.seconds <= TARGET_SECONDS,
            )
        )
    return Section(
        "verify: a mirrored table against PostgreSQL, beside data-diff",
        "verify-equal",
        results,
        notes,
        details={"scale": scale, "pieces": pieces},
        checks=checks,
        tables=["\n".join(headline), "\n".join(breakdown)],
    )
