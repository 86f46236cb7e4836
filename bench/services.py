"""Scenario `services`: what table services cost ingestion, and what a resize rewrites.

    PYTHONPATH=. python -m bench --scenario services [--rows N] [--batch-rows B] [--batches K] [--keep]

W1's initial load goes into a table of ours by the in-process writer (one commit per region, so
buckets start as base files), and only W1's upsert batches (at least MIN_BATCHES of them) go to a
topic of Apache Kafka: every run starts from a copy of that table and reads the same batches, one micro-batch each,
through `streamer run --once` as a user runs it (own process, local[2], a generated YAML).

(a) Compaction: off, `async` every 2 deltacommits (the background thread compacts while batches
    go on), and `inline` every 2 (compaction between batches) for reference; the run with
    compaction off is repeated last, so that the drift of a shared machine over the runs shows.
    A second pair of async runs holds every compaction at `compaction.files_written` for a few
    batches (`MOR_STREAMER_PAUSE`), so that the stream outruns it: once unbounded, once with
    `services.compaction.max_log_files_per_group` (BOUND), which holds the stream instead. Every
    run reports its read amplification: the log files a snapshot as of each of its deltacommits
    reads (`MorTable.layout_history`), in all and in the worst file group.
(b) Dual writes: clustering `async` with `index.split_threshold_mb` just above the largest
    loaded bucket, so that a batch's logs make every bucket due for a split, and one resize
    planned after the first few batches (`every_delta_commits` counts the load's commits too),
    which `MOR_STREAMER_PAUSE` holds at `clustering.files_written` for a few batches. Batches
    that began while its replacecommit was pending (between the mtimes of its requested and
    completed files in .hoodie/) wrote every record twice, to the old bucket and to its child;
    they are told apart from the batches before and after, and split by whether the resize was
    still rewriting (CPU shared with the batch) or only held (dual writes alone).
(c) Resize bytes: a split by `bench.resize_bytes` (its skewed table, compacted first) and every
    resize of run (b): bytes written against the bytes of the planned buckets' file slices.
"""

from __future__ import annotations

import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import yaml

from bench import broker, spark, streaming
from bench.growth import load_ours
from bench.measure import PathResult, run_measured
from bench.report import Section
from bench.resize_bytes import latest_sizes
from bench.workload import W1, WorkloadFiles, kafka_records
from streamer.sandbox.topics import create_topic, produce
from table import FAILPOINT_PAUSE_ENV_VAR, MIB, MorTable

TOPIC = "orders"
TOPIC_PARTITIONS = 2
BUCKETS = 4  # per partition, as the ingest scenario's index.initial_buckets
EVERY = 2  # deltacommits between compaction plans
MIN_BATCHES = 8  # (b) sorts batches into three kinds: fewer would leave some kind with one batch or none
WARMUP_BATCHES = 1  # each run's first micro-batch (the JVM's warm-up) is left out of the batch numbers
SPLIT_MARGIN = 1.05  # split threshold: this times the largest bucket after the load
PAUSE_MIN_SECONDS = 5.0
RESIZE_MAX_ROWS = 400_000  # bench.resize_bytes' default table size

COMPACTION_RUNS = {  # name -> (label, services section of the YAML, over streaming.SERVICES_OFF)
    "compaction-off": ("ours: compaction off", {}),
    "compaction-async": (
        f"ours: compaction async, every {EVERY}",
        {"compaction": {"mode": "async", "every_delta_commits": EVERY}},
    ),
    "compaction-inline": (
        f"ours: compaction inline, every {EVERY}",
        {"compaction": {"mode": "inline", "every_delta_commits": EVERY}},
    ),
}
BOUND = 3  # services.compaction.max_log_files_per_group of the bounded run
SLOW_COMPACTION_INTERVALS = 3  # a held compaction lasts about this many batch-to-batch intervals
SLOW_RUNS = {  # name -> (label, compaction section): async compactions held at compaction.files_written
    "compaction-async-held": ("ours: compaction async, held {held:.0f}s", {}),
    "compaction-async-held-bounded": (
        f"ours: async, held {{held:.0f}}s, bound {BOUND}",
        {"max_log_files_per_group": BOUND},
    ),
}
DUAL_CLASSES = {  # class of a batch of run (b) -> label
    "outside": "(b) no resize pending",
    "rewriting": "(b) dual writes, resize rewriting",
    "held": "(b) dual writes, resize held",
}

