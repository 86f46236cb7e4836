"""Commit metadata JSON: Hudi's files parse and serialise back byte for byte; ours has their layout."""

from __future__ import annotations

import json

import pytest

from table.timeline.commit_metadata import (
    CommitMetadata,
    ReplaceCommitMetadata,
    RuntimeStats,
    WriteStat,
    jackson_dumps,
)
from tests.support.hudi_samples import SAMPLES

pytestmark = pytest.mark.unit


SAMPLE_COMMIT_FILES = sorted(p for p in SAMPLES.glob("*/.hoodie/*.deltacommit*") if p.stat().st_size)


def test_the_samples_hold_commit_and_inflight_files():
    assert len(SAMPLE_COMMIT_FILES) == 8


@pytest.mark.parametrize("path", SAMPLE_COMMIT_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_sample_commit_metadata_parses_and_serialises_back_byte_for_byte(path):
    text = path.read_text()
    metadata = CommitMetadata.from_json(path.read_bytes())
    assert metadata.to_json() == text
    assert CommitMetadata.from_json(metadata.to_json()) == metadata


@pytest.mark.parametrize("path", SAMPLE_COMMIT_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
@pytest.mark.parametrize("with_values", [True, False], ids=["values", "texts"])
def test_stats_sent_laid_out_by_their_writers_make_the_same_commit_file(path, with_values):
    """Write tasks send their stats laid out, with their values; the driver's commit file is byte
    for byte the one it would render itself, and the stats parsed back, from their values or
    their texts, equal the writers'."""
    metadata = CommitMetadata.from_json(path.read_bytes())
    written = metadata.write_stats()
    texts, values = zip(*(stat.sent() for stat in written))
    received = WriteStat.from_laid_out(list(texts), list(values) if with_values else None)
    assert list(texts) == [stat.laid_out() for stat in written]
    assert received == written
    again = CommitMetadata.for_write(received, metadata.extra_metadata, metadata.operation_type, metadata.compacted)
    rendered = CommitMetadata.for_write(written, metadata.extra_metadata, metadata.operation_type, metadata.compacted)
    assert again.to_json() == rendered.to_json()


def test_stats_sent_with_values_parse_back_whole_beside_one_with_keys_of_its_own():
    """A delta stat with runtime and record stats, a base file's stat and one with an unknown key
    (sent without values: its text is parsed) come back equal, in their order."""
    delta = WriteStat(
        file_id="f-0",
        path="p=1/.f-0_001.log.2_0-1-2",
        partition_path="p=1",
        num_writes=3,
        runtime_stats=RuntimeStats(total_upsert_time=12),
        log_version=2,
        log_offset=0,
        base_file="f-0_0-1-1_001.parquet",
        log_files=[".f-0_001.log.2_0-1-2"],
        records_stats={"val": {"c": 1}},
    )
    base = WriteStat(file_id="f-1", path="p=2/f-1_0-1-1_002.parquet", partition_path="p=2", num_inserts=7)
    odd = WriteStat(file_id="f-2", path="p=2/f-2.parquet", partition_path="p=2", extra={"newKey": [1, 2]})
    written = [delta, base, odd]
    texts, values = zip(*(s.sent() for s in written))
    assert values[2] is None
    received = WriteStat.from_laid_out(list(texts), list(values))
    assert received == written
    assert [r.laid_out() for r in received] == [s.laid_out() for s in written]


def test_sample_log_write_is_a_delta_stat_with_its_slice():
    path = SAMPLES / "v6_trips_8i1u" / ".hoodie" / "20250331030645735.deltacommit"
    metadata = CommitMetadata.from_json(path.read_bytes())
    assert metadata.operation_type == "UPSERT_PREPPED"
    assert metadata.extra_metadata["_hoodie.spark.sql.writes.prepped"] == "true"
    assert json.loads(metadata.schema)["name"] == "v6_trips_8i1u_record"
    [stat] = metadata.write_stats()
    assert stat.is_delta
    assert stat.file_id == "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0"
    assert stat.prev_commit == "20250331030642808"
    assert stat.base_file == "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_0-13-60_20250331030642808.parquet"
    assert stat.log_files == [".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85"]
    assert (stat.log_version, stat.log_offset, stat.num_update_writes, stat.file_size_in_bytes) == (
        1,
        0,
        1,
        1148,
    )
    assert stat.runtime_stats == RuntimeStats(total_upsert_time=296)
    assert stat.extra == {}


def test_sample_first_commit_writes_base_files_in_three_partitions():
    path = SAMPLES / "v6_trips_8i1u" / ".hoodie" / "20250331030642808.deltacommit"
    metadata = CommitMetadata.from_json(path.read_bytes())
    assert sorted(metadata.partition_to_write_stats) == [
        "city=chennai",
        "city=san_francisco",
        "city=sao_paulo",
    ]
    assert sum(s.num_inserts for s in metadata.write_stats()) == 8
    assert not any(s.is_delta for s in metadata.write_stats())
    assert all(s.prev_commit == "null" and s.path.endswith(".parquet") for s in metadata.write_stats())


def test_a_log_write_serialises_with_hudis_field_order_and_layout():
    stat = WriteStat(
        file_id="f1-0",
        path="p=1/.f1-0_20250618054711154.log.2_0-26-85",
        prev_commit="20250618054711154",
        num_writes=3,
        num_update_writes=2,
        num_deletes=1,
        total_write_bytes=100,
        partition_path="p=1",
        total_log_blocks=2,
        file_size_in_bytes=100,
        log_version=2,
        log_offset=0,
        base_file="",
        log_files=[".f1-0_20250618054711154.log.2_0-26-85"],
    )
    checkpoint = json.dumps({"topic": {"0": 42}})
    metadata = CommitMetadata.for_write([stat], {"schema": "{}", "mor.checkpoint": checkpoint}, "UPSERT")
    text = metadata.to_json()
    d = json.loads(text)
    assert list(d) == ["partitionToWriteStats", "compacted", "extraMetadata", "operationType"]
    assert list(d["partitionToWriteStats"]["p=1"][0])[-6:] == [
        "runtimeStats",
        "logVersion",
        "logOffset",
        "baseFile",
        "logFiles",
        "recordsStats",
    ]
    assert d["partitionToWriteStats"]["p=1"][0]["recordsStats"] == {"val": None}
    assert d["extraMetadata"]["mor.checkpoint"] == checkpoint
    assert '    "p=1" : [ {\n      "fileId" : "f1-0",\n' in text
    assert '"logFiles" : [ ".f1-0_20250618054711154.log.2_0-26-85" ],' in text
    assert not text.endswith("\n")
    assert CommitMetadata.from_json(text) == metadata


def test_extra_metadata_values_must_be_strings():
    with pytest.raises(TypeError):
        CommitMetadata(extra_metadata={"checkpoint": {"a": 1}}).to_json()


def test_replace_commit_names_the_file_groups_it_replaces():
    metadata = ReplaceCommitMetadata(
        {"p": [WriteStat(file_id="new-0", path="p/new-0_0-1-2_20250618054711154.parquet", partition_path="p")]},
        extra_metadata={"schema": "{}"},
        operation_type="CLUSTER",
        partition_to_replace_file_ids={"p": ["old-0", "old-1"]},
    )
    text = metadata.to_json()
    assert list(json.loads(text))[-1] == "partitionToReplaceFileIds"
    assert '"p" : [ "old-0", "old-1" ]' in text
    assert ReplaceCommitMetadata.from_json(text) == metadata
    assert CommitMetadata.from_json(text).extra == {"partitionToReplaceFileIds": {"p": ["old-0", "old-1"]}}


def test_empty_content_is_empty_metadata():
    assert CommitMetadata.from_json(b"") == CommitMetadata()
    assert CommitMetadata().to_json() == (
        '{\n  "partitionToWriteStats" : { },\n  "compacted" : false,\n'
        '  "extraMetadata" : { },\n  "operationType" : "UNKNOWN"\n}'
    )


def test_unknown_keys_are_kept_in_place():
    d = {
        "partitionToWriteStats": {"": [{"fileId": "a", "futureStat": 7}]},
        "compacted": True,
        "extraMetadata": {},
        "operationType": "COMPACT",
        "version": 1,
    }
    metadata = CommitMetadata.from_dict(d)
    assert metadata.extra == {"version": 1}
    assert metadata.write_stats()[0].extra == {"futureStat": 7}
    again = json.loads(metadata.to_json())
    assert again["version"] == 1 and again["partitionToWriteStats"][""][0]["futureStat"] == 7


def test_a_stat_with_unknown_keys_lays_out_as_its_dict_does():
    stat = WriteStat.from_dict({"fileId": "a-0", "path": "p/a%s.parquet", "odd %d key": "50%", "numWrites": 3})
    assert stat.extra == {"odd %d key": "50%"}
    assert stat.laid_out() == jackson_dumps({"x": {"y": [stat.to_dict()]}}).split("[ ", 1)[1].rsplit(" ]", 1)[0]


def test_strings_are_escaped_as_jackson_does():
    assert jackson_dumps({"k": 'a"b\\c\n\x01é/'}) == '{\n  "k" : "a\\"b\\\\c\\n\\u0001é/"\n}'
    assert jackson_dumps({"a": [], "b": {}, "c": [1, None, True]}) == (
        '{\n  "a" : [ ],\n  "b" : { },\n  "c" : [ 1, null, true ]\n}'
    )
