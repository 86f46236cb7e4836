"""What Hudi's own writers leave on our tables, handled by the engine alone: the payload class's
merge rule (`table.read.merge.MergeRule`) and the metadata table our writer removes before its
commit (`table.write.metadata_table`). Apache Hudi judges both in tests/hudi/test_foreign_writers.py."""

from __future__ import annotations

import dataclasses
import logging
import random

import pyarrow as pa
import pytest

from table.config.properties import TableConfig
from table.errors import FormatError
from table.mor_table import MorTable
from table.read.merge import DELETE_COMMIT_TIME, DELETE_KEY, DELETE_ORDERING, MergeRule, merge_slice
from table.schema import COMMIT_SEQNO, COMMIT_TIME, RECORD_KEY
from table.services.compaction import CompactionStrategy, execute_compaction, schedule_compaction
from table.storage.layout import instant_file_path
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.timeline import Action, Instant, State
from table.write.metadata_table import METADATA_PARTITIONS
from tests.support.orders import SCHEMA, make_table, row, write_options

pytestmark = pytest.mark.unit

OVERWRITE_WITH_LATEST = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"


def versions(*rows: tuple[str, int, str, str]) -> pa.Table:
    """(key, ordering value, commit, value) rows."""
    return pa.table(
        {
            RECORD_KEY: [r[0] for r in rows],
            "ts": [r[1] for r in rows],
            COMMIT_TIME: [r[2] for r in rows],
            COMMIT_SEQNO: [f"{r[2]}_0_{i}" for i, r in enumerate(rows)],
            "v": [r[3] for r in rows],
        }
    )


def deletes(*rows: tuple[str, int, str]) -> pa.Table:
    return pa.table(
        {
            DELETE_KEY: [r[0] for r in rows],
            DELETE_ORDERING: pa.array([r[1] for r in rows], pa.int64()),
            DELETE_COMMIT_TIME: [r[2] for r in rows],
        }
    )


def values(table: pa.Table) -> dict[str, str]:
    return dict(zip(table[RECORD_KEY].to_pylist(), table["v"].to_pylist()))


def test_overwrite_with_latest_lets_what_the_logs_leave_replace_the_base_row_whatever_its_ordering_value():
    base = versions(("a", 5, "01", "base-a"), ("b", 5, "01", "base-b"), ("c", 5, "01", "base-c"))
    logs = versions(("a", 3, "02", "late-a"), ("a", 2, "03", "later-but-older-a"), ("b", 9, "02", "new-b"))
    dropped = deletes(("c", 1, "03"))
    assert values(merge_slice(base, logs, dropped, "ts", MergeRule.LOGS_OVER_BASE)) == {
        "a": "late-a",
        "b": "new-b",
    }  # logs compete by ordering value; c's delete wins over its base row
    assert values(merge_slice(base, logs, dropped, "ts", MergeRule.GREATEST_ORDERING)) == {
        "a": "base-a",
        "b": "new-b",
        "c": "base-c",
    }
    assert values(merge_slice(base, None, None, "ts", MergeRule.LOGS_OVER_BASE)) == values(base)


def test_the_payload_class_picks_the_rule_and_one_we_do_not_merge_as_hudi_is_refused_by_name():
    assert MergeRule.of("org.apache.hudi.common.model.DefaultHoodieRecordPayload") == MergeRule.GREATEST_ORDERING
    assert MergeRule.of(OVERWRITE_WITH_LATEST) == MergeRule.LOGS_OVER_BASE
    with pytest.raises(FormatError, match="PartialUpdateAvroPayload"):
        MergeRule.of("org.apache.hudi.common.model.PartialUpdateAvroPayload")


def test_our_reader_and_compaction_follow_the_payload_class_hoodie_properties_records(tmp_path):
    table = make_table(tmp_path / "t")
    table.config = dataclasses.replace(table.config, payload_class=OVERWRITE_WITH_LATEST)
    table.config.save(table.storage, overwrite=True)
    table = MorTable.load(str(tmp_path / "t"))
    rng = random.Random(2)
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist([row(k, 1000, False, rng) for k in ("a", "b")], schema=SCHEMA))
        assert not [s for s in table.file_system_view().latest_slices() if s.log_files]  # new groups: base files
        writer.upsert(pa.Table.from_pylist([row("a", 10, False, rng), row("b", 5, True, rng)], schema=SCHEMA))
    assert table.snapshot()["updated_at"].to_pylist() == [10]  # the late update wins, the late delete too
    with table.writer(write_options()) as writer:
        execute_compaction(table, schedule_compaction(writer, CompactionStrategy(min_log_files=1)))
    assert table.read_optimized()["updated_at"].to_pylist() == [10]


