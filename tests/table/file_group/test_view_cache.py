"""The writer's file-system view, listed once and then kept in step with the timeline: after the
writer's own commits and the services its process runs it equals a fresh listing without listing
again; an instant made elsewhere (Apache Hudi's writer, another process executing a plan), a
rollback, or a restart after a kill make it list the table again. In every case the next batch's
table equals the oracle through our reader, hudi-rs and Apache Hudi."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from table.file_group.fs_view import FileSystemView
from table.mor_table import MorTable
from table.services.archive import ArchivePolicy, archive
from table.services.clean import CleanPolicy, clean
from table.services.clustering.execute import execute_clustering
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering
from table.services.compaction import CompactionStrategy, execute_compaction, schedule_compaction
from table.timeline.timeline import Timeline
from table.write.file_group_writer import WriteTask, write_file_groups
from table.write.prepare import prepare_batch
from table.write.writer import TableWriter
from tests.support.hudi_writes import hudi_options
from tests.support.oracle import Oracle
from tests.support.orders import DATA_COLUMNS, SCHEMA, change_batch, make_table, write_options
from tests.support.readers import difference, hudi_rs, project

PROJECT = Path(__file__).resolve().parents[3]
DATA_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("is_deleted"))


class Stream:
    """Batches of order changes into one table, and the oracle of what it must hold."""

    def __init__(self, path: Path, seed: int):
        self.path = path
        self.rng = random.Random(seed)
        self.known: list[str] = []
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.batches = 0

    def batch(self, size: int = 200) -> list[dict]:
        n = self.batches
        self.batches += 1
        return change_batch(self.rng, self.known, size, first_id=n * size, clock=1000 + n * 100)

    def by_us(self, writer: TableWriter, size: int = 200) -> str:
        rows = self.batch(size)
        self.oracle.apply_batch(rows)
        return writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))

    def by_hudi(self, judge, size: int = 200) -> None:
        rows = self.batch(size)
        self.oracle.apply_batch(rows)
        latest: dict[str, dict] = {}
        for r in rows:
            if r["order_id"] not in latest or r["updated_at"] >= latest[r["order_id"]]["updated_at"]:
                latest[r["order_id"]] = r
        live = [project(r, DATA_SCHEMA.names) for r in latest.values() if not r["is_deleted"]]
        gone = [project(r, DATA_SCHEMA.names) for r in latest.values() if r["is_deleted"]]
        options = hudi_options(**{"hoodie.bucket.index.num.buckets": "4"})
        judge.upsert(self.path, pa.Table.from_pylist(live, schema=DATA_SCHEMA), options)
        if gone:
            judge.write(
                self.path,
                pa.Table.from_pylist(gone, schema=DATA_SCHEMA),
                {**options, "hoodie.datasource.write.operation": "delete"},
            )

    def assert_readers(self, judge=None) -> None:
        expected = {k: project(r, DATA_COLUMNS) for k, r in self.oracle.rows().items()}
        reads = {"ours": MorTable.load(str(self.path)).snapshot(), "hudi-rs": hudi_rs(self.path, "snapshot")}
        if judge is not None:
            reads["Apache Hudi"] = judge.snapshot(self.path)
        misses = {reader: miss for reader, rows in reads.items() if (miss := difference(rows, expected, DATA_COLUMNS))}
        assert not misses


def shape(view: FileSystemView) -> dict:
    """Every file group of a view: each slice's base file and log files, with their sizes."""
    return {
        (g.partition_path, g.file_id): {
            t: (
                (s.base_file.path, s.base_file.size) if s.base_file else None,
                sorted((f.path, f.size) for f in s.log_files),
                t in g.log_only_starts,
            )
            for t, s in g.slices.items()
        }
        for g in view.all_file_groups()
    }


def assert_view_is_fresh(writer: TableWriter) -> None:
    """The writer's view equals a fresh listing of the table as of the same timeline."""
    timeline = Timeline.load(writer.table.storage)
    for replaced in (False, True):
        cached = writer.file_system_view(timeline, include_replaced=replaced)
        listed = FileSystemView.build(writer.table.storage, timeline, include_replaced=replaced)
        assert shape(cached) == shape(listed), f"include_replaced={replaced}"


