"""Cleaning and archival: fewer files and a short timeline, while every reader still reads right."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from streamer.checkpoint import CHECKPOINT_KEY
from table.failpoints import FAIL_ENV_VAR
from table.file_group.log_file.block import HeaderKey
from table.file_group.log_file.reader import read_log_file
from table.index import consistent_hashing as ring
from table.mor_table import MorTable
from table.plans.compaction import read_compaction_plan
from table.plans.pending import pending_cleans
from table.services.archive import ArchivePolicy, archive, read_archived_instants
from table.services.clean import CleanPolicy, clean, execute_clean, schedule_clean
from table.services.compaction import CompactionStrategy, execute_compaction, schedule_compaction
from table.storage.layout import BaseFileName, LogFileName
from table.timeline.commit_metadata import ReplaceCommitMetadata
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import CompletedInstants, Instant
from table.write.writer import TableWriter
from tests.support.log_blocks import avro_records_in
from tests.support.oracle import Oracle
from tests.support.orders import (
    DATA_COLUMNS,
    SCHEMA,
    by_key,
    change_batch,
    hudi_rs_read,
    make_table,
    strip,
    write_options,
)

pytestmark = pytest.mark.unit

PROJECT = Path(__file__).resolve().parents[3]


@dataclass
class History:
    """Batches written to a table, and what the table must hold as of each commit."""

    table: MorTable
    rng: random.Random = field(default_factory=lambda: random.Random(17))
    known: list[str] = field(default_factory=list)
    oracle: Oracle = field(default_factory=lambda: Oracle("order_id", "updated_at", "is_deleted"))
    expected_as_of: dict[str, dict] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.table.base_uri)

    def write(
        self,
        writer: TableWriter,
        commits: int,
        *,
        size: int = 120,
        compact_every: int | None = None,
        between=None,
        extra_metadata=None,
        skip_region: str | None = None,
    ) -> list[str]:
        """Upsert `commits` batches; compact every `compact_every` of them, and call `between()`
        after each, as the streamer runs services between batches."""
        instants = []
        for _ in range(commits):
            n = len(self.expected_as_of)
            batch = [
                r
                for r in change_batch(self.rng, self.known, size, n * size, 100 + 100 * n)
                if r["region"] != skip_region
            ]
            self.oracle.apply_batch(batch)
            instant = writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA), extra_metadata)
            self.expected_as_of[instant] = strip(self.oracle.rows(), DATA_COLUMNS)
            instants.append(instant)
            if compact_every and len(self.expected_as_of) % compact_every == 0:
                execute_compaction(self.table, schedule_compaction(writer, CompactionStrategy()))
            if between:
                between()
        return instants

    def assert_reads_match(self, as_of: list[str] = ()) -> None:
        """Our reader and hudi-rs read what the oracle holds: now, and as of each of `as_of`."""
        latest = strip(self.oracle.rows(), DATA_COLUMNS)
        assert strip(by_key(self.table.snapshot()), DATA_COLUMNS) == latest
        assert strip(by_key(hudi_rs_read(self.path)), DATA_COLUMNS) == latest
        for instant in as_of:
            expected = self.expected_as_of[instant]
            assert strip(by_key(self.table.snapshot(as_of=instant)), DATA_COLUMNS) == expected, instant
            assert strip(by_key(hudi_rs_read(self.path, as_of=instant)), DATA_COLUMNS) == expected, instant


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


def latest_slice_files(table: MorTable) -> set[str]:
    slices = table.file_system_view().latest_slices()
    return {f.path for s in slices for f in [*s.log_files, *([s.base_file] if s.base_file else [])]}


def clean_as_writer(table: MorTable, policy: CleanPolicy):
    """A clean planned by a writer of its own, as `streamer clean` runs it."""
    with table.writer(write_options(), description="clean") as writer:
        return clean(writer, policy)


def run_killed_at(failpoint: str, code: str, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), FAIL_ENV_VAR: failpoint}
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env)
    assert proc.returncode == -9


# -- which instants count as completed --------------------------------------------------------------


def test_instants_older_than_the_active_timeline_count_as_completed_unless_pending():
    completed = CompletedInstants(
        active=frozenset({"20250101000000005", "20250101000000007"}),
        pending=frozenset({"20250101000000002", "20250101000000006"}),
        timeline_start="20250101000000005",
    )
    assert "20250101000000001" in completed  # archived
    assert "20250101000000002" not in completed  # pending, however old
    assert "20250101000000006" not in completed
    assert "20250101000000007" in completed
    assert "20250101000000008" not in completed
    as_of = completed.up_to("20250101000000006")
    assert "20250101000000001" in as_of and "20250101000000005" in as_of
    assert "20250101000000007" not in as_of
    assert "20250101000000001" not in CompletedInstants(frozenset(), frozenset(), None)


# -- cleaning -------------------------------------------------------------------------------------


def test_clean_keeps_the_snapshot_and_reads_as_of_retained_commits(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        instants = history.write(writer, 14, compact_every=3)
    before = data_files(history.path)

    result = clean_as_writer(history.table, CleanPolicy("keep_latest_commits", retained=5))

    after = data_files(history.path)
    assert result.files_deleted == len(before - after) > 0 and after < before
    timeline = history.table.timeline()
    assert result.earliest_commit_to_retain == timeline.completed_writes()[-5].timestamp
    retained = [t for t in instants if t >= result.earliest_commit_to_retain]
    history.assert_reads_match(as_of=retained)
    (done,) = timeline.completed("clean")
    plan = deserialize_plan("HoodieCleanerPlan", timeline.read_content(done.requested()))
    assert plan["policy"] == "KEEP_LATEST_COMMITS" and plan["version"] == 2
    assert plan["earliestInstantToRetain"]["timestamp"] == result.earliest_commit_to_retain
    planned = [Path(f["filePath"]).name for files in plan["filePathsToBeDeletedPerPartition"].values() for f in files]
    for i, name in enumerate(planned):  # a base file goes after the log files of its slice
        base = BaseFileName.parse(name)
        later_logs = {(log.file_id, log.base_instant) for log in map(LogFileName.parse, planned[i + 1 :]) if log}
        assert base is None or (base.file_id, base.instant) not in later_logs
    metadata = deserialize_plan("HoodieCleanMetadata", timeline.read_content(done))
    deleted = {f for p in metadata["partitionMetadata"].values() for f in p["successDeleteFiles"]}
    assert deleted == set(planned) == {Path(f).name for f in before - after}
    assert metadata["totalFilesDeleted"] == len(deleted)
    assert (
        clean_as_writer(history.table, CleanPolicy("keep_latest_commits", retained=5)) is None
    )  # nothing left to delete


@pytest.mark.parametrize("policy", [CleanPolicy("keep_latest_commits", 1), CleanPolicy("keep_latest_file_versions", 1)])
def test_the_latest_slice_of_a_file_group_is_never_cleaned(tmp_path, policy):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 8, compact_every=2)
        history.write(writer, 4, skip_region="emea")  # emea's latest slices fall behind the window
    latest = latest_slice_files(history.table)

    assert clean_as_writer(history.table, policy).files_deleted > 0

    assert latest <= data_files(history.path)
    groups = history.table.file_system_view().all_file_groups()
    assert all(len(g.slices) == 1 for g in groups)
    history.assert_reads_match()


def test_the_slices_a_pending_compaction_reads_are_not_cleaned(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 5, compact_every=2)
        pending = schedule_compaction(writer, CompactionStrategy())
        history.write(writer, 4)
    operations, _ = read_compaction_plan(history.table.timeline(), pending)
    planned = {f"{op.partition_path}/{name}" for op in operations for name in [*op.log_files, op.base_file]}
    assert operations and all(op.base_file for op in operations)

    clean_as_writer(history.table, CleanPolicy("keep_latest_file_versions", 1))

    assert planned <= data_files(history.path)
    execute_compaction(history.table, pending)
    history.assert_reads_match()


CLEAN = """
import sys
from table.mor_table import MorTable
from table.services.clean import CleanPolicy, clean
from table.write.writer import WriteOptions
with MorTable.load(sys.argv[1]).writer(WriteOptions(initial_buckets=2)) as writer:
    clean(writer, CleanPolicy(retained=int(sys.argv[2])))
