"""Table services as the ingestion job runs them: after each commit, inline or in the background,
over many commits. The writer here is the pure-Python one; the streaming job calls the same hooks."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from oracle import Oracle
from streamer.config import ServicesSettings
from streamer.services import BackgroundExecutor, TableServices
from table.mor_table import MorTable
from table.services.compaction import pending_compactions
from test_table_engine import DATA_COLUMNS, SCHEMA, by_key, hudi_rs_read, make_table, row, strip, write_options

pytestmark = pytest.mark.unit


def monotonic_batch(rng: random.Random, known: list[str], size: int, first_id: int, clock: int) -> list[dict]:
    """Inserts, updates and deletes whose ordering values only grow, so the expected rows do not
    depend on when a compaction forgets a delete (Hudi drops deleted keys from base files)."""
    rows = []
    for i in range(size):
        roll = rng.random()
        if known and roll < 0.55:
            rows.append(row(rng.choice(known), clock + i, deleted=False, rng=rng))
        elif known and roll < 0.62:
            rows.append(row(rng.choice(known), clock + i, deleted=True, rng=rng))
        else:
            key = f"o-{first_id + i:07d}"
            known.append(key)
            rows.append(row(key, clock + i, deleted=False, rng=rng))
    return rows


class Stream:
    """A writer committing monotonic batches, with the oracle of what it wrote."""

    def __init__(self, table, writer, seed: int = 3):
        self.table = table
        self.writer = writer
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.rng = random.Random(seed)
        self.known: list[str] = []
        self.commits = 0

    def commit(self, size: int = 60) -> str:
        batch = monotonic_batch(self.rng, self.known, size, first_id=self.commits * size, clock=1_000 + self.commits * size)
        self.oracle.apply_batch(batch)
        self.commits += 1
        return self.writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))

    def expected(self) -> dict:
        return strip(self.oracle.rows(), DATA_COLUMNS)


def assert_both_readers_match(path, expected: dict) -> None:
    assert strip(by_key(MorTable.load(str(path)).snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def services(table, writer, executor: BackgroundExecutor, **settings) -> TableServices:
    return TableServices(ServicesSettings.model_validate(settings), table, writer, executor)


def data_files(path) -> list:
    return [p for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie")]


def test_hundreds_of_commits_keep_the_active_timeline_and_the_file_count_within_bounds(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    bounds = {"min_instants": 10, "max_instants": 15}
    timeline_sizes, file_counts = [], []
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(table, writer, executor,
                       compaction={"mode": "inline", "every_delta_commits": 4},
                       clean={"mode": "inline", "retained": 3},
                       archive={"mode": "inline", **bounds})
        for _ in range(240):
            stream.commit(size=40)
            svc.after_commit()
            timeline_sizes.append(len(table.timeline().completed()))
            file_counts.append(len(data_files(path)))
    executor.shutdown()

    assert max(timeline_sizes[50:]) <= bounds["max_instants"]
    assert min(timeline_sizes[50:]) >= bounds["min_instants"]
    # files stop growing: the second half of the run peaks where the first half did
    assert max(file_counts[120:]) <= 1.05 * max(file_counts[:120])
    assert_both_readers_match(path, stream.expected())


def test_inline_compaction_every_n_delta_commits_bounds_log_files_per_file_group(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(table, writer, executor, compaction={"mode": "inline", "every_delta_commits": 3},
                       clean={"mode": "off"}, archive={"mode": "off"})
        for _ in range(21):
            stream.commit()
            svc.after_commit()
            slices = table.file_system_view().latest_slices()
            assert max(len(s.log_files) for s in slices) <= 3
        # the last commit was followed by a compaction: base files alone hold every record
        assert len(table.timeline().completed("commit")) >= 5
        before_plan = stream.expected()
        assert strip(by_key(table.read_optimized()), DATA_COLUMNS) == before_plan
        stream.commit()  # lands in log files: visible to snapshots, not to read-optimized reads
        assert strip(by_key(table.read_optimized()), DATA_COLUMNS) == before_plan
    executor.shutdown()
    assert_both_readers_match(path, stream.expected())


def test_async_compaction_executes_in_the_background_while_the_writer_keeps_committing(tmp_path, monkeypatch):
    monkeypatch.setenv("MOR_STREAMER_PAUSE", "compaction.files_written=0.8")
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    commits_during_a_plan = 0
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(table, writer, executor, compaction={"mode": "async", "every_delta_commits": 2},
                       clean={"mode": "inline", "retained": 4}, archive={"mode": "off"})
        for _ in range(16):
            pending_before = bool(pending_compactions(table))
            stream.commit()
            if pending_before and pending_compactions(table):
                # our reader merges the pending slice with the previous one; hudi-rs 0.5 only
                # sees these writes once the plan completes (see test_compaction)
                commits_during_a_plan += 1
                assert strip(by_key(table.snapshot()), DATA_COLUMNS) == stream.expected()
            svc.after_commit()
        assert executor.wait_idle(timeout=60)
    executor.shutdown()

    assert commits_during_a_plan >= 2
    assert pending_compactions(table) == []
    assert len(table.timeline().completed("commit")) >= 2
    assert_both_readers_match(path, stream.expected())
