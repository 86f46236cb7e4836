"""Scenario `growth`: how the cost of an upsert batch grows with the table, at N and at 10 N.

    PYTHONPATH=. python -m bench --scenario growth [--rows N] [--batch-rows B] [--batches K] [--keep]

W1 at two table sizes, its own `initial_rows` (N) and ten times that, with the same batch size,
goes to Parquet files first. Then every path runs in a process of its own that holds both tables:
it loads each the fast way its format allows, outside the timings (our in-process writer, one
commit per region, so every bucket starts as one base file; `write_deltalake`; a pyarrow Parquet
dataset for Spark), upserts a warm-up batch into each, then the same few W1 batches, alternating
between the two tables batch by batch (which goes first alternates too). So both sizes are timed
in the same process, warmed up alike, within seconds of each other: on a shared machine, load
that drifts over minutes does not land on one size only. A table loaded once is copied, not
loaded again, for a later path that can start from it.

Paths: ours through `table.spark.write.upsert_dataframe` in local[2] (what the streaming sink
calls), ours through the in-process writer with the same bucket count at both sizes, and with
buckets proportional to N (as a user sizing `index.initial_buckets` for the bigger table would),
Apache Hudi's own Spark upsert (merge-on-read, consistent-hashing bucket index, as many buckets
as ours; `bench.peers.apache_hudi`), delta-rs merge, and plain Spark copy-on-write (as
`bench.peers`). A merge-on-read table with a
bucket index appends each batch to log files of the buckets it routes to, so its batch latency
should not depend on N; copy-on-write peers rewrite what the batch touches, which grows with the
table. Reported: p50/p95 batch latency per path and size, and large/small.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bench import spark
from bench.measure import PathResult, run_measured
from bench.report import Section
from bench.workload import REGIONS, TABLE_SCHEMA, W1, WorkloadFiles

FACTOR = 10  # the large table holds FACTOR times the small one's initial rows
MAX_BATCHES = 5  # the same few W1 batches at both sizes, timed
WARMUP_BATCHES = 1  # upserted into each table first and timed apart: a JVM's first batch is mostly warm-up
BUCKETS = 4  # per partition at the small N: the streaming path's index.initial_buckets
TARGET = 1.3  # ours' p50 at FACTOR x N within this many times its p50 at N
CHILD = "import sys; from bench.growth import _child_main; _child_main(*sys.argv[1:])"


@dataclass(frozen=True)
class GrowthPath:
    label: str
    kind: str  # ours-spark | ours-python | hudi-spark | delta-merge | spark-cow
    scaled_buckets: bool = False  # buckets per partition proportional to N

    def buckets(self, rows: int, small: int) -> int | None:
        if self.kind == "hudi-spark":
            return BUCKETS
        if not self.kind.startswith("ours"):
            return None
        return max(1, round(BUCKETS * rows / small)) if self.scaled_buckets else BUCKETS

    def table_key(self, rows: int, small: int) -> tuple:
        """Paths with the same key can start from a copy of the same loaded table."""
        return ("ours" if self.kind.startswith("ours") else self.kind, rows, self.buckets(rows, small))


#: name -> path; "ours" (the streaming sink's library call) at N is the baseline of the "x ours" column.
PATHS = {
    "ours": GrowthPath("ours: spark upsert_dataframe", "ours-spark"),
    "ours-python": GrowthPath("ours: python writer", "ours-python"),
    "ours-python-scaled": GrowthPath("ours: python writer, buckets ∝ N", "ours-python", scaled_buckets=True),
    "hudi-spark": GrowthPath("Apache Hudi 0.15: spark upsert", "hudi-spark"),
    "delta-merge": GrowthPath("delta-rs merge", "delta-merge"),
    "spark-cow": GrowthPath("spark copy-on-write", "spark-cow"),
}

NOTES = [
    "one process per path holds both tables: each loaded outside the timings ('load s'; ours: the "
    "in-process writer, one commit per region, so buckets start as base files; Apache Hudi: its bulk_insert; "
    "delta: write_deltalake; "
    "spark: a pyarrow Parquet dataset; a path that starts from a copy of an earlier path's table shows "
    f"that load), {WARMUP_BATCHES} warm-up batch each (timed apart: details.warmup_batch_seconds), then "
    "the same W1 batches alternating between the two tables; records/s over the timed batches only; "
    "peak RSS is the process's, both tables.",
    f"buckets: ours keeps {BUCKETS} per partition at both sizes (a batch writes as many log files at "
    f"either size), except 'buckets ∝ N', {FACTOR}x more at {FACTOR} N (each batch then writes "
    f"{FACTOR}x more log files, each {FACTOR}x smaller); 8 partitions (regions).",
    "ours and Apache Hudi's upserts append log files (no compaction here; Hudi runs in the judge's "
    "pyspark 3.5 with the bench's Spark settings, each batch staged as Parquet before its timing); delta-rs merge rewrites every data file a batch "
    "matches (with Zipf keys over the whole table: most of it), Spark copy-on-write the whole table.",
]


def sizes(w: W1) -> tuple[W1, W1]:
    """W1 at N (its own initial rows) and at FACTOR x N, the same batches' size and number (the
    warm-up batches first)."""
    small = replace(w, batches=min(w.batches, MAX_BATCHES) + WARMUP_BATCHES)
    return small, replace(small, initial_rows=small.initial_rows * FACTOR)


def scenario(w: W1, work: Path) -> Section:
    small, large = sizes(w)
    files = {}
    for wn in (small, large):
        files[wn.initial_rows] = WorkloadFiles(work / f"w1-{wn.initial_rows}")
        started = time.monotonic()
        files[wn.initial_rows].write(wn.tables())
        print(f"  N={wn.initial_rows:,}: W1 written in {time.monotonic() - started:.1f}s", flush=True)
    details: dict = {
        "sizes": [small.initial_rows, large.initial_rows],
        "batch_rows": small.batch_rows,
        "batches": small.batches - WARMUP_BATCHES,
        "warmup_batches": WARMUP_BATCHES,
        "buckets_per_partition": {},
        "growth": {},
    }
    results: list[PathResult] = []
    loaded: dict[tuple, tuple[Path, float]] = {}  # table key -> a copy of the loaded table, its load seconds
    keys = [(path.table_key(wn.initial_rows, small.initial_rows)) for path in PATHS.values() for wn in (small, large)]
    for i, (name, path) in enumerate(PATHS.items()):
        print(f"  {name}", flush=True)
        path_work = work / name
        path_work.mkdir(parents=True)
        tables = []
        for wn in (small, large):
            key = path.table_key(wn.initial_rows, small.initial_rows)
            table = path_work / f"table-{wn.initial_rows}"
            keep = key not in loaded and key in keys[2 * (i + 1) :]  # a later path can start from it
            seed = loaded.get(key)
            tables.append(
                {
                    "workload": str(files[wn.initial_rows].directory),
                    "table": str(table),
                    "loaded": str(path_work / f"loaded-{wn.initial_rows}") if keep else None,
                    "buckets": path.buckets(wn.initial_rows, small.initial_rows),
                    "seed": str(seed[0]) if seed else None,
                    "seed_load_seconds": seed[1] if seed else None,
                }
            )
            details["buckets_per_partition"].setdefault(name, {})[wn.initial_rows] = tables[-1]["buckets"]
        pair = _child(name, path, path_work, tables, (small, large))
        for wn, t, result in zip((small, large), tables, pair):
            if t["loaded"] and "error" not in result.details:
                loaded[path.table_key(wn.initial_rows, small.initial_rows)] = (Path(t["loaded"]), result.load_seconds)
        results += pair
    notes = list(NOTES)
    for name, path in PATHS.items():
        a, b = (_find(results, name, wn.initial_rows) for wn in (small, large))
        if a is None or b is None:
            continue
        growth = {q: b.batch_percentile(q) / a.batch_percentile(q) for q in (50, 95)}
        details["growth"][name] = growth
        notes.append(
            f"{path.label}: p50 {a.batch_percentile(50):.2f}s -> {b.batch_percentile(50):.2f}s "
            f"(x{growth[50]:.2f}), p95 {a.batch_percentile(95):.2f}s -> {b.batch_percentile(95):.2f}s "
            f"(x{growth[95]:.2f}) from N={small.initial_rows:,} to {large.initial_rows:,}"
        )
    if "ours" in details["growth"]:
        ratio = details["growth"]["ours"][50]
        notes.append(
            f"target: ours' p50 at {FACTOR} N within {TARGET}x of N: x{ratio:.2f}, "
            f"{'met' if ratio <= TARGET else 'NOT met'}"
        )
    title = (
        f"Growth: per-batch upsert latency at N={small.initial_rows:,} and {large.initial_rows:,} rows, "
        f"{small.batches - WARMUP_BATCHES} W1 batches of {small.batch_rows:,} records "
        f"({spark.MASTER} for Spark paths)"
    )
    return Section(title, f"ours@{small.initial_rows}", results, notes, details)


def _find(results: list[PathResult], name: str, rows: int) -> PathResult | None:
    r = next((r for r in results if r.name == f"{name}@{rows}"), None)
    return None if r is None or "error" in r.details or not r.batch_seconds else r


def _child(name: str, path: GrowthPath, work: Path, tables: list[dict], ws: tuple[W1, W1]) -> list[PathResult]:
    """One path at both sizes in a process of its own (`CHILD`)."""
    child_input, result_path, log_path = work / "input.json", work / "result.json", work / "path.log"
    child_input.write_text(json.dumps({"kind": path.kind, "tables": tables}))
    code, _, rss = run_measured([sys.executable, "-c", CHILD, str(child_input), str(result_path)], log_path)
    names = [(f"{name}@{wn.initial_rows}", f"{path.label}, N={_short(wn.initial_rows)}") for wn in ws]
    if code != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-20:])
        return [
            PathResult(n, label, 0, 0.0, peak_rss=rss, details={"error": f"exit {code}, log {log_path}:\n{tail}"})
            for n, label in names
        ]
    results = [PathResult.from_json(r) for r in json.loads(result_path.read_text())]
    for (n, label), wn, t, result in zip(names, ws, tables, results):
        result.name, result.label, result.peak_rss, result.expected_rows = n, label, rss, wn.expected_rows()
        result.details.update(
            {
                "initial_rows": wn.initial_rows,
                "buckets_per_partition": t["buckets"],
                "loaded_from_copy": t["seed"] is not None,
            }
        )
    return results


def _short(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return f"{n:,}"


# -- each path, in its own process ---------------------------------------------------------------


def load_ours(path: Path, initial: pa.Table, buckets: int) -> None:
    """W1's initial load into a new table of ours (the streaming job's table spec) by the
    in-process writer, one commit per region: each bucket's first write makes its base file."""
    from table import MorTable, TableSpec, WriteOptions

    table = MorTable.create(str(path), TableSpec("orders", TABLE_SCHEMA, ("order_id",), "updated_at", ("region",)))
    with table.writer(WriteOptions(initial_buckets=buckets, delete_field="is_deleted")) as writer:
        for region in REGIONS:
            writer.upsert(initial.filter(pc.equal(initial["region"], region)))


