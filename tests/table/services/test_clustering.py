"""Bucket resizing and clustering: splits, merges and sorts as replacecommits, dual writes while
a plan is pending, execution, crashes, rollback, and every reader exact in every state.

Streams keep a monotonic clock between batches (updates and deletes of a key only move
forward), so the oracle does not depend on compaction forgetting delete tombstones.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from table.errors import ClusteringConflictError
from table.index import consistent_hashing as ring
from table.mor_table import MorTable, TableSpec
from table.plans.clustering import CHILD_NODES_KEY, PARTITION_KEY, SEQUENCE_NUMBER_KEY, read_clustering_plan
from table.plans.pending import pending_clusterings
from table.services.clean import CleanPolicy, clean
from table.services.clustering.execute import (
    execute_clustering,
    executor_lease_path,
    rollback_clustering,
)
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering
from table.services.compaction import CompactionStrategy, execute_compaction, schedule_compaction
from table.storage.layout import HASHING_METADATA_DIR
from table.storage.lease import WriterLease
from table.timeline.commit_metadata import ReplaceCommitMetadata
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import Instant
from table.write.file_group_writer import WriteTask, write_file_groups
from table.write.prepare import prepare_batch
from tests.support.oracle import Oracle
from tests.support.orders import DATA_COLUMNS, SCHEMA, by_key, hudi_rs_read, make_table, row, strip, write_options

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
KB = 1024
HOT_RANGE = (ring.HASH_VALUE_MASK + 1) // 8  # the skewed keys' hashes fall in the first eighth


class SkewedStream:
    """Order changes whose new keys mostly hash into a narrow part of the ring."""

    def __init__(self, writer, seed: int = 7, size: int = 1000, hot_share: float = 0.9):
        self.writer = writer
        self.rng = random.Random(seed)
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.size = size
        self.hot_share = hot_share
        self.known: list[str] = []
        self.next_id = 0
        self.batches = 0

    def new_key(self) -> str:
        hot = self.rng.random() < self.hot_share
        while True:
            key = f"o-{self.next_id:07d}"
            self.next_id += 1
            if (ring.hash_value(key) < HOT_RANGE) == hot:
                return key

    def batch(self, inserts: float = 0.7, deletes: float = 0.05) -> list[dict]:
        clock = 1000 + 100 * self.batches
        rows = []
        for _ in range(self.size):
            roll = self.rng.random()
            if not self.known or roll < inserts:
                key = self.new_key()
                self.known.append(key)
                rows.append(row(key, clock, deleted=False, rng=self.rng))
            else:
                rows.append(
                    row(
                        self.rng.choice(self.known),
                        clock + self.rng.randint(0, 50),
                        deleted=roll > 1 - deletes,
                        rng=self.rng,
                    )
                )
        return rows

    def commit(self, rows: list[dict] | None = None) -> str:
        rows = rows if rows is not None else self.batch()
        self.batches += 1
        self.oracle.apply_batch(rows)
        return self.writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))

    def expected(self) -> dict:
        return strip(self.oracle.rows(), DATA_COLUMNS)


def unpartitioned_table(path: Path) -> MorTable:
    return MorTable.create(
        str(path), TableSpec("orders", SCHEMA.remove(SCHEMA.get_field_index("is_deleted")), ("order_id",), "updated_at")
    )


def ours(path: Path) -> dict:
    return strip(by_key(MorTable.load(str(path)).snapshot()), DATA_COLUMNS)


def theirs(path: Path) -> dict:
    return strip(by_key(hudi_rs_read(path)), DATA_COLUMNS)


def assert_readers_exact(path: Path, stream: SkewedStream, state: str) -> None:
    """Both readers equal the oracle, and no key is read twice."""
    expected = stream.expected()
    for name, table in (("ours", MorTable.load(str(path)).snapshot()), ("hudi-rs", hudi_rs_read(path))):
        keys = table.column("order_id").to_pylist() if table.num_rows else []
        assert len(keys) == len(set(keys)), f"{name} reads keys twice {state}"
        assert strip(by_key(table), DATA_COLUMNS) == expected, f"{name} differs from the oracle {state}"


def bucket_sizes(table: MorTable, partition: str = "") -> list[int]:
    """Bytes of each bucket's latest slice, in ring order (0 for a bucket with no files yet)."""
    metadata = ring.load_latest(table.storage, partition, table.timeline().completed_timestamps().active)
    groups = table.file_system_view().file_groups(partition)
    return [groups[n.file_id].latest_slice().total_size if n.file_id in groups else 0 for n in metadata.nodes]