BATCH_LINE = re.compile(
    r"^(\S+ \S+) INFO streamer\.sink: orders batch (\d+): ([\d,]+) records, .*, (\d+) files "
    r"-> deltacommit (\d+) in ([\d.]+)s"
)
SERVICE_LINE = re.compile(
    r"^(\S+ \S+) INFO streamer\.scheduler: orders: (compaction|clustering) (\d+) done in ([\d.]+)s"
)


@dataclass(frozen=True)
class Batch:
    ended: datetime  # the sink's log line
    records: int
    files: int
    instant: str
    seconds: float  # the sink's own latency: Kafka read, decode, upsert, commit


def scenario(w: W1, work: Path) -> Section:
    w = replace(w, batches=max(w.batches, MIN_BATCHES))
    files = WorkloadFiles(work / "w1")
    files.write(w.tables())
    loaded = work / "loaded"
    started = time.monotonic()
    load_ours(loaded, files.load(), BUCKETS)
    details: dict = {
        "load_seconds": time.monotonic() - started,
        "buckets_per_partition": BUCKETS,
        "warmup_batches": WARMUP_BATCHES,
        "runs": {},
    }
    results: list[PathResult] = []
    notes = [
        f"every run: `streamer run --once` ({spark.MASTER}) from a copy of the same table ({w.initial_rows:,} "
        f"rows loaded in-process, {BUCKETS} buckets per partition) over the same {w.batches} W1 batches "
        f"in Kafka, one micro-batch each; the first {WARMUP_BATCHES} (JVM warm-up) is left out; 'load s' "
        "is that in-process load, shared by every run. "
        "records/s: wall time from the start of the first counted batch to the end of the last "
        "(gaps and inline services included); batch latency: the sink's own (read, decode, upsert, "
        "commit), which leaves out what runs between batches.",
    ]
    with broker.kafka(work) as bootstrap:
        details["messages"] = _produce(bootstrap, files)
        runs = {}
        for name, (label, services) in COMPACTION_RUNS.items():
            print(f"  {name}", flush=True)
            runs[name] = _run(work / name, w, bootstrap, loaded, services)
            results.append(_compaction_result(name, label, w, runs[name], details["load_seconds"]))
            details["runs"][name] = runs[name].summary()
        off = runs["compaction-off"]
        held = max(PAUSE_MIN_SECONDS, SLOW_COMPACTION_INTERVALS * statistics.median(off.intervals()))
        for name, (label, bound) in SLOW_RUNS.items():
            print(f"  {name} (compactions held {held:.0f}s)", flush=True)
            runs[name] = _run(
                work / name,
                w,
                bootstrap,
                loaded,
                {"compaction": {"mode": "async", "every_delta_commits": EVERY, **bound}},
                env={FAILPOINT_PAUSE_ENV_VAR: f"compaction.files_written={held:.1f}"},
            )
            results.append(_compaction_result(name, label.format(held=held), w, runs[name], details["load_seconds"]))
            details["runs"][name] = {**runs[name].summary(), "compaction_held_seconds": held}
        # One resize, planned after the warm-up batch and a third of the others (the count is of
        # deltacommits since the table began: the load's are in it), then not again in the run;
        # held for about half of the others (counting its rewrite), so that batches come before,
        # during and after it.
        counted = w.batches - WARMUP_BATCHES
        load_commits = len(MorTable.load(str(loaded)).timeline().completed("deltacommit"))
        every = load_commits + WARMUP_BATCHES + max(1, counted // 3)
        pause = max(PAUSE_MIN_SECONDS, (counted // 2 + 1) * statistics.median(off.intervals()))
        threshold = SPLIT_MARGIN * max(latest_sizes(MorTable.load(str(loaded))).values())
        print(f"  dual-writes (resize held {pause:.0f}s)", flush=True)
        dual = _run(
            work / "dual-writes",
            w,
            bootstrap,
            loaded,
            {"clustering": {"mode": "async", "every_delta_commits": every}},
            index={"initial_buckets": BUCKETS, "split_threshold_mb": threshold / MIB, "merge_threshold_mb": 0},
            env={FAILPOINT_PAUSE_ENV_VAR: f"clustering.files_written={pause:.1f}"},
        )
        details["runs"]["dual-writes"] = {
            **dual.summary(),
            "pause_seconds": pause,
            "split_threshold_bytes": threshold,
            "clustering_every_delta_commits": every,
        }
        print("  compaction-off, again (the machine's drift over the runs)", flush=True)
        again = _run(work / "compaction-off-again", w, bootstrap, loaded, {})
        details["runs"]["compaction-off-again"] = again.summary()
    results.insert(
        1,
        _compaction_result(
            "compaction-off-again", "ours: compaction off, run again last", w, again, details["load_seconds"]
        ),
    )
    results.append(
        _compaction_result(
            "clustering-async", "(b) ours: clustering async, all batches", w, dual, details["load_seconds"]
        )
    )
    classes, resizes = _dual_writes(dual)
    details["dual_writes"] = {"classes": {k: [b.instant for b in v] for k, v in classes.items()}, "resizes": resizes}
    for key, label in DUAL_CLASSES.items():
        results.append(_subset_result(f"dual-{key}", label, classes[key]))
    print("  resize bytes (bench.resize_bytes split)", flush=True)
    split = _resize_split(work / "resize", w)
    details["resize_split"] = split.to_json()
    results.append(
        PathResult(
            "resize-split",
            "(c) resize_bytes: one split plan",
            split.rows_rewritten,
            split.plan_seconds + split.execute_seconds,
            details=split.to_json(),
        )
    )

    notes += _compaction_notes(results, runs)
    details["read_amplification"] = {name: _read_amplification(run) for name, run in runs.items()}
    notes += _read_amplification_notes(results, details["read_amplification"], held)
    notes += _dual_notes(classes, resizes, pause, threshold, every)
    notes.append(
        f"(c) bench.resize_bytes split ({split.name}) of its skewed table ({min(w.initial_rows, RESIZE_MAX_ROWS):,} "
        f"rows, 4 partitions, 8 buckets, compacted): {split.buckets_touched}/{split.buckets_total} buckets, "
        f"touched {split.touched_bytes / MIB:.2f} MiB, written {split.written_bytes / MIB:.2f} MiB, "
        f"written/touched {split.ratio:.3f} (bound 1.1: {'met' if split.within_bound else 'NOT met'}), "
        f"table {split.table_bytes / MIB:.2f} MiB, other buckets untouched: "
        f"{'yes' if split.untouched_unchanged else 'NO'}; its row: rows rewritten, plan + execute seconds."
    )
    title = (
        f"Services: W1's {w.batches} batches of {w.batch_rows:,} records into {w.initial_rows:,} rows through "
        f"`streamer run --once` ({spark.MASTER}), by service mode"
    )
    return Section(title, "compaction-off", results, notes, details)


# -- runs ----------------------------------------------------------------------------------------


@dataclass
class Run:
    work: Path
    batches: list[Batch]
    services: list[tuple[datetime, str, str, float]]  # (logged, service, instant, seconds)
    wall: float
    rss: dict
    rows: int
    expected_rows: int
    settings: dict

    @property
    def counted(self) -> list[Batch]:
        return self.batches[WARMUP_BATCHES:]

    def intervals(self) -> list[float]:
        """Seconds from one batch's end to the next's: the cadence, inline services included."""
        ends = [b.ended for b in self.batches]
        return [(b - a).total_seconds() for a, b in zip(ends[WARMUP_BATCHES:], ends[WARMUP_BATCHES + 1 :])]

    def services_during_batches(self) -> list[tuple[datetime, str, str, float]]:
        last = self.batches[-1].ended
        return [s for s in self.services if s[0] <= last]

    def summary(self) -> dict:
        return {
            "micro_batches": len(self.batches),
            "wall_seconds": self.wall,
            "intervals": self.intervals(),
            "services_done": [(t.isoformat(), s, i, sec) for t, s, i, sec in self.services],
            "services_done_during_batches": len(self.services_during_batches()),
            "config": self.settings,
        }


def _produce(bootstrap: str, files: WorkloadFiles) -> dict:
    """W1's upsert batches (not the load: it is in the table already) as JSON messages."""
    records = [r for batch in files.batches() for r in kafka_records(batch)]
    create_topic(bootstrap, TOPIC, partitions=TOPIC_PARTITIONS)
    started = time.monotonic()
    produce(bootstrap, TOPIC, records)
    seconds = time.monotonic() - started
    print(f"  produced {len(records):,} messages in {seconds:.1f}s", flush=True)
    return {"topic_partitions": TOPIC_PARTITIONS, "messages": len(records), "produce_seconds": seconds}


def _run(
    work: Path, w: W1, bootstrap: str, loaded: Path, services: dict, index: dict | None = None, env: dict | None = None
) -> Run:
    """`streamer run --once` from a copy of the loaded table, as `bench.streaming.run` runs it."""
    work.mkdir(parents=True)
    shutil.copytree(loaded, work / "table")
    settings = streaming.config(work, w, bootstrap, TOPIC, TOPIC_PARTITIONS)
    settings["services"] = {**streaming.SERVICES_OFF, **services}
    settings["index"] = index or {"initial_buckets": BUCKETS}
    config_path = work / "orders.yaml"
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    argv = [sys.executable, "-m", "streamer.cli", "run", str(config_path), "--once", "--master", spark.MASTER]
    for key, value in spark.CONF.items():
        argv += ["--conf", f"{key}={value}"]
    log_path = work / "streamer.log"
    code, wall, rss = run_measured(argv, log_path, env)
    log = log_path.read_text()
    if code != 0:
        raise RuntimeError(f"streamer run exited {code}; log {log_path}:\n" + "\n".join(log.splitlines()[-30:]))
    batches, services_done = [], []
    for line in log.splitlines():
        if m := BATCH_LINE.match(line):
            batches.append(Batch(_time(m[1]), int(m[3].replace(",", "")), int(m[4]), m[5], float(m[6])))
        elif m := SERVICE_LINE.match(line):
            services_done.append((_time(m[1]), m[2], m[3], float(m[4])))
    rows = MorTable.load(str(work / "table")).snapshot(columns=["order_id"]).num_rows
    return Run(work, batches, services_done, wall, rss, rows, w.expected_rows(), settings)


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f")


def _compaction_result(name: str, label: str, w: W1, run: Run, load_seconds: float) -> PathResult:
    """A whole run; 'load s' is the in-process load of the table every run starts from a copy of."""
    counted = run.counted
    started = counted[0].ended.timestamp() - counted[0].seconds
    return PathResult(
        name,
        label,
        sum(b.records for b in counted),
        run.batches[-1].ended.timestamp() - started,
        [b.seconds for b in counted],
        load_seconds,
        run.rows,
        run.expected_rows,
        run.rss,
        {"intervals": run.intervals(), "whole_run_seconds": run.wall},
    )


def _subset_result(name: str, label: str, batches: list[Batch]) -> PathResult:
    """Some batches of one run: records/s is over the sum of their latencies (they are not
    consecutive), not wall time."""
    return PathResult(
        name,
        label,
        sum(b.records for b in batches),
        sum(b.seconds for b in batches),
        [b.seconds for b in batches],
        details={"instants": [b.instant for b in batches], "files": [b.files for b in batches]},
    )


def _p(values: list[float], q: int) -> float | None:
    return PathResult("", "", 0, 0.0, values).batch_percentile(q)


def _compaction_notes(results: list[PathResult], runs: dict[str, Run]) -> list[str]:
    off, again = (next(r for r in results if r.name == name) for name in ("compaction-off", "compaction-off-again"))
    notes = [
        f"(a) drift: the same run (compaction off) again after all others: p50 "
        f"x{again.batch_percentile(50) / off.batch_percentile(50):.2f}, p95 "
        f"x{again.batch_percentile(95) / off.batch_percentile(95):.2f}, records/s "
        f"x{again.records_per_second / off.records_per_second:.2f} of the first: the noise the ratios below "
        f"are within"
    ]
    for name in ("compaction-async", "compaction-inline"):
        r = next(r for r in results if r.name == name)
        run = runs[name]
        during = run.services_during_batches()
        ratio = {q: r.batch_percentile(q) / off.batch_percentile(q) for q in (50, 95)}
        cadence = [_p(run.intervals(), q) / _p(runs["compaction-off"].intervals(), q) for q in (50, 95)]
        throughput = r.records_per_second / off.records_per_second
        met = ratio[50] <= 1.2 and ratio[95] <= 1.2 and throughput >= 1 / 1.2
        target = (
            f"; target async/off within 1.2x (p50, p95, records/s): {'met' if met else 'NOT met'}"
            if "async" in name
            else ""
        )
        notes.append(
            f"(a) {name.removeprefix('compaction-')}/off: batch latency p50 x{ratio[50]:.2f}, p95 x{ratio[95]:.2f}; "
            f"records/s x{throughput:.2f}; batch-to-batch interval p50 "
            f"x{cadence[0]:.2f}, p95 x{cadence[1]:.2f}; {len(during)} compaction(s) finished during the batches "
            f"({sum(s[3] for s in during):.1f}s), {len(run.services) - len(during)} after them{target}"
        )
    return notes


def _read_amplification(run: Run) -> dict:
    """Log files a snapshot as of each counted batch's deltacommit reads: in all, and in its
    worst file group."""
    counted = {b.instant for b in run.counted}
    snapshots = [
        layout for instant, layout in MorTable.load(str(run.work / "table")).layout_history() if instant in counted
    ]
    totals = [sum(s.log_files for sizes in layout.partitions.values() for s in sizes.values()) for layout in snapshots]
    worst = [layout.log_files() for layout in snapshots]
    return {
        "log_files_per_snapshot": totals,
        "most_per_file_group": worst,
        "mean_log_files_per_snapshot": statistics.fmean(totals),
        "max_log_files_per_snapshot": max(totals),
        "max_log_files_per_file_group": max(worst),
    }


def _read_amplification_notes(results: list[PathResult], amplification: dict[str, dict], held: float) -> list[str]:
    notes = [
        f"read amplification: log files a snapshot read as of each counted batch's deltacommit (mean, max), "
        f"and the most in one file group; the 'held' runs hold each compaction {held:.0f}s "
        f"(MOR_STREAMER_PAUSE), so that batches outrun it; the bounded one has "
        f"services.compaction.max_log_files_per_group {BOUND}"
    ]
    for name, a in amplification.items():
        r = next(r for r in results if r.name == name)
        notes.append(
            f"read amplification, {name}: {a['mean_log_files_per_snapshot']:.1f} log files per snapshot "
            f"(max {a['max_log_files_per_snapshot']}), at most {a['max_log_files_per_file_group']} in one "
            f"file group; {r.records_per_second:,.0f} records/s"
        )
    return notes


def _dual_notes(
    classes: dict[str, list[Batch]], resizes: list[dict], pause: float, threshold: float, every: int
) -> list[str]:
    outside = [b.seconds for b in classes["outside"]]
    notes = [
        f"(b) clustering async every {every} deltacommits (the load's included: one resize, after the "
        f"first batches), split above {threshold / MIB:.2f} MiB (the largest "
        f"loaded bucket x{SPLIT_MARGIN}), merges off, compaction off, the resize held {pause:.0f}s at "
        f"clustering.files_written; a batch is 'dual writes' when it began (its deltacommit.requested) "
        f"between a replacecommit's requested and completed files, 'rewriting' when its span (Kafka read "
        f"included) also overlapped a rewrite (replacecommit.inflight to its last .hashing_meta); subset rows' records/s are over "
        f"the sum of their batch latencies."
    ]
    for key in ("rewriting", "held"):
        pending = [b.seconds for b in classes[key]]
        if outside and pending:
            notes.append(
                f"(b) {DUAL_CLASSES[key].removeprefix('(b) ')} vs none pending: p50 "
                f"x{_p(pending, 50) / _p(outside, 50):.2f}, p95 x{_p(pending, 95) / _p(outside, 95):.2f} "
                f"({len(pending)} vs {len(outside)} batches; files per batch "
                f"{statistics.fmean(b.files for b in classes[key]):.0f} vs "
                f"{statistics.fmean(b.files for b in classes['outside']):.0f})"
            )
        else:
            notes.append(
                f"(b) {DUAL_CLASSES[key].removeprefix('(b) ')}: {len(pending)} batch(es), "
                f"{len(outside)} with none pending: no ratio"
            )
    for r in resizes:
        notes.append(
            f"(c) resize {r['instant']} of run (b): {r['splits']} split(s), {r['merges']} merge(s), "
            f"touched {r['touched_bytes'] / MIB:.2f} MiB, written {r['written_bytes'] / MIB:.2f} MiB, "
            f"written/touched {r['written_bytes'] / r['touched_bytes']:.3f}; pending {r['pending_seconds']:.1f}s "
            f"(rewrite {r['rewrite_seconds']:.1f}s), {r['batches_dual']} batch(es) dual-wrote"
        )
    if not resizes:
        notes.append("(b) no resize was planned: the split threshold was never crossed")
    return notes


# -- (b): which batches dual-wrote ---------------------------------------------------------------


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _dual_writes(run: Run) -> tuple[dict[str, list[Batch]], list[dict]]:
    """Counted batches by class, and each replacecommit's window and bytes."""
    from bench.resize_bytes import slice_bytes
    from table import Instant, ReplaceCommitMetadata, read_clustering_plan

    table_path = run.work / "table"
    hoodie = table_path / ".hoodie"
    table = MorTable.load(str(table_path))
    timeline = table.timeline()
    windows = []
    for requested in sorted(hoodie.glob("*.replacecommit.requested")):
        instant = requested.name.split(".")[0]
        rings = [p.stat().st_mtime for p in (hoodie / ".bucket_index").rglob(f"{instant}.hashing_meta")]
        done = _mtime(hoodie / f"{instant}.replacecommit")
        inflight = _mtime(hoodie / f"{instant}.replacecommit.inflight")
        windows.append(
            {
                "instant": instant,
                "requested": requested.stat().st_mtime,
                "inflight": inflight,
                "rewritten": max(rings, default=None),
                "completed": done,
            }
        )
    classes: dict[str, list[Batch]] = {key: [] for key in DUAL_CLASSES}
    dual_count = {w["instant"]: 0 for w in windows}
    for batch in run.counted:
        # its deltacommit's timeline (loaded as it began) decides whether it dual-writes; its whole
        # span (Kafka read and decode included) whether it shared the CPU with a rewrite
        began = _mtime(hoodie / f"{batch.instant}.deltacommit.requested")
        ended = batch.ended.timestamp()
        started = ended - batch.seconds
        pending = [w for w in windows if w["requested"] < began and (w["completed"] is None or began < w["completed"])]
        if not pending:
            classes["outside"].append(batch)
            continue
        for w in pending:
            dual_count[w["instant"]] += 1
        rewriting = any(
            w["inflight"] is not None and started < (w["rewritten"] or ended) and w["inflight"] < ended for w in windows
        )
        classes["rewriting" if rewriting else "held"].append(batch)
    resizes = []
    for w in windows:
        plan = read_clustering_plan(timeline, w["instant"])
        kinds = [g.kind for g in plan.groups]
        written = None
        if w["completed"] is not None:
            metadata = ReplaceCommitMetadata.from_json(
                timeline.read_content(Instant(w["instant"], "replacecommit", "completed"))
            )
            written = sum(s.file_size_in_bytes for s in metadata.write_stats())
        resizes.append(
            {
                "instant": w["instant"],
                "splits": kinds.count("split"),
                "merges": kinds.count("merge"),
                "buckets": len(plan.file_groups()),
                "touched_bytes": sum(slice_bytes(table.storage, s) for g in plan.groups for s in g.slices),
                "written_bytes": written,
                "pending_seconds": (w["completed"] or w["requested"]) - w["requested"],
                "rewrite_seconds": (w["rewritten"] or 0) - (w["inflight"] or 0),
                "batches_dual": dual_count[w["instant"]],
                "window_mtimes": w,
            }
        )
    return classes, [r for r in resizes if r["written_bytes"] is not None]


# -- (c): a split measured by bench.resize_bytes -------------------------------------------------


def _resize_split(work: Path, w: W1):
    from bench import resize_bytes

    path = work / "table"
    orders = resize_bytes.Orders(min(w.initial_rows, RESIZE_MAX_ROWS), 4, w.seed)
    resize_bytes.build_table(path, orders, 8)
    resize_bytes.compact(MorTable.load(str(path)))
    return resize_bytes.run_clustering("split, middle", path, lambda t: resize_bytes.split_policy(t, "middle"))