"""


def test_a_clean_killed_before_completing_is_finished_by_the_next_call(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 9, compact_every=3)
    before = data_files(history.path)

    run_killed_at("clean.files_deleted", CLEAN, history.path, 3)

    (instant,) = pending_cleans(history.table)
    assert history.table.timeline().contains(Instant(instant, "clean", "inflight"))
    deleted = before - data_files(history.path)
    assert deleted
    history.assert_reads_match()
    assert (
        clean_as_writer(history.table, CleanPolicy(retained=3)) is None
    )  # finishes the pending one, finds nothing new
    assert pending_cleans(history.table) == []
    done = Instant(instant, "clean", "completed")
    metadata = deserialize_plan("HoodieCleanMetadata", history.table.timeline().read_content(done))
    assert metadata["totalFilesDeleted"] == len(deleted)
    with pytest.raises(ValueError, match="no pending clean"):
        execute_clean(history.table, instant)


def test_a_second_clean_waits_for_the_pending_one(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 6, compact_every=2)
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        first = schedule_clean(writer, CleanPolicy(retained=2))
        assert first is not None
        assert schedule_clean(writer, CleanPolicy(retained=2)) is None
    assert str(execute_clean(history.table, first)).startswith(f"clean {first}: ")


def add_replacecommit(table: MorTable, partition: str, file_id: str) -> str:
    """A completed replacecommit that retires one file group (as a finished clustering would)."""
    timeline = table.timeline()
    instant = timeline.create_requested(Instant(timeline.new_instant_time(), "replacecommit", "requested"))
    metadata = ReplaceCommitMetadata(operation_type="CLUSTER", partition_to_replace_file_ids={partition: [file_id]})
    timeline.complete(timeline.transition_to_inflight(instant), metadata.to_json().encode())
    return instant.timestamp


def test_a_replaced_file_group_goes_once_its_replacecommit_leaves_the_window(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    policy = CleanPolicy("keep_latest_commits", retained=3)
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 4)
        file_id = sorted(history.table.file_system_view().file_groups("region=emea"))[0]
        replaced_at = add_replacecommit(history.table, "region=emea", file_id)
        history.write(writer, 2, skip_region="emea")
        clean(writer, policy)
        assert any(file_id in f for f in data_files(history.path))
        archived = archive(history.table, ArchivePolicy(1, 2)).archived
        assert archived and all(i.timestamp < replaced_at for i in archived)

        history.write(writer, 3, skip_region="emea")
        before = data_files(history.path)
        clean(writer, policy)
    assert before - data_files(history.path) == {f for f in before if file_id in f}
    assert replaced_at in {i.timestamp for i in archive(history.table, ArchivePolicy(1, 2)).archived}


def test_hashing_metadata_older_than_the_latest_committed_version_is_cleaned(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    storage = history.table.storage
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        old, newer = history.write(writer, 2)
        current = ring.load_latest(storage, "region=apac")
        ring.save(storage, replace(current, instant=old))
        ring.write_commit_marker(storage, "region=apac", old)
        ring.save(storage, replace(current, instant=newer))  # committed by its completed instant
        timeline = history.table.timeline()
        resizing = timeline.create_requested(Instant(timeline.new_instant_time(), "replacecommit", "requested"))
        ring.save(storage, replace(current, instant=resizing.timestamp))

    with history.table.writer(write_options(initial_buckets=2)) as writer:  # a writer that loads those rings
        clean(writer, CleanPolicy(retained=5))

        versions, markers = ring.list_versions(storage, "region=apac")
        assert versions == [newer, resizing.timestamp] and markers <= {newer}  # the loading writer marks the latest
        assert ring.list_versions(storage, "region=emea")[0] == [ring.INIT_INSTANT_TS]  # nothing newer there
        history.write(writer, 1)
    history.assert_reads_match()


# -- archival -------------------------------------------------------------------------------------


def test_archival_keeps_the_active_timeline_between_its_bounds_over_hundreds_of_commits(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    policy = ArchivePolicy(min_instants=12, max_instants=20)
    sizes = []

    def services() -> None:
        if len(history.expected_as_of) % 4 == 0:
            clean(writer, CleanPolicy(retained=6))
        archive(history.table, policy, keep_latest_with_metadata_prefix=CHECKPOINT_KEY)
        sizes.append(len(history.table.timeline().completed()))

    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(
            writer,
            200,
            size=20,
            compact_every=7,
            between=services,
            extra_metadata={CHECKPOINT_KEY: json.dumps({"offsets": [1]})},
        )

    assert max(sizes) <= policy.max_instants and min(sizes[policy.max_instants :]) >= policy.min_instants
    active = history.table.timeline()
    archived = read_archived_instants(history.table)
    assert len(archived) > 200 and {i.key for i in archived}.isdisjoint(i.key for i in active.instants)
    assert all(i.state == "completed" for i in archived)
    assert set(history.expected_as_of) <= {i.timestamp for i in archived + active.instants}
    last_clean = deserialize_plan("HoodieCleanMetadata", active.read_content(active.completed("clean")[-1]))
    retained = [t for t in history.expected_as_of if t >= last_clean["earliestCommitToRetain"]]
    assert active.completed_writes()[0].timestamp <= retained[0]
    history.assert_reads_match(as_of=retained)
    assert json.loads(history.table.latest_extra_metadata(CHECKPOINT_KEY)) == {"offsets": [1]}


def test_archival_stops_at_the_last_commit_before_a_pending_instant(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        early = history.write(writer, 3)
        pending = schedule_compaction(writer, CompactionStrategy())
        history.write(writer, 8)
        archived = archive(history.table, ArchivePolicy(1, 2)).archived
        assert [i.timestamp for i in archived] == early[:-1]
        assert history.table.timeline().completed_writes()[0].timestamp == early[-1]
        execute_compaction(history.table, pending)
        assert archive(history.table, ArchivePolicy(1, 2)).archived
    history.assert_reads_match()


def test_archival_keeps_the_latest_write_whatever_follows_it(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        history.write(writer, 6, compact_every=3)
    clean_as_writer(history.table, CleanPolicy("keep_latest_file_versions", 1))

    archive(history.table, ArchivePolicy(1, 2))

    assert [i.action for i in history.table.timeline().completed()] == ["commit", "clean"]
    history.assert_reads_match()


def test_archival_keeps_each_streams_latest_checkpoint_and_what_the_last_clean_retains(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    eu_key = f"{CHECKPOINT_KEY}.orders-eu"
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        early = history.write(writer, 2)
        history.write(writer, 1, extra_metadata={eu_key: json.dumps({"batch": 9})})
        history.write(writer, 1, extra_metadata={CHECKPOINT_KEY: json.dumps({"batch": 3})})
        history.write(writer, 1, extra_metadata={CHECKPOINT_KEY: json.dumps({"batch": 4})})
        history.write(writer, 8, compact_every=2)
    archived = archive(history.table, ArchivePolicy(1, 2), keep_latest_with_metadata_prefix=CHECKPOINT_KEY).archived
    assert [i.timestamp for i in archived] == early
    assert json.loads(history.table.latest_extra_metadata(CHECKPOINT_KEY)) == {"batch": 4}
    assert json.loads(history.table.latest_extra_metadata(eu_key)) == {"batch": 9}

    result = clean_as_writer(history.table, CleanPolicy(retained=6))
    archive(history.table, ArchivePolicy(1, 2))
    assert history.table.timeline().completed_writes()[0].timestamp == result.earliest_commit_to_retain
    history.assert_reads_match(as_of=[t for t in history.expected_as_of if t >= result.earliest_commit_to_retain])


ARCHIVE = """
import sys
from table.mor_table import MorTable
from table.services.archive import ArchivePolicy, archive
archive(MorTable.load(sys.argv[1]), ArchivePolicy(2, 3))
"""


def test_archived_entries_read_back_and_a_crash_before_deleting_leaves_only_duplicates(tmp_path):
    history = History(make_table(tmp_path / "orders"))
    with history.table.writer(write_options(initial_buckets=2)) as writer:
        first = history.write(writer, 2, extra_metadata={CHECKPOINT_KEY: "{}"})
        compaction = schedule_compaction(writer, CompactionStrategy())
        execute_compaction(history.table, compaction)
        history.write(writer, 3)
        cleaned = clean(writer, CleanPolicy(retained=2)).instant
        history.write(writer, 3, compact_every=2)
        clean(writer, CleanPolicy(retained=2))  # retains less than the first: that one can go
        history.write(writer, 2)
    before = history.table.timeline().completed()

    run_killed_at("archive.entries_written", ARCHIVE, history.path)

    assert history.table.timeline().completed() == before  # nothing deleted yet
    history.assert_reads_match()
    result = archive(history.table, ArchivePolicy(2, 3))
    assert result.archive_file.endswith("/.commits_.archive.2_1-0-1")
    archived = read_archived_instants(history.table)
    assert archived == list(result.archived) == before[: len(archived)]
    assert {first[0], compaction, cleaned} <= {i.timestamp for i in archived}
    history.assert_reads_match()

    entries = archive_entries(history.table, result.archive_file)
    by_state = {(e["commitTime"], e["actionType"], e["actionState"]): e for e in entries}
    assert len(by_state) == len(entries) == 3 * len(archived)
    commit = by_state[(first[0], "deltacommit", "COMPLETED")]["hoodieCommitMetadata"]
    assert commit["extraMetadata"][CHECKPOINT_KEY] == "{}" and commit["extraMetadata"]["ROLLING_STATS"] == ""
    assert commit["operationType"] == "UPSERT" and commit["partitionToWriteStats"]
    assert by_state[(first[0], "deltacommit", "REQUESTED")]["hoodieCommitMetadata"] is None
    plan = by_state[(compaction, "compaction", "REQUESTED")]["hoodieCompactionPlan"]
    assert plan["operations"] and by_state[(compaction, "compaction", "INFLIGHT")]["hoodieCompactionPlan"] == plan
    assert by_state[(compaction, "commit", "COMPLETED")]["hoodieCommitMetadata"]["operationType"] == "COMPACT"
    assert by_state[(cleaned, "clean", "REQUESTED")]["hoodieCleanerPlan"]["policy"] == "KEEP_LATEST_COMMITS"
    assert by_state[(cleaned, "clean", "COMPLETED")]["hoodieCleanMetadata"]["startCleanTime"] == cleaned


def archive_entries(table: MorTable, archive_file: str) -> list[dict]:
    """The records of an archive file, decoded by fastavro with the schema of its block header."""
    (block,) = read_log_file(table.storage, archive_file)
    schema = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
    records = avro_records_in(table.storage.read_bytes(archive_file))
    return [fastavro.schemaless_reader(io.BytesIO(r), schema) for r in records]
