"""Compaction: plans, phantom slices while a plan is pending, execution, crashes and retries.

The streams come from `change_batch` with its clock 100 apart between batches and a jitter of
50: a later batch never holds an update older than an earlier batch's delete of the same key,
so the oracle does not depend on compaction forgetting delete tombstones (as Hudi does).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import zlib
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from table import failpoints
from table.errors import CompactionConflictError
from table.mor_table import MorTable
from table.plans.compaction import read_compaction_plan
from table.plans.pending import pending_compactions
from table.services.compaction import (
    CompactionStrategy,
    execute_compaction,
    executor_lease_path,
    schedule_compaction,
)
from table.storage.file_io import _temp_name
from table.storage.lease import WriterLease
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import Instant, Timeline
from tests.support.oracle import Oracle
from tests.support.orders import (
    DATA_COLUMNS,
    REGIONS,
    SCHEMA,
    by_key,
    change_batch,
    hudi_rs_read,
    make_table,
    row,
    strip,
    write_options,
)

pytestmark = pytest.mark.unit

META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path"]
ROOT = Path(__file__).resolve().parents[3]


class Stream:
    """A writer's batches and the oracle of what they hold."""

    def __init__(self, writer, seed: int = 5, size: int = 400):
        self.writer = writer
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.rng = random.Random(seed)
        self.known: list[str] = []
        self.size = size
        self.batches = 0

    def commit(self) -> str:
        n = self.batches
        batch = change_batch(self.rng, self.known, self.size, first_id=n * self.size, clock=1000 + n * 100)
        self.batches += 1
        self.oracle.apply_batch(batch)
        return self.writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))

    def expected(self) -> dict:
        return strip(self.oracle.rows(), DATA_COLUMNS)


def ours(path: Path, **kwargs) -> dict:
    return strip(by_key(MorTable.load(str(path)).snapshot(**kwargs)), DATA_COLUMNS)


def theirs(path: Path) -> dict:
    return strip(by_key(hudi_rs_read(path)), DATA_COLUMNS)


def base_files(path: Path, instant: str) -> list[Path]:
    return sorted(p for p in path.rglob(f"*_{instant}.parquet"))


def log_files(path: Path, base_instant: str) -> list[Path]:
    return sorted(p for p in path.rglob(f".*_{base_instant}.log.*"))


def planned_table(tmp_path: Path, commits: int = 2, size: int = 200) -> tuple[Path, MorTable, Stream, str]:
    """A table after `commits` batches and a plan compacting every file group with log files."""
    path = tmp_path / "orders"
    table = make_table(path)
    with table.writer(write_options()) as writer:
        stream = Stream(writer, size=size)
        for _ in range(commits):
            stream.commit()
        instant = schedule_compaction(writer, CompactionStrategy())
    return path, table, stream, instant


def planned_groups(table: MorTable, instant: str) -> set[tuple[str, str]]:
    operations, _ = read_compaction_plan(table.timeline(), instant)
    return {(op.partition_path, op.file_id) for op in operations}


# -- the protocol, state by state ----------------------------------------------------------------