class _Ours:
    def __init__(self, table: Path, buckets: int, spark_session=None):
        from table import WriteOptions

        self.table, self.buckets, self.spark = table, buckets, spark_session
        self.options = WriteOptions(initial_buckets=buckets, delete_field="is_deleted")

    def load(self, initial: pa.Table) -> None:
        load_ours(self.table, initial, self.buckets)

    def open(self) -> None:
        from table import MorTable

        self.writer = MorTable.load(str(self.table)).writer(self.options).open()  # held as the sink holds it

    def upsert(self, batch: pa.Table) -> None:
        if self.spark is None:
            self.writer.upsert(batch)
        else:
            from table.spark import upsert_dataframe

            upsert_dataframe(self.writer, self.spark.createDataFrame(batch))

    def rows(self) -> int:
        from table import MorTable

        self.writer.close()
        return MorTable.load(str(self.table)).snapshot(columns=["order_id"]).num_rows


class _Hudi:
    """As `bench.peers.apache_hudi.upsert`, through one judge for both tables; loaded by Hudi's
    `bulk_insert` (its fast path for a first load), each batch staged as Parquet before its timing."""

    def __init__(self, table: Path, buckets: int, judge):
        from bench.peers.apache_hudi import write_options

        self.table, self.judge, self.buckets = table, judge, buckets
        self.options = write_options(buckets)
        self.staged = 0

    def load(self, initial: pa.Table) -> None:
        from bench.peers.apache_hudi import write_options

        staged = self.prepare(initial)
        self.judge.write_parquet(self.table, staged, write_options(self.buckets, "bulk_insert"))
        staged.unlink()

    def open(self) -> None:
        pass

    def prepare(self, batch: pa.Table) -> Path:
        from bench.peers.apache_hudi import stage

        self.staged += 1
        return stage(batch, self.table.parent / f"staged-{self.table.name}-{self.staged}.parquet")

    def upsert(self, staged: Path) -> None:
        self.judge.write_parquet(self.table, staged, self.options)
        staged.unlink()

    def rows(self) -> int:
        from bench.peers.apache_hudi import count_rows

        return count_rows(self.judge, self.table)


