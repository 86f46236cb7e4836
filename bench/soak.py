"""The soak run: `streamer run` ingesting a steady order stream with every table service async,
for a bounded time, then checked.

    python -m bench.soak [--minutes 10] [--rate 200] [--partitions 3] [--max-slope 0.2] [--out soak-output] [--keep]

It starts Apache Kafka (from its Maven Central jars, `streamer.sandbox.kafka_broker`), produces a deterministic change stream (skewed upserts, inserts,
deletes; the table grows for its first minutes, then keeps its size) at a steady rate while
the job runs with a 5 s trigger, async compaction, clustering (bucket splits), clean and
archive, its JVM started with the options the job sets itself (as users run it, not the test
suite's), and samples every few seconds the RSS of the job's process kinds (driver JVM, Python driver, Python workers) and the table's commits and lag. At the end it
stops producing, waits for the job to catch up, stops it with SIGTERM and checks:

- the job kept up and stopped cleanly, and no pending instant survives a `streamer run --once`;
- the table equals the oracle through our reader and hudi-rs;
- every service ran and some bucket split;
- memory is flat: the slope of a linear fit of each kind's RSS over the second half of the run
  is at most `--max-slope` MiB a minute (MAX_SLOPE_MB_PER_MIN by default).

It prints a table over time, writes `report.json` (and the job's and broker's logs) under
`--out`, and exits 1 naming every failed check. It is not part of the pytest suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from streamer.checkpoint import table_checkpoint
from streamer.sandbox.change_events import as_kafka_records
from table import HASH_VALUE_MASK, MIB, MorTable, State, hash_value, read_archived_instants
from tests.support import kafka_broker
from tests.support.ingestion import (
    DATA_COLUMNS,
    end_offsets,
    hudi_rs_rows,
    order_config,
    our_rows,
    streamer_process,
    write_config,
)
from tests.support.oracle import Oracle

TOPIC = "soak-orders"
REGIONS = ("emea", "apac", "amer")
INITIAL_BUCKETS = 2
MAX_BUCKETS = 16
# A bucket splits past this size (base plus log files): at the default rate the hot eighth of the
# ring reaches it within a minute of the first commit, and its buckets go on splitting through a
# 10-minute run (to 9 buckets a partition), towards MAX_BUCKETS in longer ones.
SPLIT_THRESHOLD_MB = 0.1
TRIGGER_SECONDS = 5
SAMPLE_SECONDS = 3
#: How long the table grows (by new orders less deletes) before the stream holds its size
#: steady (`SoakOrders`): well inside the first half of the shortest run.
GROWTH_SECONDS = 150
#: The steepest RSS growth a process kind may show over the second half of the run. A leak of a
#: few KiB a batch shows over 5 minutes; a week at this slope adds 2 GiB.
MAX_SLOPE_MB_PER_MIN = 0.2
CATCH_UP_TIMEOUT = 600
STOP_TIMEOUT = 240
STATUSES = ("paid", "packed", "shipped", "delivered")
HOT_END = (HASH_VALUE_MASK + 1) // 8
KINDS = ("jvm", "python_driver", "python_workers")


# -- the change stream ---------------------------------------------------------------------------


class SoakOrders:
    """Deterministic order changes: 25% new orders, 70% updates, 5% deletes until `max_live`
    orders are live, then 15% new orders and 15% deletes, so that the table keeps its size.

    A table that grew all run long would grow its file groups past the last split the soak
    allows (`MAX_BUCKETS`), and with them what compacting one holds in memory: held at a steady
    size, any memory that still grows is the job's. New order ids are rejection-sampled so that
    90% hash into the first eighth of the consistent-hashing ring: that bucket grows and splits.
    Updates pick live orders with a skew (u**3 over the live list: a few orders change often,
    most rarely). `updated_at` only grows and a deleted order never comes back, so the expected
    table does not depend on batching, compaction or clustering.
    """

    #: (new orders, deletes): shares of the events while the table grows, then once it is full.
    GROWING = (0.25, 0.05)
    STEADY = (0.15, 0.15)

    def __init__(self, seed: int, max_live: int):
        self.rng = random.Random(seed)
        self.max_live = max_live
        self.next_id = 0
        self.clock = 0
        self.live: list[dict] = []  # the latest event of each order not deleted

    def _new_key(self) -> str:
        hot = self.rng.random() < 0.9
        while True:
            key = f"ord-{self.next_id:08d}"
            self.next_id += 1
            if (hash_value(key) < HOT_END) == hot:
                return key

    def events(self, count: int) -> list[dict]:
        out = []
        for _ in range(count):
            self.clock += 1
            roll = self.rng.random()
            new_share, delete_share = self.STEADY if len(self.live) >= self.max_live else self.GROWING
            if not self.live or roll < new_share:
                event = {
                    "order_id": self._new_key(),
                    "customer": f"cust-{self.rng.randint(1, 5000):05d}",
                    "region": self.rng.choice(REGIONS),
                    "amount": round(self.rng.uniform(5, 900), 2),
                    "status": "created",
                    "note": f"note {self.rng.randint(0, 10**9)}",
                    "updated_at": self.clock,
                    "deleted": False,
                }
                self.live.append(event)
            else:
                i = int(len(self.live) * self.rng.random() ** 3)
                if roll < 1 - delete_share:
                    event = dict(
                        self.live[i],
                        status=self.rng.choice(STATUSES),
                        amount=round(self.rng.uniform(5, 900), 2),
                        updated_at=self.clock,
                    )
                    self.live[i] = event
                else:
                    event = dict(self.live[i], updated_at=self.clock, deleted=True)
                    self.live[i] = self.live[-1]
                    self.live.pop()
            out.append(event)
        return out


class SteadyProducer(threading.Thread):
    """Produces `rate` events a second, one chunk a second, until stopped. Each chunk is one
    `produce` call, which ends every partition with a single-record batch, so the broker's end
    offsets always cover everything produced. Every chunk also goes to the oracle."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seed: int):
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        new_share, delete_share = SoakOrders.GROWING
        self.orders = SoakOrders(seed, max_live=int(rate * GROWTH_SECONDS * (new_share - delete_share)))
        self.oracle = Oracle("order_id", "updated_at", "deleted")
        self.ends: dict[int, int] = {}
        self.produced = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        start = time.monotonic()
        tick = 0
        try:
            while not self._stopping.is_set():
                events = self.orders.events(self.rate)
                offsets = kafka_broker.produce(self.bootstrap, self.topic, as_kafka_records(events))
                with self._lock:
                    self.oracle.apply_batch(events)
                    for partition, offset in offsets:
                        self.ends[partition] = max(self.ends.get(partition, 0), offset + 1)
                    self.produced += len(events)
                tick += 1
                self._stopping.wait(max(0.0, start + tick - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported as a failed check
            self.error = exc

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(60)

    def snapshot(self) -> tuple[int, dict[int, int]]:
        with self._lock:
            return self.produced, dict(self.ends)

    def expected_rows(self) -> dict:
        return {k: {c: r[c] for c in DATA_COLUMNS} for k, r in self.oracle.rows().items()}


# -- the job -------------------------------------------------------------------------------------


def soak_config(out: Path, bootstrap: str, rate: int) -> dict:
    """The orders table with every service async: clustering splits the hot buckets, compaction
    folds logs, clean keeps 3 commits and archival keeps the active timeline short."""
    return order_config(
        out,
        "orders",
        bootstrap,
        TOPIC,
        source={"max_offsets_per_trigger": rate * TRIGGER_SECONDS * 3},
        index={
            "initial_buckets": INITIAL_BUCKETS,
            "split_threshold_mb": SPLIT_THRESHOLD_MB,
            "merge_threshold_mb": SPLIT_THRESHOLD_MB / 10,
            "max_buckets": MAX_BUCKETS,
            "split_point": "distribution",
        },
        stream={"trigger_interval": f"{TRIGGER_SECONDS} seconds"},
        services={
            "clustering": {"mode": "async", "every_delta_commits": 3},
            "compaction": {"mode": "async", "every_delta_commits": 4},
            "clean": {"mode": "async", "every_delta_commits": 2, "retained": 3},
            "archive": {"mode": "async", "every_delta_commits": 2, "min_instants": 6, "max_instants": 9},
        },
    )


class Job:
    """`streamer run` in its own session (so a failed soak can stop the JVM and Python workers with
    it), its output copied to a log file."""

    def __init__(self, args: list[str], log_path: Path):
        self.proc = streamer_process(args, java_options=None, start_new_session=True)  # the JVM as users run it
        self.log_path = log_path
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        with open(self.log_path, "a") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float) -> int:
        """SIGTERM (a clean stop), then the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._copier.join(10)
        return code

    def kill(self) -> None:
        """Whatever is left of the job's session, JVM and workers included."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._copier.join(10)


def run_once(config: Path, log_path: Path) -> int:
    job = Job(["run", str(config), "--once"], log_path)
    try:
        return job.proc.wait(STOP_TIMEOUT)
    finally:
        job.kill()


# -- sampling ------------------------------------------------------------------------------------


def process_kind(proc: psutil.Process, root_pid: int) -> str:
    """The job's own process is the Python driver; the JVM it launches starts every other Python
    process (workers, their daemons, the streaming source runner)."""
    if proc.pid == root_pid:
        return "python_driver"
    name = proc.name()
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python_workers"
    return "other"


def memory_by_kind(root_pid: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """RSS and PSS in bytes and the process count of each kind in the job's process tree. RSS
    counts a page shared by several processes (a library, what a forked worker still shares with
    its daemon) in each of them; PSS divides it among them, so a kind's PSS is what it costs."""
    rss = dict.fromkeys(KINDS, 0)
    pss = dict.fromkeys(KINDS, 0)
    count = dict.fromkeys(KINDS, 0)
    try:
        root = psutil.Process(root_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return rss, pss, count
    for proc in tree:
        try:
            kind = process_kind(proc, root_pid)
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # a worker that just exited
            continue
        rss[kind] = rss.get(kind, 0) + info.rss
        pss[kind] = pss.get(kind, 0) + info.pss
        count[kind] = count.get(kind, 0) + 1
    return rss, pss, count


@dataclass
class Sample:
    seconds: float
    produced: int
    committed: int
    lag: int
    deltacommits: int
    compactions: int
    resizes: int
    cleans: int
    rss_mb: dict[str, float]
    pss_mb: dict[str, float]
    processes: dict[str, int]
    load_1m: float


@dataclass
class TableProgress:
    """Completed instants by action since the start. Archival removes instants from the active
    timeline, so each sample adds what is active now to what earlier samples saw."""

    path: str
    seen: dict[str, set[str]] = field(default_factory=dict)

    def update(self) -> None:
        if not MorTable.exists(self.path):
            return
        for instant in MorTable.load(self.path).timeline().completed():
            self.seen.setdefault(str(instant.action), set()).add(instant.timestamp)

    def count(self, action: str) -> int:
        return len(self.seen.get(action, ()))


def committed_records(path: str) -> dict[int, int]:
    """The next offset of each partition as of the table's last commit."""
    checkpoint = table_checkpoint(MorTable.load(path)) if MorTable.exists(path) else None
    return dict(checkpoint.offsets[TOPIC]) if checkpoint else {}


def take_sample(started: float, job: Job, producer: SteadyProducer, progress: TableProgress) -> Sample:
    rss, pss, processes = memory_by_kind(job.proc.pid)
    progress.update()
    produced, ends = producer.snapshot()
    committed = committed_records(progress.path)
    return Sample(
        seconds=round(time.monotonic() - started, 1),
        produced=produced,
        committed=sum(committed.values()),
        lag=sum(max(0, end - committed.get(p, 0)) for p, end in ends.items()),
        deltacommits=progress.count("deltacommit"),
        compactions=progress.count("commit"),
        resizes=progress.count("replacecommit"),
        cleans=progress.count("clean"),
        rss_mb={k: round(v / MIB, 1) for k, v in rss.items()},
        pss_mb={k: round(v / MIB, 1) for k, v in pss.items()},
        processes=processes,
        load_1m=round(os.getloadavg()[0], 2),
    )


# -- checks and the report -----------------------------------------------------------------------


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def rows_check(name: str, got: dict, want: dict) -> Check:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    different = [k for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    ok = not (missing or extra or different)
    detail = f"{len(got)} rows, {len(want)} expected"
    if not ok:
        detail += (
            f"; {len(missing)} missing {missing[:5]}, {len(extra)} unexpected {extra[:5]}, "
            f"{len(different)} different {[(got[k], want[k]) for k in different[:2]]}"
        )
    return Check(name, ok, detail)


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MiB) points, in MiB a minute."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (m - mean_m) for t, m in points) / spread if spread else 0.0


def memory_checks(samples: list[Sample], run_seconds: float, max_slope: float) -> list[Check]:
    """Per kind: the slope of its RSS over the second half of the run, against `max_slope`. A
    peak-against-peak comparison misses a slow leak; a fit over half the run does not, and the
    first half leaves start-up, the first workers and the JVM's heap sizing out of it."""
    second_half = [s for s in samples if run_seconds / 2 <= s.seconds <= run_seconds]
    checks = []
    for kind in KINDS:
        name = f"memory flat: {kind}"
        points = [(s.seconds, s.rss_mb[kind]) for s in second_half]
        if len(points) < 10:
            checks.append(Check(name, False, f"{len(points)} samples in the second half of the run, too few to fit"))
            continue
        slope = slope_mb_per_min(points)
        peak = max(s.rss_mb[kind] for s in samples)
        checks.append(
            Check(
                name,
                slope <= max_slope,
                f"slope {slope:+.3f} MiB/min over the second half (bound {max_slope}); "
                f"{points[0][1]:.0f} -> {points[-1][1]:.0f} MiB, peak {peak:.0f} MiB, "
                f"{second_half[-1].processes[kind]} process(es)",
            )
        )
    return checks


def minute_rows(samples: list[Sample], run_seconds: float) -> list[dict]:
    """One row per minute of the run (the state at its end, the peak RSS and PSS within it), then one for
    the end of the catch-up."""
    rows = []
    minutes = math.ceil(run_seconds / 60)
    for minute in range(1, minutes + 2):
        low, high = (minute - 1) * 60, (minute * 60 if minute <= minutes else math.inf)
        within = [s for s in samples if low < s.seconds <= high]
        if not within:
            continue
        last = within[-1]
        rows.append(
            {
                "minute": minute if minute <= minutes else "end",
                "produced": last.produced,
                "committed": last.committed,
                "lag": last.lag,
                "deltacommits": last.deltacommits,
                "compactions": last.compactions,
                "resizes": last.resizes,
                "cleans": last.cleans,
                **{f"{k}_mb": max(s.rss_mb[k] for s in within) for k in KINDS},
                **{f"{k}_pss_mb": max(s.pss_mb[k] for s in within) for k in KINDS},
                "load_1m": last.load_1m,
            }
        )
    return rows


def render_table(rows: list[dict]) -> str:
    columns = [
        "minute",
        "produced",
        "committed",
        "lag",
        "deltacommits",
        "compactions",
        "resizes",
        "cleans",
        *(f"{k}_mb" for k in KINDS),
        *(f"{k}_pss_mb" for k in KINDS),
        "load_1m",
    ]
    widths = {
        c: max(len(c), *(len(f"{r[c]:,}" if isinstance(r[c], int) else str(r[c])) for r in rows)) for c in columns
    }
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    for r in rows:
        lines.append("  ".join((f"{r[c]:,}" if isinstance(r[c], int) else str(r[c])).rjust(widths[c]) for c in columns))
    return "\n".join(lines)


def bucket_counts(path: str) -> dict[str, int]:
    table = MorTable.load(path)
    timeline = table.timeline()
    out = {}
    for region in REGIONS:
        metadata = table.hashing_metadata(f"region={region}", timeline)
        if metadata is not None:
            out[f"region={region}"] = len(metadata.nodes)
    return out


def instants_by_action(path: str) -> dict[str, int]:
    """Completed instants over the whole history, archived ones included."""
    table = MorTable.load(path)
    completed = {
        (i.timestamp, str(i.action))
        for i in [*read_archived_instants(table), *table.timeline().instants]
        if i.state is State.COMPLETED
    }
    counts: dict[str, int] = {}
    for _, action in completed:
        counts[action] = counts.get(action, 0) + 1
    return counts


# -- the run -------------------------------------------------------------------------------------


def soak(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for leftover in ("tables", "checkpoints", "configs", "kafka", "job.log", "broker.log", "report.json"):
        target = out / leftover
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    run_seconds = args.minutes * 60
    report: dict = {
        "minutes": args.minutes,
        "rate": args.rate,
        "partitions": args.partitions,
        "seed": args.seed,
        "trigger_seconds": TRIGGER_SECONDS,
        "cpus": os.cpu_count(),
        "load_at_start": os.getloadavg(),
    }
    checks: list[Check] = []
    samples: list[Sample] = []
    broker = kafka_broker.KafkaBroker(out / "kafka", log_path=out / "broker.log").start()
    job = producer = None
    try:
        kafka_broker.create_topic(broker.bootstrap, TOPIC, partitions=args.partitions)
        config = write_config(out / "configs", soak_config(out, broker.bootstrap, args.rate))
        path = str(out / "tables" / "orders")
        report["table"] = path
        print(
            f"soak: {args.minutes} min at {args.rate} records/s into {args.partitions} partitions; "
            f"table {path}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
            flush=True,
        )

        job = Job(["run", str(config)], out / "job.log")
        producer = SteadyProducer(broker.bootstrap, TOPIC, args.rate, args.seed)
        progress = TableProgress(path)
        started = time.monotonic()
        producer.start()
        next_minute = 60
        while time.monotonic() - started < run_seconds and job.running() and producer.error is None:
            time.sleep(SAMPLE_SECONDS)
            samples.append(take_sample(started, job, producer, progress))
            if samples[-1].seconds >= next_minute:
                s = samples[-1]
                print(
                    f"  {s.seconds / 60:5.1f} min: {s.committed:,} of {s.produced:,} committed, "
                    f"{s.deltacommits} deltacommits, {s.compactions} compactions, {s.resizes} resizes, "
                    f"RSS MiB { ({k: s.rss_mb[k] for k in KINDS}) }, PSS MiB { ({k: s.pss_mb[k] for k in KINDS}) }, "
                    f"load {s.load_1m}",
                    flush=True,
                )
                next_minute += 60
        producer.stop()
        produced, ends = producer.snapshot()
        report["produced"] = produced
        kept_rate = produced >= 0.9 * args.rate * run_seconds
        checks.append(
            Check(
                "producer kept its rate",
                producer.error is None and kept_rate,
                repr(producer.error)
                if producer.error
                else f"{produced:,} records, {produced / run_seconds:.0f}/s for a target of {args.rate}/s",
            )
        )
        checks.append(
            Check(
                "job ran the whole time",
                job.running(),
                "running" if job.running() else f"exited with {job.proc.returncode}; see job.log",
            )
        )

        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while job.running() and committed_records(path) != ends and time.monotonic() < deadline:
            time.sleep(SAMPLE_SECONDS)
            samples.append(take_sample(started, job, producer, progress))
        caught_up = committed_records(path) == ends == end_offsets(broker.bootstrap, TOPIC)
        report["catch_up_seconds"] = round(time.monotonic() - started - run_seconds, 1)
        checks.append(
            Check(
                "caught up",
                caught_up,
                f"{report['catch_up_seconds']} s after producing stopped; "
                f"committed {committed_records(path)}, end offsets {ends}",
            )
        )
        if job.running():
            code = job.stop(STOP_TIMEOUT)
            checks.append(Check("clean stop on SIGTERM", code == 0, f"exit status {code}"))

        pending = [i.file_name for i in MorTable.load(path).timeline().pending()]
        report["pending_after_stop"] = pending
        if pending:
            code = run_once(config, out / "job.log")
            checks.append(Check("restart with --once", code == 0, f"exit status {code}; pending before: {pending}"))
            pending = [i.file_name for i in MorTable.load(path).timeline().pending()]
        checks.append(Check("no pending instants", not pending, str(pending)))

        expected = producer.expected_rows()
        checks.append(rows_check("our reader equals the oracle", our_rows(path), expected))
        checks.append(rows_check("hudi-rs equals the oracle", hudi_rs_rows(path), expected))

        history = instants_by_action(path)
        buckets = bucket_counts(path)
        archived = len(read_archived_instants(MorTable.load(path)))
        report.update(instants=history, buckets=buckets, archived_instants=archived)
        for service, action in (("compaction", "commit"), ("resize", "replacecommit"), ("clean", "clean")):
            checks.append(Check(f"{service} ran", history.get(action, 0) > 0, f"{history.get(action, 0)} completed"))
        checks.append(Check("archival ran", archived > 0, f"{archived} instants archived"))
        checks.append(
            Check(
                "some bucket split",
                sum(buckets.values()) > INITIAL_BUCKETS * len(REGIONS),
                f"buckets {buckets}, {INITIAL_BUCKETS} each at the start",
            )
        )
        checks += memory_checks(samples, run_seconds, args.max_slope)
    except Exception as exc:  # noqa: BLE001 - the report names any failure
        traceback.print_exc()
        checks.append(Check("soak completed", False, f"{type(exc).__name__}: {exc}"))
    finally:
        if job is not None:
            job.kill()
        if producer is not None:
            producer.stop()
        broker.stop()

    rows = minute_rows(samples, run_seconds)
    report.update(
        load_at_end=os.getloadavg(),
        table_over_time=rows,
        samples=[asdict(s) for s in samples],
        checks=[asdict(c) for c in checks],
    )
    (out / "report.json").write_text(json.dumps(report, indent=2))
    if rows:
        print(render_table(rows))
    for c in checks:
        print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    if not args.keep:
        for kept in ("tables", "checkpoints"):
            shutil.rmtree(out / kept, ignore_errors=True)
    failed = [c.name for c in checks if not c.ok]
    print(f"report {out / 'report.json'}; load average at the end {os.getloadavg()[0]:.2f}")
    if failed:
        print(f"soak FAILED: {', '.join(failed)}")
        return 1
    print("soak passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10, help="how long to produce (default 10)")
    parser.add_argument(
        "--rate", type=int, default=200, metavar="RECORDS_PER_S", help="records produced a second (default 200)"
    )
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topic (default 3)")
    parser.add_argument(
        "--max-slope",
        type=float,
        default=MAX_SLOPE_MB_PER_MIN,
        metavar="MIB_PER_MIN",
        help=f"steepest RSS growth of a process kind (default {MAX_SLOPE_MB_PER_MIN} MiB/min)",
    )
    parser.add_argument("--seed", type=int, default=11, help="seed of the change stream (default 11)")
    parser.add_argument("--out", default="soak-output", help="directory for the report, logs and table")
    parser.add_argument("--keep", action="store_true", help="keep the table and checkpoint under --out")
    args = parser.parse_args(argv)
    for name in ("minutes", "rate", "partitions"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