def test_both_readers_equal_the_oracle_before_during_and_after_a_compaction(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    with table.writer(write_options()) as writer:
        stream = Stream(writer)
        for _ in range(3):
            last_before_plan = stream.commit()
        before_plan = stream.expected()
        assert ours(path) == theirs(path) == before_plan

        instant = schedule_compaction(writer, CompactionStrategy())
        assert pending_compactions(table) == [instant]
        assert len(planned_groups(table, instant)) == 4 * len(REGIONS)  # every group has logs
        assert ours(path) == theirs(path) == before_plan

        for _ in range(2):
            stream.commit()  # into phantom slices: log files at base instant `instant`
        assert log_files(path, instant) and not base_files(path, instant)
        assert ours(path) == stream.expected()

        result = execute_compaction(table, instant)
        assert pending_compactions(table) == []
        assert len(result.write_stats) == len(base_files(path, instant)) == 4 * len(REGIONS)
        assert ours(path) == theirs(path) == stream.expected()

        for _ in range(2):
            stream.commit()
        assert ours(path) == theirs(path) == stream.expected()

    # read-optimized: the compacted base files hold every record written before the plan,
    # with the meta columns each record had
    snapshot_at_plan = by_key(table.snapshot(as_of=last_before_plan))
    read_optimized = by_key(table.read_optimized())
    assert strip(read_optimized, DATA_COLUMNS) == before_plan == strip(snapshot_at_plan, DATA_COLUMNS)
    assert strip(read_optimized, META) == strip(snapshot_at_plan, META)
    assert strip(by_key(hudi_rs_read(path, read_optimized=True)), DATA_COLUMNS) == before_plan
    assert ours(path, as_of=last_before_plan) == before_plan  # time travel past the compaction


def test_hudi_rs_reads_writes_made_during_a_pending_compaction_once_it_completes(tmp_path):
    """hudi 0.5.0 drops table-version-6 log files whose base instant is not a completed instant,
    so the writes that start phantom slices reach it only when their compaction completes;
    Hudi's own readers merge the pending slice with the previous one, as ours does. The README
    says so; this test notices when hudi-rs changes."""
    path, table, stream, instant = planned_table(tmp_path)
    assert len(planned_groups(table, instant)) == len(table.file_system_view().latest_slices())
    before = stream.expected()
    with table.writer(write_options()) as stream.writer:
        stream.commit()

    assert ours(path) == stream.expected() != before
    assert theirs(path) == before
    execute_compaction(table, instant)
    assert theirs(path) == ours(path) == stream.expected()


def test_writes_to_planned_file_groups_start_the_slice_at_the_compaction_instant(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(2)
    with table.writer(write_options(initial_buckets=1)) as writer:
        first = writer.upsert(rows_in({"emea": 5, "apac": 5}, rng, 10))
        writer.upsert(rows_in({"emea": 5}, rng, 20))
        instant = schedule_compaction(writer, CompactionStrategy())
        assert {p for p, _ in planned_groups(table, instant)} == {"region=emea"}
        d1 = writer.upsert(rows_in({"emea": 5, "apac": 5}, rng, 30))
        writer.upsert(rows_in({"emea": 5}, rng, 40))

    emea, apac = path / "region=emea", path / "region=apac"
    phantom = sorted(p.name for p in log_files(emea, instant))
    assert [n.split(".log.")[1].split("_")[0] for n in phantom] == ["1", "2"]  # versions restart at 1
    assert len(log_files(apac, first)) == len(list(apac.glob(".*.log.*"))) == 1  # not planned: as before
    stats = CommitMetadata.from_json(Timeline.load(table.storage).read_content(Instant(d1, "deltacommit", "completed")))
    emea_stat = stats.partition_to_write_stats["region=emea"][0]
    assert (emea_stat.prev_commit, emea_stat.base_file) == (instant, "")  # as Hudi's append handle


def test_the_compaction_commit_carries_the_schema_and_its_write_stats(tmp_path):
    path, table, stream, instant = planned_table(tmp_path)
    execute_compaction(table, instant)

    timeline = table.timeline()
    delta = timeline.completed("deltacommit")[-1].timestamp
    assert [i.timestamp for i in timeline.completed("commit")] == [instant]
    commit = CommitMetadata.from_json(timeline.read_content(Instant(instant, "commit", "completed")))
    deltacommit = CommitMetadata.from_json(timeline.read_content(Instant(delta, "deltacommit", "completed")))
    assert commit.operation_type == "COMPACT" and commit.compacted
    assert commit.schema == deltacommit.schema
    assert table.last_commit_metadata().schema == deltacommit.schema
    names = {p.name for p in base_files(path, instant)}
    assert {Path(s.path).name for s in commit.write_stats()} == names
    assert sum(s.num_writes for s in commit.write_stats()) == len(stream.expected())
    for stat in commit.write_stats():
        assert stat.log_version is None and stat.total_log_files_compacted == 1
    built = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    assert built.get_schema().names[-len(DATA_COLUMNS) :] == DATA_COLUMNS
    for record in table.read_optimized().to_pylist():
        assert record["_hoodie_file_name"].endswith(f"_{instant}.parquet")


def test_a_file_group_whose_records_are_all_deleted_compacts_into_an_empty_base_file(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(4)
    inserted = rows_in({"emea": 6}, rng, 10)
    deleted = inserted.to_pylist()
    for r in deleted:
        r.update(updated_at=20, is_deleted=True)
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(inserted)
        writer.upsert(pa.Table.from_pylist(deleted, schema=SCHEMA))
        instant = schedule_compaction(writer, CompactionStrategy())
    result = execute_compaction(table, instant)
    assert [s.num_writes for s in result.write_stats] == [0]
    assert [s.num_deletes for s in result.write_stats] == [6]
    assert ours(path) == theirs(path) == {}


# -- strategies ----------------------------------------------------------------------------------


def rows_in(counts: dict[str, int], rng: random.Random, ts: int, offset: int = 0) -> pa.Table:
    """`counts[region]` records of keys that land in that region (the region follows the key)."""
    rows, i = [], offset
    for region, n in counts.items():
        made = 0
        while made < n:
            key = f"{region}-{i:06d}"
            i += 1
            if REGIONS[zlib.crc32(key.encode()) % len(REGIONS)] == region:
                rows.append(row(key, ts, deleted=False, rng=rng))
                made += 1
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.fixture
def uneven_table(tmp_path):
    """One file group per region: latam with 3 small log files, emea with 2, apac with 1 large
    one, amer with none."""
    table = make_table(tmp_path / "orders")
    rng = random.Random(9)
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(rows_in(dict.fromkeys(REGIONS, 50), rng, 10))
        writer.upsert(rows_in({"latam": 5, "emea": 5}, rng, 20))
        writer.upsert(rows_in({"latam": 5, "emea": 5}, rng, 30))
        writer.upsert(rows_in({"latam": 5, "apac": 3000}, rng, 40, offset=100_000))
    return table


def plan_of(table: MorTable, strategy: CompactionStrategy) -> list[str] | None:
    with table.writer(write_options()) as writer:
        instant = schedule_compaction(writer, strategy)
    if instant is None:
        return None
    return [op.partition_path.removeprefix("region=") for op in read_compaction_plan(table.timeline(), instant)[0]]


@pytest.mark.parametrize(
    "strategy, picked",
    [
        (CompactionStrategy(), ["latam", "emea", "apac"]),
        (CompactionStrategy(min_log_files=2), ["latam", "emea"]),
        (CompactionStrategy(kind="log_file_size", min_log_bytes=50_000), ["apac"]),
        (CompactionStrategy(kind="bounded_io", max_io_bytes=1), ["apac"]),
        (CompactionStrategy(kind="bounded_io"), ["apac", "latam", "emea"]),
        (CompactionStrategy(kind="recent_partitions", recent_partitions=2), ["emea", "latam"]),
        (CompactionStrategy(kind="recent_partitions", recent_partitions=1), ["latam"]),
        (CompactionStrategy(min_log_files=4), None),
    ],
)
def test_strategies_pick_what_they_say(uneven_table, strategy, picked):
    assert plan_of(uneven_table, strategy) == picked


def test_nothing_qualifies_writes_nothing_and_planned_groups_are_not_planned_twice(uneven_table):
    hoodie = Path(uneven_table.base_uri) / ".hoodie"
    before = sorted(os.listdir(hoodie))
    assert plan_of(uneven_table, CompactionStrategy(min_log_files=4)) is None
    assert sorted(os.listdir(hoodie)) == before
    assert plan_of(uneven_table, CompactionStrategy(kind="recent_partitions", recent_partitions=1)) == ["latam"]
    assert plan_of(uneven_table, CompactionStrategy()) == ["emea", "apac"]
    assert plan_of(uneven_table, CompactionStrategy()) is None


def test_the_plan_is_a_hoodie_compaction_plan_naming_the_slice_files(uneven_table):
    with uneven_table.writer(write_options()) as writer:
        instant = schedule_compaction(writer, CompactionStrategy(kind="recent_partitions", recent_partitions=1))
    timeline = uneven_table.timeline()
    plan = deserialize_plan("HoodieCompactionPlan", timeline.read_content(Instant(instant, "compaction", "requested")))
    assert plan["version"] == 2
    [op] = plan["operations"]
    latam = Path(uneven_table.base_uri) / "region=latam"
    [base] = latam.glob("*.parquet")
    logs = sorted(latam.glob(".*.log.*"), key=lambda p: int(p.name.split(".log.")[1].split("_")[0]))
    assert op["partitionPath"] == "region=latam"
    assert op["dataFilePath"] == base.name
    assert op["deltaFilePaths"] == [p.name for p in logs]
    assert op["baseInstantTime"] == base.name.rsplit("_", 1)[1].removesuffix(".parquet")
    assert op["fileId"] == base.name.split("_")[0]
    assert op["metrics"]["TOTAL_LOG_FILES"] == 3.0
    assert op["metrics"]["TOTAL_LOG_FILES_SIZE"] == float(sum(p.stat().st_size for p in logs))
    assert set(op["metrics"]) == {
        "TOTAL_IO_READ_MB",
        "TOTAL_IO_WRITE_MB",
        "TOTAL_IO_MB",
        "TOTAL_LOG_FILES_SIZE",
        "TOTAL_LOG_FILES",
    }


# -- crashes, retries, concurrent executors ------------------------------------------------------

EXECUTOR = textwrap.dedent(
    """
    import sys
    from table.mor_table import MorTable
    from table.services.compaction import execute_compaction

    execute_compaction(MorTable.load(sys.argv[1]), sys.argv[2])
    """
)


def run_executor(path: Path, instant: str, failpoint: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOR_STREAMER_FAILPOINT": failpoint}
    return subprocess.run([sys.executable, "-c", EXECUTOR, str(path), instant], env=env).returncode


def test_a_killed_execution_leaves_readers_unaffected_and_a_writer_restart_keeps_the_plan(tmp_path):
    path, table, stream, instant = planned_table(tmp_path, commits=3, size=400)

    assert run_executor(path, instant, "compaction.files_written") == -9
    leftovers = base_files(path, instant)
    assert len(leftovers) == len(planned_groups(table, instant))  # written, not committed
    assert [(i.timestamp, i.state) for i in table.timeline().pending()] == [(instant, "inflight")]
    assert ours(path) == theirs(path) == stream.expected()

    with table.writer(write_options()) as stream.writer:  # restart: rolls back deltacommits only
        assert pending_compactions(table) == [instant]
        assert table.timeline().completed("rollback") == []
        stream.commit()
    assert base_files(path, instant) == leftovers
    assert ours(path) == stream.expected()

    execute_compaction(table, instant)  # the retry replaces the killed attempt's files
    after = base_files(path, instant)
    assert len(after) == len(leftovers)
    assert len({p.name.split("_")[0] for p in after}) == len(after)  # one base file per group at the instant
    assert not (path / ".hoodie" / ".temp" / instant).exists()
    assert ours(path) == theirs(path) == stream.expected()


def test_a_retried_execution_deletes_the_temporary_files_a_killed_attempt_left_beside_its_base_files(tmp_path):
    path, table, stream, instant = planned_table(tmp_path, commits=3, size=400)
    assert run_executor(path, instant, "compaction.files_written") == -9
    # What a kill between writing a base file's bytes and linking them into place leaves.
    torn = [Path(_temp_name(str(base))) for base in base_files(path, instant)]
    for temp in torn:
        temp.write_bytes(b"PAR1")

    execute_compaction(table, instant)
    assert [t for t in torn if t.exists()] == []
    assert sorted(p.name for p in path.rglob("*.tmp") if ".hoodie" not in p.parts) == []
    assert ours(path) == theirs(path) == stream.expected()


def test_a_crash_after_completion_needs_nothing_more(tmp_path):
    path, table, stream, instant = planned_table(tmp_path)
    assert run_executor(path, instant, "compaction.completed") == -9
    assert pending_compactions(table) == []
    with pytest.raises(ValueError, match="no pending compaction"):
        execute_compaction(table, instant)
    assert ours(path) == theirs(path) == stream.expected()


def test_a_second_executor_of_the_same_plan_is_refused(tmp_path):
    path, table, stream, instant = planned_table(tmp_path)
    other = WriterLease(table.storage, "offline compactor", path=executor_lease_path(instant)).acquire()
    with pytest.raises(CompactionConflictError, match="offline compactor"):
        execute_compaction(table, instant)
    assert [(i.timestamp, i.state) for i in table.timeline().pending()] == [(instant, "requested")]
    other.release()

    execute_compaction(table, instant)
    assert ours(path) == theirs(path) == stream.expected()


def test_an_execution_in_a_background_thread_overlaps_the_writers_commits(tmp_path, monkeypatch):
    path, table, stream, instant = planned_table(tmp_path)
    files_written, commits_done = threading.Event(), threading.Event()

    def hold_before_completing(name: str) -> None:
        if name == "compaction.files_written":
            files_written.set()
            commits_done.wait(timeout=60)

    monkeypatch.setattr(failpoints, "reach", hold_before_completing)
    executor = threading.Thread(target=execute_compaction, args=(table, instant))
    executor.start()
    assert files_written.wait(timeout=60)
    with table.writer(write_options()) as stream.writer:
        stream.commit()
        stream.commit()
        assert ours(path) == stream.expected()
    commits_done.set()
    executor.join(timeout=60)
    assert not executor.is_alive()

    assert pending_compactions(table) == []
    assert log_files(path, instant)  # the commits went to the slices the compaction started
    assert ours(path) == theirs(path) == stream.expected()