def compact_all(writer) -> None:
    instant = schedule_compaction(writer, CompactionStrategy())
    if instant:
        execute_compaction(writer.table, instant)


def files_of(path: Path, file_ids: set[str]) -> dict[str, int]:
    """Name -> size of the data files of the given file groups."""
    return {
        p.name: p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and any(f in p.name for f in file_ids)
    }


# ~25 bytes a row and ~3 KiB a file once compacted: these thresholds split above ~800 rows and
# merge below ~300
POLICY = ClusteringPolicy(split_threshold_bytes=24 * KB, merge_threshold_bytes=11 * KB, split_point="distribution")


# -- the whole story -----------------------------------------------------------------------------


def test_skewed_keys_converge_to_buckets_within_2x_with_both_readers_exact_in_every_state(tmp_path):
    path = tmp_path / "orders"
    table = unpartitioned_table(path)
    plans = 0
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = SkewedStream(writer)
        for round_ in range(5):
            stream.commit()
            stream.commit()
            compact_all(writer)
            assert_readers_exact(path, stream, f"with no plan (round {round_})")
            instant = schedule_clustering(writer, POLICY)
            if instant is None:
                continue
            plans += 1
            stream.commit()  # dual writes
            assert_readers_exact(path, stream, f"while {instant} is pending")
            execute_clustering(table, instant)
            assert_readers_exact(path, stream, f"after {instant} completed")
            stream.commit()
            assert_readers_exact(path, stream, f"after writing to the children of {instant}")
        while (instant := schedule_clustering(writer, POLICY)) is not None:  # the stream stopped: settle
            plans += 1
            execute_clustering(table, instant)
            compact_all(writer)
        for _ in range(4):
            stream.commit(stream.batch(inserts=0, deletes=0))
        assert clean(writer, CleanPolicy(kind="keep_latest_commits", retained=2)) is not None
        assert_readers_exact(path, stream, "after cleaning the replaced file groups")
        compact_all(writer)

    sizes = bucket_sizes(table)
    assert plans >= 3 and len(sizes) >= 8
    assert max(sizes) <= 2 * min(sizes), sizes
    replaced = {
        f
        for c in table.timeline().completed("replacecommit")
        for ids in ReplaceCommitMetadata.from_json(
            table.timeline().read_content(c)
        ).partition_to_replace_file_ids.values()
        for f in ids
    }
    assert not files_of(path, replaced), "the cleaner removes replaced file groups"


# -- dual writes ---------------------------------------------------------------------------------


def split_plan(tmp_path: Path, commits: int = 2, split_point: str = "middle"):
    path = tmp_path / "orders"
    table = unpartitioned_table(path)
    writer = table.writer(write_options(initial_buckets=2)).open()
    stream = SkewedStream(writer, size=1500)
    for _ in range(commits):
        stream.commit()
    policy = ClusteringPolicy(split_threshold_bytes=20 * KB, merge_threshold_bytes=0, split_point=split_point)
    instant = schedule_clustering(writer, policy)
    assert instant is not None
    return path, table, writer, stream, instant


