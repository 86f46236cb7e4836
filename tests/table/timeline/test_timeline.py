"""The active timeline: file names per action and state, loading Hudi's timelines, atomic
transitions, instant times that only move forward."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from table.config.properties import TableConfig
from table.storage.file_io import Storage
from table.storage.layout import PARTITION_METADATA_FILE, write_partition_metadata
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.timeline import (
    Action,
    Instant,
    InstantTimeGenerator,
    State,
    Timeline,
    parse_instant_time,
)
from tests.support.hudi_samples import SAMPLES

pytestmark = pytest.mark.unit


SAMPLE_TIMELINES = {
    "v6_trips_8i1u": ["20250331030642808", "20250331030645735"],
    "v6_trips_8i3d": ["20250618054711154", "20250618054714114"],
}
TS = "20250618054711154"


@pytest.fixture
def timeline(tmp_path) -> Timeline:
    return Timeline.load(Storage(str(tmp_path)))


def hoodie_files(timeline: Timeline) -> list[str]:
    return sorted(e.name for e in timeline.storage.list_dir(".hoodie"))


@pytest.mark.parametrize(
    "action, state, file_name",
    [
        ("deltacommit", "requested", f"{TS}.deltacommit.requested"),
        ("deltacommit", "inflight", f"{TS}.deltacommit.inflight"),
        ("deltacommit", "completed", f"{TS}.deltacommit"),
        ("commit", "requested", f"{TS}.commit.requested"),
        ("commit", "inflight", f"{TS}.inflight"),
        ("commit", "completed", f"{TS}.commit"),
        ("compaction", "requested", f"{TS}.compaction.requested"),
        ("compaction", "inflight", f"{TS}.compaction.inflight"),
        ("replacecommit", "requested", f"{TS}.replacecommit.requested"),
        ("replacecommit", "inflight", f"{TS}.replacecommit.inflight"),
        ("replacecommit", "completed", f"{TS}.replacecommit"),
        ("clean", "requested", f"{TS}.clean.requested"),
        ("clean", "completed", f"{TS}.clean"),
        ("rollback", "inflight", f"{TS}.rollback.inflight"),
        ("rollback", "completed", f"{TS}.rollback"),
    ],
)
def test_instant_file_names_follow_timeline_layout_1(action, state, file_name):
    instant = Instant(TS, action, state)
    assert instant.file_name == file_name
    assert Instant.from_file_name(file_name) == instant


def test_a_compaction_completes_as_a_commit():
    assert Instant(TS, "compaction", "inflight").completed() == Instant(TS, Action.COMMIT, State.COMPLETED)
    with pytest.raises(ValueError, match="a completed compaction is a commit instant"):
        Instant(TS, "compaction", "completed")


@pytest.mark.parametrize(
    "name",
    [
        "hoodie.properties",
        "archived",
        ".aux",
        f"{TS}.savepoint",
        f"{TS}.deltacommit.crc",
        "x.deltacommit",
        f"{TS}.deltacommit.completed",
        f".{TS}.deltacommit.tmp",
    ],
)
def test_files_that_are_not_instants_are_not_read_as_instants(name):
    assert Instant.from_file_name(name) is None


@pytest.mark.parametrize("table", sorted(SAMPLE_TIMELINES))
def test_sample_timelines_load_as_completed_deltacommits(table):
    timeline = Timeline.load(Storage(str(SAMPLES / table)))
    expected = [Instant(ts, "deltacommit", "completed") for ts in SAMPLE_TIMELINES[table]]
    assert timeline.instants == expected
    assert timeline.completed() == expected
    assert timeline.completed_writes() == expected
    assert timeline.pending() == []
    assert timeline.last_completed_write() == expected[-1]
    assert timeline.completed_timestamps().active == frozenset(SAMPLE_TIMELINES[table])
    assert timeline.is_completed(SAMPLE_TIMELINES[table][0])
    assert timeline.is_completed("20250101000000000")  # before the timeline starts: archived
    assert not timeline.is_completed("20990101000000000")
    assert timeline.in_range(SAMPLE_TIMELINES[table][0], None) == expected[1:]
    assert timeline.in_range(None, SAMPLE_TIMELINES[table][0]) == expected[:1]
    assert CommitMetadata.from_json(timeline.read_content(expected[-1])).schema is not None


def test_a_write_goes_requested_inflight_completed_and_keeps_every_state_file(timeline):
    instant = timeline.create_requested(Instant(timeline.new_instant_time(), "deltacommit", "requested"))
    ts = instant.timestamp
    assert timeline.pending() == [instant] and timeline.completed() == []
    inflight = timeline.transition_to_inflight(instant, b"{}")
    assert timeline.contains(inflight) and not timeline.contains(instant)
    done = timeline.complete(inflight, b'{"operationType" : "UPSERT"}')
    assert done == Instant(ts, "deltacommit", "completed")
    assert hoodie_files(timeline) == [
        f"{ts}.deltacommit",
        f"{ts}.deltacommit.inflight",
        f"{ts}.deltacommit.requested",
    ]
    reloaded = Timeline.load(timeline.storage)
    assert reloaded.instants == [done]
    assert reloaded.read_content(done) == b'{"operationType" : "UPSERT"}'
    assert reloaded.read_content(instant) == b""


def test_readers_see_only_completed_instants(timeline):
    done = timeline.create_requested(Instant("20250618054711154", "deltacommit", "requested"))
    timeline.complete(timeline.transition_to_inflight(done), b"{}")
    timeline.create_requested(Instant("20250618054712000", "deltacommit", "requested"))
    timeline.transition_to_inflight(Instant("20250618054712000", "deltacommit", "requested"))
    reader = Timeline.load(timeline.storage)
    assert reader.completed_timestamps().active == {"20250618054711154"}
    assert "20250618054712000" not in reader.completed_timestamps()
    assert reader.last_completed_write().timestamp == "20250618054711154"
    assert reader.pending("deltacommit") == [Instant("20250618054712000", "deltacommit", "inflight")]
    assert reader.in_range(None, None) == [Instant("20250618054711154", "deltacommit", "completed")]


def test_completing_twice_fails(timeline):
    inflight = timeline.transition_to_inflight(timeline.create_requested(Instant(TS, "deltacommit", "requested")))
    stale = Timeline.load(timeline.storage)  # another view that saw the instant inflight
    timeline.complete(inflight, b"first")
    with pytest.raises(FileExistsError):
        timeline.complete(inflight, b"second")
    with pytest.raises(FileExistsError):  # the file system refuses it, whatever the view
        stale.complete(inflight, b"second")
    assert Timeline.load(timeline.storage).read_content(inflight.completed()) == b"first"


def test_transitions_go_in_order(timeline):
    requested = Instant(TS, "deltacommit", "requested")
    with pytest.raises(ValueError, match="not requested"):
        timeline.transition_to_inflight(requested)
    timeline.create_requested(requested)
    with pytest.raises(ValueError, match="not inflight"):
        timeline.complete(requested, b"")
    with pytest.raises(ValueError, match="already on the timeline"):  # one instant time, one instant
        timeline.create_requested(Instant(TS, "clean", "requested"))


def test_compaction_plan_to_commit(timeline):
    plan = timeline.create_requested(Instant(TS, "compaction", "requested"), b"avro plan")
    inflight = timeline.transition_to_inflight(plan)
    assert timeline.pending("compaction") == [inflight]
    timeline.complete(inflight, b"{}")
    reloaded = Timeline.load(timeline.storage)
    assert reloaded.instants == [Instant(TS, "commit", "completed")]
    assert reloaded.pending() == []
    assert reloaded.completed_writes() == [Instant(TS, "commit", "completed")]
    assert reloaded.read_content(plan) == b"avro plan"
    assert hoodie_files(timeline) == [
        f"{TS}.commit",
        f"{TS}.compaction.inflight",
        f"{TS}.compaction.requested",
    ]


def test_delete_pending_removes_a_failed_write(timeline):
    inflight = timeline.transition_to_inflight(timeline.create_requested(Instant(TS, "deltacommit", "requested")))
    timeline.delete_pending(inflight)
    assert hoodie_files(timeline) == []
    assert timeline.instants == [] and Timeline.load(timeline.storage).instants == []


def test_delete_pending_can_keep_a_plan_for_retry(timeline):
    inflight = timeline.transition_to_inflight(
        timeline.create_requested(Instant(TS, "compaction", "requested"), b"plan")
    )
    timeline.delete_pending(inflight, keep_requested=True)
    assert hoodie_files(timeline) == [f"{TS}.compaction.requested"]
    assert Timeline.load(timeline.storage).pending() == [Instant(TS, "compaction", "requested")]


def test_completed_instants_are_never_deleted(timeline):
    inflight = timeline.transition_to_inflight(timeline.create_requested(Instant(TS, "deltacommit", "requested")))
    timeline.complete(inflight, b"{}")
    with pytest.raises(ValueError, match="never deleted"):
        timeline.delete_pending(inflight)
    assert len(hoodie_files(timeline)) == 3


def test_instant_times_strictly_increase_under_a_stepped_back_clock():
    start = datetime(2025, 6, 18, 5, 47, 11, 154000, tzinfo=UTC)
    readings = iter(
        [
            start,
            start,
            start + timedelta(microseconds=300),
            start - timedelta(seconds=5),
            start - timedelta(hours=1),
            start + timedelta(milliseconds=10),
            start + timedelta(milliseconds=10),
        ]
    )
    generator = InstantTimeGenerator(clock=lambda: next(readings))
    times = [generator.next() for _ in range(7)]
    assert times[0] == "20250618054711154"
    assert all(len(t) == 17 and t.isdigit() for t in times)
    assert times == sorted(set(times)), times
    assert times[1:5] == ["20250618054711155", "20250618054711156", "20250618054711157", "20250618054711158"]
    assert times[5] == "20250618054711164"
    assert parse_instant_time(times[-1]) == start + timedelta(milliseconds=11)


def test_new_instant_time_is_after_every_instant_on_the_timeline(tmp_path):
    storage = Storage(str(tmp_path))
    clock_now = datetime(2025, 1, 1, tzinfo=UTC)
    writer = Timeline.load(storage, InstantTimeGenerator(clock=lambda: clock_now))
    writer.create_requested(Instant("20300101000000000", "clean", "requested"))  # written by a clock ahead
    restarted = Timeline.load(storage, InstantTimeGenerator(clock=lambda: clock_now))
    assert restarted.new_instant_time() == "20300101000000001"
    assert restarted.new_instant_time() == "20300101000000002"


def test_hudi_rs_reads_a_table_whose_timeline_and_metadata_we_wrote(tmp_path):
    """Rebuild a sample table's .hoodie and partition metadata with our modules; hudi-rs must
    read the same rows from it as from the original."""
    source = SAMPLES / "v6_trips_8i1u"
    source_timeline = Timeline.load(Storage(str(source)))
    storage = Storage(str(tmp_path))
    TableConfig.load(Storage(str(source))).save(storage)
    first = source_timeline.completed()[0].timestamp
    for partition in sorted(p for p in source.iterdir() if p.is_dir() and p.name != ".hoodie"):
        for f in partition.iterdir():
            if f.name != PARTITION_METADATA_FILE:
                (tmp_path / partition.name).mkdir(exist_ok=True)
                shutil.copy(f, tmp_path / partition.name / f.name)
        assert write_partition_metadata(storage, partition.name, first)
    timeline = Timeline.load(storage)
    for done in source_timeline.completed():
        inflight_text = source_timeline.read_content(done.inflight())
        requested = timeline.create_requested(done.requested())
        inflight = timeline.transition_to_inflight(
            requested, CommitMetadata.from_json(inflight_text).to_json().encode()
        )
        timeline.complete(inflight, CommitMetadata.from_json(source_timeline.read_content(done)).to_json().encode())

    def rows(path: Path) -> list[dict]:
        batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
        return pa.Table.from_batches(batches).sort_by("uuid").to_pylist()

    assert rows(tmp_path) == rows(source)
    assert len(rows(tmp_path)) == 8