class _Delta:
    """As `bench.peers.delta.merge`."""

    def __init__(self, table: Path, buckets, spark_session=None):
        self.path = str(table)

    def load(self, initial: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.path, initial.drop_columns(["is_deleted"]), partition_by=["region"])

    def open(self) -> None:
        from deltalake import DeltaTable

        self.table = DeltaTable(self.path)

    def upsert(self, batch: pa.Table) -> None:
        (
            self.table.merge(
                batch, "t.order_id = s.order_id AND t.region = s.region", source_alias="s", target_alias="t"
            )
            .when_matched_delete("s.is_deleted")
            .when_matched_update_all("s.updated_at > t.updated_at", except_cols=["is_deleted"])
            .when_not_matched_insert_all("NOT s.is_deleted", except_cols=["is_deleted"])
            .execute()
        )

    def rows(self) -> int:
        from deltalake import DeltaTable

        return DeltaTable(self.path).to_pyarrow_dataset().count_rows()


class _SparkCow:
    """As `bench.peers.spark_cow.overwrite`, but loaded as a pyarrow Parquet dataset (hive-style
    region= directories, which Spark reads as the partition column); versions are directories
    v0, v1, ... of the table's directory, the previous one removed after each batch."""

    def __init__(self, table: Path, buckets, spark_session=None):
        self.table, self.spark = table, spark_session

    def load(self, initial: pa.Table) -> None:
        import pyarrow.parquet as pq

        pq.write_to_dataset(initial.drop_columns(["is_deleted"]), str(self.table / "v0"), partition_cols=["region"])

    def open(self) -> None:
        self.version = max(int(p.name[1:]) for p in self.table.glob("v*"))

    def upsert(self, batch: pa.Table) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        latest = Window.partitionBy("order_id").orderBy(F.col("updated_at").desc())
        current = self.spark.read.parquet(str(self.table / f"v{self.version}")).withColumn("is_deleted", F.lit(False))
        merged = (
            current.unionByName(self.spark.createDataFrame(batch))
            .withColumn("rank", F.row_number().over(latest))
            .where("rank = 1 AND NOT is_deleted")
            .select(*TABLE_SCHEMA.names)
        )
        merged.write.partitionBy("region").parquet(str(self.table / f"v{self.version + 1}"))
        shutil.rmtree(self.table / f"v{self.version}")
        self.version += 1

    def rows(self) -> int:
        return self.spark.read.parquet(str(self.table / f"v{self.version}")).count()