@pytest.mark.hudi
def test_own_commits_and_services_keep_the_view_equal_to_a_listing_without_listing_again(tmp_path, hudi_judge):
    stream = Stream(tmp_path / "orders", seed=41)
    table = make_table(stream.path)
    resize = ClusteringPolicy(split_threshold_bytes=6_000, merge_threshold_bytes=0, max_buckets=8)
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream.by_us(writer, 600)
        stream.by_us(writer)
        assert_view_is_fresh(writer)
        compaction = schedule_compaction(writer, CompactionStrategy())
        stream.by_us(writer)  # to the slices the pending compaction starts
        assert_view_is_fresh(writer)
        execute_compaction(table, compaction)
        stream.by_us(writer)
        assert_view_is_fresh(writer)
        resizing = schedule_clustering(writer, resize)
        assert resizing is not None
        stream.by_us(writer)  # dual writes to the children
        assert_view_is_fresh(writer)
        execute_clustering(table, resizing)
        stream.by_us(writer)  # to the children, now the buckets
        assert_view_is_fresh(writer)
        for _ in range(3):
            stream.by_us(writer)
        assert clean(writer, CleanPolicy(retained=2)) is not None
        assert archive(table, ArchivePolicy(min_instants=3, max_instants=5)).archived
        stream.by_us(writer)
        assert_view_is_fresh(writer)
        assert writer.file_system_view_listings == 1
    stream.assert_readers(hudi_judge)


@pytest.mark.unit
def test_a_rollback_makes_the_writer_list_again_and_the_next_batch_lands_whole(tmp_path):
    stream = Stream(tmp_path / "orders", seed=42)
    table = make_table(stream.path)
    with table.writer(write_options()) as writer:
        stream.by_us(writer, 500)
        rows = pa.Table.from_pylist(stream.batch(), schema=SCHEMA)  # a batch that fails after its files
        commit = writer.begin_delta_commit(writer.check_schema(rows.schema))
        prepared = prepare_batch(rows, writer.batch_spec, writer.key_generator)
        write_file_groups(commit.context, WriteTask(0), commit.routing, commit.routing.route(prepared))
        commit.abandon()
        stream.by_us(writer)
        assert writer.file_system_view_listings == 2
        assert_view_is_fresh(writer)
    stream.assert_readers()


KILLED_WRITER = """
import sys
import pyarrow as pa
from table.mor_table import MorTable
from table.write.writer import WriteOptions
table = MorTable.load(sys.argv[1])
with table.writer(WriteOptions(initial_buckets=4, delete_field="is_deleted", lease_ttl_seconds=0.5)) as writer:
    writer.upsert(pa.ipc.open_file(sys.argv[2]).read_all())
"""


@pytest.mark.unit
def test_a_restart_after_a_kill_lists_the_table_and_rolls_back_what_the_killed_writer_left(tmp_path):
    stream = Stream(tmp_path / "orders", seed=43)
    table = make_table(stream.path)
    with table.writer(write_options(lease_ttl_seconds=0.5)) as writer:
        stream.by_us(writer, 500)
    lost = pa.Table.from_pylist(stream.batch(), schema=SCHEMA)  # never committed: not in the oracle
    with pa.ipc.new_file(tmp_path / "batch.arrow", lost.schema) as out:
        out.write_table(lost)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(stream.path), str(tmp_path / "batch.arrow")],
        env={**os.environ, "PYTHONPATH": str(PROJECT), "MOR_STREAMER_FAILPOINT": "deltacommit.log_file_written:3"},
    )
    assert killed.returncode == -9
    with table.writer(write_options(lease_ttl_seconds=0.5)) as writer:
        stream.by_us(writer)
        assert_view_is_fresh(writer)
    assert not MorTable.load(str(stream.path)).timeline().pending()
    stream.assert_readers()


EXECUTE_COMPACTION = """
import sys
from table.mor_table import MorTable
from table.services.compaction import execute_compaction
execute_compaction(MorTable.load(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.hudi
def test_a_plan_executed_by_another_process_or_a_hudi_commit_between_batches_makes_the_writer_list_again(
    tmp_path, hudi_judge
):
    stream = Stream(tmp_path / "orders", seed=44)
    table = make_table(stream.path)
    with table.writer(write_options()) as writer:
        stream.by_us(writer, 600)
        stream.by_us(writer)
        compaction = schedule_compaction(writer, CompactionStrategy())
        assert compaction is not None
        subprocess.run(
            [sys.executable, "-c", EXECUTE_COMPACTION, str(stream.path), compaction],
            env={**os.environ, "PYTHONPATH": str(PROJECT)},
            check=True,
        )  # as `streamer compact` would
        stream.by_us(writer)  # to the slices that compaction made
        assert writer.file_system_view_listings == 2
        assert_view_is_fresh(writer)
        stream.assert_readers(hudi_judge)

        stream.by_hudi(hudi_judge)  # Apache Hudi writes between two of our batches
        stream.by_us(writer)
        assert writer.file_system_view_listings == 3
        assert_view_is_fresh(writer)
    stream.assert_readers(hudi_judge)
