"""Bucket resizing (clustering) inside the streaming job: splits planned on a skewed key stream,
executed in the background while micro-batches go on writing to both the old and the new file
groups (dual writes), and a process killed in the middle of it.

Every test runs `streamer run` as its own process against the session's broker and checks what a
user sees: the rows through our reader and hudi-rs against an oracle, the offsets the table
records against the topic's end, and the buckets and files on disk.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from table.index import consistent_hashing as ring
from table.mor_table import MorTable
from table.plans.clustering import ClusteringPlan, read_clustering_plan
from table.storage.layout import BaseFileName, LogFileName
from table.storage.markers import marked_files
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.timeline import Instant, Timeline
from tests.support.ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    expected_rows,
    hudi_rs_rows,
    order_config,
    our_rows,
    produce_orders,
    run_streamer,
    streamer_process,
    write_config,
)

pytestmark = pytest.mark.e2e

REGIONS = ("emea", "apac")
INITIAL_BUCKETS = 2
HOT_END = (ring.HASH_VALUE_MASK + 1) // 8  # the hot keys hash into [0, HOT_END): an eighth of the ring
STATUSES = ("paid", "packed", "shipped", "delivered")
# A log file is 7 KiB even for a few records (a parquet block), so a threshold of a few log files
# splits every bucket. With 600 records a batch this one splits the hot bucket of each partition
# after the second batch (base and logs near 45 KiB) and not the cold one (near 20 KiB); the bound
# keeps batches (a log file per bucket written) cheap.
SPLIT_THRESHOLD_MB = 0.03
MAX_BUCKETS = 16


# -- a skewed order stream ------------------------------------------------------------------------


class SkewedOrders:
    """Order changes whose keys crowd into the first eighth of the consistent-hashing ring: about
    90% of the order ids are rejection-sampled to hash below HOT_END, so the bucket holding that
    range grows and splits while its neighbours stay small. `updated_at` only grows, so the
    expected table does not depend on batching, compaction or clustering."""

    def __init__(self, seed: int, hot_fraction: float = 0.9):
        self.rng = random.Random(seed)
        self.hot_fraction = hot_fraction
        self.next_id = 0
        self.clock = 0
        self.live: list[dict] = []  # the latest event of each order not deleted

    def _new_key(self) -> str:
        hot = self.rng.random() < self.hot_fraction
        while True:
            key = f"ord-{self.next_id:07d}"
            self.next_id += 1
            if (ring.hash_value(key) < HOT_END) == hot:
                return key

    def events(self, count: int) -> list[dict]:
        out = []
        for _ in range(count):
            self.clock += 1
            roll = self.rng.random()
            if not self.live or roll < 0.45:
                key = self._new_key()
                event = {
                    "order_id": key,
                    "customer": f"cust-{self.rng.randint(1, 500):04d}",
                    "region": self.rng.choice(REGIONS),
                    "amount": round(self.rng.uniform(5, 900), 2),
                    "status": "created",
                    "note": f"note {self.rng.randint(0, 10**9)}",
                    "updated_at": self.clock,
                    "deleted": False,
                }
                self.live.append(event)
            else:
                i = self.rng.randrange(len(self.live))
                if roll < 0.95:
                    event = dict(
                        self.live[i],
                        status=self.rng.choice(STATUSES),
                        amount=round(self.rng.uniform(5, 900), 2),
                        updated_at=self.clock,
                    )
                    self.live[i] = event
                else:
                    event = dict(self.live.pop(i), updated_at=self.clock, deleted=True)
            out.append(event)
        return out


def test_the_stream_is_skewed():
    orders = SkewedOrders(seed=1)
    keys = {e["order_id"] for e in orders.events(4_000)}
    hot = sum(ring.hash_value(k) < HOT_END for k in keys)
    assert 0.85 < hot / len(keys) < 0.95


# -- looking at a table ---------------------------------------------------------------------------


def clustering_config(tmp_path: Path, bootstrap: str, topic: str, services: dict | None = None, **overrides) -> dict:
    """An orders table whose hot buckets split: async clustering every 2 deltacommits, inline
    compaction every 3; `services` adds or replaces service sections."""
    return order_config(
        tmp_path,
        "orders",
        bootstrap,
        topic,
        index={
            "initial_buckets": INITIAL_BUCKETS,
            "split_threshold_mb": SPLIT_THRESHOLD_MB,
            "merge_threshold_mb": 0.002,
            "min_buckets": 1,
            "max_buckets": MAX_BUCKETS,
            "split_point": "distribution",
        },
        services={
            "clustering": {"mode": "async", "every_delta_commits": 2},
            "compaction": {"mode": "inline", "every_delta_commits": 3},
            **(services or {}),
        },
        **overrides,
    )


def bucket_counts(path: str) -> dict[str, int]:
    """Buckets of each partition: the nodes of its latest committed hashing metadata (whose
    `numBuckets` stays the initial count after resizes, as in Hudi)."""
    table = MorTable.load(path)
    completed = set(table.timeline().completed_timestamps().active)
    out = {}
    for partition in (f"region={r}" for r in REGIONS):
        metadata = ring.load_latest(table.storage, partition, completed, repair=False)
        if metadata is not None:
            out[partition] = len(metadata.nodes)
    return out


def assert_file_groups_are_the_buckets(path: str) -> None:
    """The file groups readers see in each partition are exactly the buckets of its latest
    committed ring: no replaced group left in the view, no child group without its node."""
    table = MorTable.load(path)
    timeline = table.timeline()
    completed = set(timeline.completed_timestamps().active)
    view = table.file_system_view(timeline=timeline)
    for partition in (f"region={r}" for r in REGIONS):
        metadata = ring.load_latest(table.storage, partition, completed, repair=False)
        live = {f for f, g in view.file_groups(partition).items() if g.latest_slice() is not None}
        assert live == set(metadata.file_ids), (partition, sorted(live ^ set(metadata.file_ids)))


def log_files(path: str) -> list[LogFileName]:
    out = []
    for region in REGIONS:
        directory = Path(path) / f"region={region}"
        if directory.is_dir():
            out += [n for n in map(LogFileName.parse, os.listdir(directory)) if n is not None]
    return out


def write_stats_of(timeline: Timeline, instant: Instant):
    return CommitMetadata.from_json(timeline.read_content(instant)).write_stats()


def completed_at(path: str, instant: Instant) -> float:
    """When the instant completed: the modification time of its completed file."""
    return os.path.getmtime(os.path.join(path, ".hoodie", instant.file_name))


def dual_written_resizes(path: str) -> dict[str, list[str]]:
    """Completed resizes -> the deltacommits that completed while the resize was pending (newer
    than its plan, completed before it) and wrote to a planned (old) file group and to one of
    its children in the same commit: the dual writes."""
    timeline = MorTable.load(path).timeline()
    out = {}
    for replace in timeline.completed("replacecommit"):
        plan = read_clustering_plan(timeline, replace.timestamp)
        if plan is None:
            continue
        olds = {f for _, f in plan.file_groups()}
        children = {f for _, f in plan.child_file_groups()}
        done = completed_at(path, replace)
        during = []
        for delta in timeline.completed("deltacommit"):
            if delta.timestamp <= replace.timestamp or completed_at(path, delta) >= done:
                continue
            written = {s.file_id for s in write_stats_of(timeline, delta)}
            if written & olds and written & children:
                during.append(delta.timestamp)
        if during:
            out[replace.timestamp] = during
    return out


def child_logs_based_at(path: str, plan: ClusteringPlan) -> list[LogFileName]:
    """The log files of the plan's children that start a slice at the plan's instant."""
    children = {f for _, f in plan.child_file_groups()}
    return [n for n in log_files(path) if n.file_id in children and n.base_instant == plan.instant]


class Job:
    """`streamer run` in its own process, its output collected on a thread (a long run would
    otherwise fill the pipe and block)."""

    def __init__(self, args: list[str], env: dict | None = None):
        self.proc = streamer_process(args, env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, then the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait_for(self, condition, timeout: float, what: str, poll: float = 0.5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(10)
                raise AssertionError(
                    f"the job exited ({self.proc.returncode}) while waiting for {what}:\n{self.output}"
                )
            value = condition()
            if value:
                return value
            time.sleep(poll)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output[-20_000:]}")


def _timeline(path: str) -> Timeline | None:
    if not MorTable.exists(path):
        return None
    return MorTable.load(path).timeline()


# -- the tests ------------------------------------------------------------------------------------


def test_async_resize_with_dual_writes_equals_the_oracle_through_both_readers(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    orders = SkewedOrders(seed=3)
    events = orders.events(3_000)
    produce_orders(kafka_bootstrap, topic, events)
    config = write_config(
        tmp_path / "configs",
        clustering_config(
            # no archival: every replacecommit and its plan stay on the active timeline to be checked
            tmp_path,
            kafka_bootstrap,
            topic,
            services={"archive": {"mode": "off"}},
            source={"max_offsets_per_trigger": 600},
            stream={"trigger_interval": "1 second"},
        ),
    )
    path = str(tmp_path / "tables" / "orders")

    # The executor holds each resize pending for a while after writing the children's base
    # files, so that micro-batches commit (and dual-write) meanwhile.
    job = Job(["run", str(config)], env={"MOR_STREAMER_PAUSE": "clustering.files_written=6"})
    try:
        job.wait_for(lambda: (t := _timeline(path)) and t.pending("replacecommit"), 150, "a pending resize")
        round_two = orders.events(1_200)
        produce_orders(kafka_bootstrap, topic, round_two)
        events += round_two
        job.wait_for(lambda: _timeline(path).completed("replacecommit"), 120, "a completed resize")
        round_three = orders.events(1_200)
        produce_orders(kafka_bootstrap, topic, round_three)
        events += round_three
        ends = end_offsets(kafka_bootstrap, topic)

        def drained() -> bool:
            timeline = _timeline(path)
            return (
                committed_offsets(path, topic) == ends
                and not timeline.pending("replacecommit")
                and not timeline.pending("deltacommit")
            )

        job.wait_for(drained, 180, "the topic drained and no resize pending")
        code = job.stop()
    finally:
        job.kill()
    assert code == 0, job.output

    assert_table_matches(path, events)
    assert committed_offsets(path, topic) == end_offsets(kafka_bootstrap, topic)
    timeline = MorTable.load(path).timeline()
    assert timeline.pending() == [], timeline.pending()
    counts = bucket_counts(path)
    assert set(counts) == {f"region={r}" for r in REGIONS}
    assert_file_groups_are_the_buckets(path)
    assert sum(counts.values()) > INITIAL_BUCKETS * len(REGIONS), counts
    dual = dual_written_resizes(path)
    assert dual, "no deltacommit completed while a resize was pending and wrote to both sides"
    for instant in dual:
        plan = read_clustering_plan(timeline, instant)
        assert child_logs_based_at(path, plan), f"no child of {instant} has a log based at {instant}"


BATCH, BATCHES = 600, 7


# The sixth micro-batch wrote its files, dual writes included, and dies before its deltacommit
# completes. The resize, planned after the second or fourth, is held after its executor wrote the
# children's base files, so the kill leaves both a batch and a resize half done.
KILL_AT, HOLD_RESIZE = "deltacommit.files_written:6", "clustering.files_written=60"


def test_process_killed_during_a_pending_resize_with_dual_writes_restarts_to_a_correct_table(
    kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = SkewedOrders(seed=7).events(BATCHES * BATCH)
    offsets = produce_orders(kafka_bootstrap, topic, events)
    config = write_config(
        tmp_path / "configs",
        clustering_config(tmp_path, kafka_bootstrap, topic, source={"max_offsets_per_trigger": BATCH}),
    )
    path = str(tmp_path / "tables" / "orders")

    code, out = run_streamer(
        ["run", str(config), "--once"], env={"MOR_STREAMER_FAILPOINT": KILL_AT, "MOR_STREAMER_PAUSE": HOLD_RESIZE}
    )
    assert code == -signal.SIGKILL, out

    # Killed with a resize pending after batches dual-wrote to its children.
    timeline = MorTable.load(path).timeline()
    (pending,) = timeline.pending("replacecommit")
    plan = read_clustering_plan(timeline, pending.timestamp)
    assert plan is not None and plan.child_file_groups()
    olds = {f for _, f in plan.file_groups()}
    children = {f for _, f in plan.child_file_groups()}
    dual = [
        d
        for d in timeline.completed("deltacommit")
        if d.timestamp > pending.timestamp
        and all(side & {s.file_id for s in write_stats_of(timeline, d)} for side in (olds, children))
    ]
    assert dual, "no batch committed while the resize was pending"
    assert child_logs_based_at(path, plan)
    storage = MorTable.load(path).storage
    resized = {BaseFileName.parse(f.rsplit("/", 1)[-1]) for f in marked_files(storage, pending.timestamp)}
    assert {n.file_id for n in resized if n is not None} == children, "the executor had not written the children"
    (inflight,) = timeline.pending("deltacommit")  # the killed batch had written to the children too
    written = {LogFileName.parse(f.rsplit("/", 1)[-1]) for f in marked_files(storage, inflight.timestamp)}
    assert children & {n.file_id for n in written if n is not None}
    assert_file_groups_are_the_buckets(path)  # still the old buckets
    # What readers see meanwhile is exactly the committed batches, through the old buckets only.
    ends = committed_offsets(path, topic)
    covered = [e for e, (p, o) in zip(events, offsets) if o < ends.get(p, 0)]
    expected = expected_rows(covered)
    assert our_rows(path) == expected
    assert hudi_rs_rows(path) == expected

    code, out = run_streamer(["run", str(config), "--once"])
    assert code == 0, out

    timeline = MorTable.load(path).timeline()
    assert timeline.pending("replacecommit") == [] and timeline.pending("deltacommit") == [], timeline.pending()
    assert pending.timestamp in [i.timestamp for i in timeline.completed("replacecommit")], (
        "the restart did not finish the crashed resize"
    )
    assert_table_matches(path, events)
    assert committed_offsets(path, topic) == end_offsets(kafka_bootstrap, topic)
    assert sum(bucket_counts(path).values()) > INITIAL_BUCKETS * len(REGIONS)
    assert_file_groups_are_the_buckets(path)