KINDS = {"ours-spark": _Ours, "ours-python": _Ours, "hudi-spark": _Hudi, "delta-merge": _Delta, "spark-cow": _SparkCow}


def run_path(kind: str, tables: list[dict]) -> list[PathResult]:
    """Load (or copy a seed) each table, keep a copy where asked, then time the batches of every
    table in turn, batch by batch; one result per table."""
    engine = judge = None  # a Spark session, or Apache Hudi's judge, shared by both tables
    if kind in ("ours-spark", "spark-cow"):
        from bench.spark import session

        engine = session()
    elif kind == "hudi-spark":
        from bench.peers.apache_hudi import start_judge

        engine = judge = start_judge(Path(tables[0]["table"]).parent / "judge")
    try:
        return _run_path(kind, tables, engine)
    finally:
        if judge is not None:
            judge.stop()


def _run_path(kind: str, tables: list[dict], engine) -> list[PathResult]:
    handles, load_seconds, batches, batch_rows = [], [], [], []
    for t in tables:
        handle = KINDS[kind](Path(t["table"]), t["buckets"], engine)
        files = WorkloadFiles(Path(t["workload"]))
        if t["seed"]:
            shutil.copytree(t["seed"], t["table"])
            load_seconds.append(t["seed_load_seconds"])
        else:
            initial = files.load()
            started = time.monotonic()
            handle.load(initial)
            load_seconds.append(time.monotonic() - started)
            del initial
            if t["loaded"]:
                shutil.copytree(t["table"], t["loaded"])
        handle.open()
        handles.append(handle)
        read = list(files.batches())
        batch_rows.append([b.num_rows for b in read])
        prepare = getattr(handle, "prepare", None)  # outside the timings
        batches.append([prepare(b) for b in read] if prepare else read)
    seconds: list[list[float]] = [[] for _ in tables]
    for i in range(min(len(b) for b in batches)):
        order = range(len(tables)) if i % 2 == 0 else reversed(range(len(tables)))
        for j in order:
            started = time.monotonic()
            handles[j].upsert(batches[j][i])
            seconds[j].append(time.monotonic() - started)
    results = []
    for handle, timed, loaded_in, rows in zip(handles, seconds, load_seconds, batch_rows):
        counted = timed[WARMUP_BATCHES:]
        records = sum(rows[WARMUP_BATCHES : len(timed)])
        results.append(
            PathResult(
                kind,
                kind,
                records,
                sum(counted),
                counted,
                loaded_in,
                handle.rows(),
                details={"warmup_batch_seconds": timed[:WARMUP_BATCHES]},
            )
        )
    return results


# -- the child process -----------------------------------------------------------------------------


def _child_main(input_path: str, result_path: str) -> None:
    args = json.loads(Path(input_path).read_text())
    results = run_path(args["kind"], args["tables"])
    Path(result_path).write_text(json.dumps([r.to_json() for r in results]))