def test_writes_while_a_resize_is_pending_are_read_before_and_after_completion_and_never_twice(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    try:
        plan = read_clustering_plan(table.timeline(), instant)
        old = set(plan.groups[0].file_ids)
        children = set(plan.groups[0].child_file_ids)
        updates = [row(k, 5000, deleted=False, rng=stream.rng) for k in stream.known[:300]]
        inserts = stream.batch(inserts=1.0)[:300]
        dual = stream.commit(updates + inserts)

        written = {st.file_id for st in writer.last_commit.write_stats()}
        assert old | children <= written, "each record goes to its old group and to its child"
        logs = [p.name for p in path.glob(".*.log.*") if f"_{instant}.log." in p.name]
        assert logs and {name[1:].split("_")[0] for name in logs} == children, "child logs start at the plan's instant"
        assert_readers_exact(path, stream, "while the resize is pending")

        execute_clustering(table, instant)
        assert_readers_exact(path, stream, "once the resize completed")
        groups = table.file_system_view().file_groups("")
        assert not old & set(groups) and children <= set(groups)
        snapshot = by_key(table.snapshot())
        assert {k for k, r in snapshot.items() if r["_hoodie_commit_time"] == dual} == {
            r["order_id"] for r in updates + inserts
        }

        stream.commit()  # the writer now routes to the children only
        assert not {st.file_id for st in writer.last_commit.write_stats()} & old
        assert_readers_exact(path, stream, "after writing past the resize")
    finally:
        writer.close()


def test_a_commit_that_began_while_a_resize_was_pending_dual_writes_though_the_resize_completes_first(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    try:
        rows = stream.batch()
        stream.batches += 1
        stream.oracle.apply_batch(rows)
        records = pa.Table.from_pylist(rows, schema=SCHEMA)
        prepared = prepare_batch(records, writer.batch_spec, writer.key_generator)
        commit = writer.begin_delta_commit(writer.check_schema(records.schema))  # the resize is pending for it
        execute_clustering(table, instant)  # an async executor completes it before the commit writes
        delta = commit.complete(
            write_file_groups(commit.context, WriteTask(0), commit.routing, commit.routing.route(prepared))
        )

        assert not list(path.glob(f"*_{delta}.parquet")), "no new base file hides the resize's output"
        assert_readers_exact(path, stream, "after a commit that straddled the completion")
    finally:
        writer.close()


def test_a_resize_rewrites_only_the_buckets_in_its_plan(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)  # four partitions, four buckets each
    with table.writer(write_options()) as writer:
        stream = SkewedStream(writer, size=2000, hot_share=0.0)
        stream.commit()
        policy = ClusteringPolicy(
            split_threshold_bytes=4 * KB, merge_threshold_bytes=0, max_partitions=1, max_buckets=6
        )
        sizes_before = {g.file_id: g.latest_slice().total_size for g in table.file_system_view().all_file_groups()}
        all_groups = set(sizes_before)
        instant = schedule_clustering(writer, policy)
    plan = read_clustering_plan(table.timeline(), instant)
    touched = {f for g in plan.groups for f in g.file_ids}
    assert len(plan.partition_paths) == 1 and len(plan.groups) == 2  # max_partitions, then max_buckets
    untouched_before = files_of(path, all_groups - touched)

    result = execute_clustering(table, instant)

    assert files_of(path, all_groups - touched) == untouched_before
    written = {s.file_id for s in result.write_stats}
    assert written == {f for g in plan.groups for f in g.child_file_ids}
    # 2 of 16 buckets: a small share of the table (bench/resize_bytes.py measures the ratio to the
    # touched buckets' bytes at realistic sizes, where a file's fixed overhead does not dominate)
    assert result.bytes_written < 0.35 * sum(sizes_before.values())
    metadata = ReplaceCommitMetadata.from_json(
        table.timeline().read_content(Instant(instant, "replacecommit", "completed"))
    )
    assert metadata.operation_type == "CLUSTER"
    assert {f for ids in metadata.partition_to_replace_file_ids.values() for f in ids} == touched


def test_split_at_the_median_hash_gives_each_child_half_the_records_where_the_middle_does_not(tmp_path):
    counts = {}
    for split_point in ("middle", "distribution"):
        _path, table, writer, _stream, instant = split_plan(tmp_path / split_point, commits=1, split_point=split_point)
        writer.close()
        result = execute_clustering(table, instant)
        by_child = sorted(s.num_writes for s in result.write_stats)
        counts[split_point] = by_child
    hot_children = counts["middle"][-2:]
    assert hot_children[1] > 3 * hot_children[0], counts  # the hot eighth sits in one half of the range
    assert all(abs(a - b) <= 2 for a, b in zip(counts["distribution"][::2], counts["distribution"][1::2])), counts


def test_a_child_that_gets_no_records_still_has_a_base_file_for_later_writes(tmp_path):
    path = tmp_path / "orders"
    table = unpartitioned_table(path)
    with table.writer(write_options(initial_buckets=1)) as writer:
        stream = SkewedStream(writer, size=1500, hot_share=1.0)  # every key in the lower half's first quarter
        stream.commit()
        instant = schedule_clustering(writer, ClusteringPolicy(split_threshold_bytes=4 * KB, merge_threshold_bytes=0))
        result = execute_clustering(table, instant)
        assert sorted(s.num_writes for s in result.write_stats)[0] == 0
        stream.hot_share = 0.0  # now into the empty child
        stream.commit(stream.batch(inserts=1.0))
        assert_readers_exact(path, stream, "after writing to the empty child")


def test_a_partition_shrunk_by_deletes_merges_adjacent_buckets_and_reads_correctly(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    with table.writer(write_options()) as writer:
        stream = SkewedStream(writer, size=4000, hot_share=0.0)
        stream.commit(stream.batch(inserts=1.0))
        region = "region=emea"
        doomed = [k for k in stream.known if row(k, 0, False, random.Random(0))["region"] == "emea"]
        clock = 1000 + 100 * stream.batches
        stream.commit([row(k, clock, deleted=True, rng=stream.rng) for k in doomed[: int(len(doomed) * 0.95)]])
        compact_all(writer)
        before = bucket_sizes(table, region)
        instant = schedule_clustering(
            writer, ClusteringPolicy(split_threshold_bytes=64 * KB, merge_threshold_bytes=12 * KB, min_buckets=2)
        )
        assert instant is not None
        plan = read_clustering_plan(table.timeline(), instant)
        assert {g.kind for g in plan.groups} == {"merge"} and plan.partition_paths == [region]
        stream.commit(stream.batch(inserts=0.5, deletes=0.2))  # dual writes into the merged bucket
        assert_readers_exact(path, stream, "while the merge is pending")
        execute_clustering(table, instant)
        assert_readers_exact(path, stream, "after the merge")
        stream.commit()
        assert_readers_exact(path, stream, "after writing to the merged bucket")
    after = ring.load_latest(table.storage, region, table.timeline().completed_timestamps().active)
    assert len(before) == 4 and len(after.nodes) == 2  # min_buckets bounds the merge
    assert all(len(bucket_sizes(table, p)) == 4 for p in table.file_system_view().partition_paths() if p != region)


def test_sort_clustering_rewrites_each_bucket_sorted_by_the_sort_columns_once(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    policy = ClusteringPolicy(
        split_threshold_bytes=1024 * KB, merge_threshold_bytes=0, min_buckets=4, sort_columns=("status", "amount")
    )
    with table.writer(write_options()) as writer:
        stream = SkewedStream(writer, size=2000, hot_share=0.0)
        stream.commit()
        instant = schedule_clustering(writer, policy)
        plan = read_clustering_plan(table.timeline(), instant)
        assert {g.kind for g in plan.groups} == {"sort"} and len(plan.groups) == 16
        assert plan.sort_columns == ("status", "amount")
        execute_clustering(table, instant)
        assert schedule_clustering(writer, policy) is None  # sorted buckets stay as they are
        assert_readers_exact(path, stream, "after sorting")
    for base in path.rglob(f"*_{instant}.parquet"):
        rows = pq.read_table(base, columns=["status", "amount"]).to_pylist()
        assert rows == sorted(rows, key=lambda r: (r["status"], r["amount"]))


# -- the format ------------------------------------------------------------------------------------


def test_the_plan_and_the_hashing_metadata_are_written_as_hudi_writes_them(tmp_path):
    path, table, writer, _stream, instant = split_plan(tmp_path)
    writer.close()
    requested = deserialize_plan(
        "HoodieRequestedReplaceMetadata", (path / ".hoodie" / f"{instant}.replacecommit.requested").read_bytes()
    )
    assert requested["operationType"] == "CLUSTER"
    plan = requested["clusteringPlan"]
    assert plan["strategy"]["strategyClassName"].endswith("SparkConsistentBucketClusteringExecutionStrategy")
    group = plan["inputGroups"][0]
    assert group["numOutputFileGroups"] == 2
    assert group["extraMetadata"][PARTITION_KEY] == "" and group["extraMetadata"][SEQUENCE_NUMBER_KEY] == "0"
    children = json.loads(group["extraMetadata"][CHILD_NODES_KEY])
    assert [c["tag"] for c in children] == ["REPLACE", "REPLACE"]
    assert group["slices"][0]["dataFilePath"].startswith(str(path))

    execute_clustering(table, instant)
    meta_dir = path / HASHING_METADATA_DIR
    assert (meta_dir / f"{instant}.commit").exists()
    metadata = ring.HashingMetadata.from_bytes((meta_dir / f"{instant}.hashing_meta").read_bytes())
    assert metadata.seq_no == 1 and metadata.instant == instant and len(metadata.nodes) == 3
    assert {n.tag for n in metadata.nodes} == {ring.NodeTag.NORMAL}
    assert {c["fileIdPrefix"] for c in children} <= {n.file_id_prefix for n in metadata.nodes}


# -- crashes, rollback, and the other services -----------------------------------------------------

EXECUTOR = textwrap.dedent(
    """
    import sys
    from table.mor_table import MorTable
    from table.services.clustering.execute import execute_clustering

    execute_clustering(MorTable.load(sys.argv[1]), sys.argv[2])
    """
)

DUAL_WRITER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from table.mor_table import MorTable
    from tests.support.orders import SCHEMA, write_options

    rows = pa.ipc.open_file(sys.argv[2]).read_all()
    with MorTable.load(sys.argv[1]).writer(write_options(initial_buckets=2)) as writer:
        writer.upsert(rows)
    """
)


def run_python(code: str, failpoint: str, *args: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOR_STREAMER_FAILPOINT": failpoint}
    return subprocess.run([sys.executable, "-c", code, *args], env=env).returncode


def test_an_execution_killed_after_writing_its_files_is_retried_from_the_plan(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    writer.close()
    assert run_python(EXECUTOR, "clustering.files_written", str(path), instant) == -9
    leftovers = sorted(path.glob(f"*_{instant}.parquet"))
    assert leftovers and pending_clusterings(table) == [instant]
    assert_readers_exact(path, stream, "after the killed execution")

    with table.writer(write_options(initial_buckets=2)) as stream.writer:  # restart: the plan stays
        assert pending_clusterings(table) == [instant]
        stream.commit()
    execute_clustering(table, instant)
    after = sorted(path.glob(f"*_{instant}.parquet"))
    assert len(after) == len(leftovers) and len({p.name.split("_")[0] for p in after}) == len(after)
    assert_readers_exact(path, stream, "after the retried execution")


def test_a_writer_killed_mid_dual_write_is_rolled_back_and_nothing_is_lost(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    writer.close()
    lost = stream.batch()
    batch_file = tmp_path / "batch.arrow"
    with pa.ipc.new_file(batch_file, SCHEMA) as out:
        out.write_table(pa.Table.from_pylist(lost, schema=SCHEMA))
    assert run_python(DUAL_WRITER, "deltacommit.files_written", str(path), str(batch_file)) == -9
    assert_readers_exact(path, stream, "after the killed dual write")

    with table.writer(write_options(initial_buckets=2)) as stream.writer:  # rolls back, then writes again
        assert [i.action for i in table.timeline().completed("rollback")] == ["rollback"]
        stream.commit(lost)
        assert_readers_exact(path, stream, "after the rewrite while pending")
        execute_clustering(table, instant)
        assert_readers_exact(path, stream, "after the resize completed")


def test_a_rolled_back_plan_leaves_the_old_buckets_and_no_child_files(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    try:
        plan = read_clustering_plan(table.timeline(), instant)
        stream.commit()  # dual writes to the children
        children = set(plan.groups[0].child_file_ids)
        assert files_of(path, children)
        rollback_clustering(writer, instant)
        assert not files_of(path, children)
        assert pending_clusterings(table) == [] and table.timeline().completed("rollback")
        assert not (path / HASHING_METADATA_DIR / f"{instant}.hashing_meta").exists()
        stream.commit()
        assert_readers_exact(path, stream, "after the rollback")
        assert len(bucket_sizes(table)) == 2
    finally:
        writer.close()


def test_a_second_executor_of_the_same_plan_is_refused(tmp_path):
    _path, table, writer, _stream, instant = split_plan(tmp_path)
    writer.close()
    with (
        WriterLease(table.storage, "the other executor", path=executor_lease_path(instant)),
        pytest.raises(ClusteringConflictError, match="the other executor"),
    ):
        execute_clustering(table, instant)


def test_compaction_and_clustering_never_plan_the_same_file_group(tmp_path):
    path, table, writer, stream, instant = split_plan(tmp_path)
    try:
        resized = read_clustering_plan(table.timeline(), instant).file_groups()
        stream.commit()
        compaction = schedule_compaction(writer, CompactionStrategy())
        compacted = set()
        if compaction:
            from table.plans.compaction import read_compaction_plan

            compacted = {
                (op.partition_path, op.file_id) for op in read_compaction_plan(table.timeline(), compaction)[0]
            }
        assert not resized & compacted
        assert schedule_clustering(writer, ClusteringPolicy(split_threshold_bytes=1, merge_threshold_bytes=0)) is None
        if compaction:
            execute_compaction(table, compaction)
        execute_clustering(table, instant)
        assert_readers_exact(path, stream, "after both")
    finally:
        writer.close()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split_threshold_bytes": 10, "merge_threshold_bytes": 10}, "merge threshold must be below"),
        ({"split_threshold_bytes": 10, "merge_threshold_bytes": 1, "min_buckets": 5, "max_buckets": 4}, "min_buckets"),
        ({"split_threshold_bytes": 10, "merge_threshold_bytes": 1, "split_point": "quantile"}, "split point"),
    ],
)
def test_a_policy_that_would_oscillate_or_cannot_hold_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClusteringPolicy(**kwargs)