def add_metadata_table(path) -> None:
    hoodie = path / ".hoodie"
    (hoodie / "metadata" / "files").mkdir(parents=True)
    (hoodie / "metadata" / "files" / "data").write_bytes(b"x")
    config = TableConfig.load(MorTable.load(str(path)).storage)
    extra = {**config.extra, METADATA_PARTITIONS: "files"}
    dataclasses.replace(config, extra=extra).save(MorTable.load(str(path)).storage, overwrite=True)
    (hoodie / ".hoodie.properties.crc").write_bytes(b"stale")  # as Hadoop's local file system leaves it


class ForeignWrite:
    """A deltacommit by a writer in another process (Apache Hudi's): its instant files written
    straight to storage, so that this process's timeline journal does not know them."""

    def __init__(self, table: MorTable):
        self.storage = table.storage
        self.instant = Instant(table.timeline().new_instant_time(), Action.DELTA_COMMIT, State.REQUESTED)
        for state in (self.instant, self.instant.inflight()):
            self.storage.create(instant_file_path(state.file_name), b"")

    def complete(self) -> None:
        metadata = CommitMetadata(operation_type="UPSERT").to_json().encode()
        self.storage.create(instant_file_path(self.instant.completed().file_name), metadata)


def has_metadata_table(path) -> bool:
    return (path / ".hoodie" / "metadata").exists() or METADATA_PARTITIONS in (
        path / ".hoodie" / "hoodie.properties"
    ).read_text()


def test_our_writer_removes_a_metadata_table_at_open_and_after_a_foreign_write_but_costs_nothing_otherwise(
    tmp_path, caplog
):
    path = tmp_path / "t"
    table = make_table(path)
    add_metadata_table(path)
    rng = random.Random(3)
    with caplog.at_level(logging.WARNING, logger="table.write.metadata_table"):
        writer = MorTable.load(str(path)).writer(write_options()).open()
    try:
        assert not has_metadata_table(path) and not (path / ".hoodie" / ".hoodie.properties.crc").exists()
        assert (
            "removing Hudi's metadata table (hoodie.table.metadata.partitions=files, .hoodie/metadata)" in caplog.text
        )
        assert TableConfig.load(table.storage).name == "orders"  # the rewritten file is whole, checksum included

        writer.upsert(pa.Table.from_pylist([row("a", 1, False, rng)], schema=SCHEMA))
        add_metadata_table(path)
        writer.upsert(pa.Table.from_pylist([row("b", 2, False, rng)], schema=SCHEMA))
        assert has_metadata_table(path)  # only our own commits since the last check: not looked for
        writer.upsert(pa.Table.from_pylist([row("a", 4, False, rng)], schema=SCHEMA))  # a log file to compact
        compaction = schedule_compaction(writer, CompactionStrategy(min_log_files=1))
        assert compaction is not None
        execute_compaction(table, compaction)
        writer.upsert(pa.Table.from_pylist([row("b", 5, False, rng)], schema=SCHEMA))
        assert has_metadata_table(path)  # nor a compaction this process ran

        ForeignWrite(table).complete()
        writer.upsert(pa.Table.from_pylist([row("c", 3, False, rng)], schema=SCHEMA))
        assert not has_metadata_table(path)
    finally:
        writer.close()
    assert sorted(MorTable.load(str(path)).snapshot()["order_id"].to_pylist()) == ["a", "b", "c"]


def test_a_foreign_write_that_began_before_ours_and_completed_after_it_is_still_looked_for(tmp_path):
    path = tmp_path / "t"
    table = make_table(path)
    rng = random.Random(4)
    writer = MorTable.load(str(path)).writer(write_options()).open()
    try:
        foreign = ForeignWrite(table)  # another writer begins...
        for key in ("a", "b"):  # ours, at later instants
            writer.upsert(pa.Table.from_pylist([row(key, 1, False, rng)], schema=SCHEMA))
        foreign.complete()
        add_metadata_table(path)  # ...and completes after our commits, with a metadata table
        writer.upsert(pa.Table.from_pylist([row("c", 2, False, rng)], schema=SCHEMA))
        assert not has_metadata_table(path)
    finally:
        writer.close()
    assert sorted(MorTable.load(str(path)).snapshot()["order_id"].to_pylist()) == ["a", "b", "c"]
