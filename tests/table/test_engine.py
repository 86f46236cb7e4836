"""The storage engine without Kafka or Spark: upserts, reads, conformance with hudi-rs, crashes."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from table.config.properties import TableConfig
from table.errors import FormatError, InvalidBatchError, WriterConflictError
from table.mor_table import MorTable
from table.storage.file_io import _temp_name
from table.storage.layout import BaseFileName, LogFileName
from table.storage.markers import IOType, MarkedFile, write_markers
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import Timeline
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


def test_snapshot_equals_oracle_and_hudi_rs_after_many_upserts(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    rng = random.Random(7)
    known: list[str] = []
    with table.writer(write_options()) as writer:
        for n in range(6):
            batch = change_batch(rng, known, 1500, first_id=n * 1500, clock=1000 + n * 100)
            oracle.apply_batch(batch)
            writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))

    expected = strip(oracle.rows(), DATA_COLUMNS)
    ours = table.snapshot()
    theirs = hudi_rs_read(path)
    assert ours.num_rows == len(expected) > 2000
    assert strip(by_key(ours), DATA_COLUMNS) == expected
    assert strip(by_key(theirs), DATA_COLUMNS) == expected
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time", "_hoodie_commit_seqno"]
    assert strip(by_key(theirs), meta) == strip(by_key(ours), meta)
    for r in ours.to_pylist():
        assert r["_hoodie_record_key"] == r["order_id"]
        assert r["_hoodie_partition_path"] == f"region={r['region']}"

    ro_ours = table.read_optimized()
    ro_theirs = hudi_rs_read(path, read_optimized=True)
    assert ro_ours.num_rows == ro_theirs.num_rows > 0
    assert strip(by_key(ro_ours), DATA_COLUMNS) == strip(by_key(ro_theirs), DATA_COLUMNS)


def test_every_commit_writes_log_files_to_existing_file_groups(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(1)
    known: list[str] = []
    with table.writer(write_options(initial_buckets=2)) as writer:
        for n in range(3):
            writer.upsert(pa.Table.from_pylist(change_batch(rng, known, 400, n * 400, 100 * n + 10), schema=SCHEMA))
    view = table.file_system_view()
    groups = view.all_file_groups()
    assert len(groups) == 2 * len(REGIONS)
    for group in groups:
        assert len(group.slices) == 1
        the_slice = group.latest_slice()
        assert the_slice.base_file is not None
        assert 1 <= len(the_slice.log_files) <= 2
    completed = Timeline.load(table.storage).completed_writes()
    assert [i.action for i in completed] == ["deltacommit"] * 3


def test_a_commit_written_by_several_tasks_in_one_process_holds_each_row_once_each_group_by_one_task(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    rng = random.Random(3)
    known: list[str] = []
    with table.writer(write_options(initial_buckets=2)) as writer:
        for n, tasks in enumerate((3, 2)):  # base files, then log files
            batch = change_batch(rng, known, 1200, n * 1200, 100 * n + 10)
            oracle.apply_batch(batch)
            records = pa.Table.from_pylist(batch, schema=SCHEMA)
            commit = writer.begin_delta_commit(writer.check_schema(records.schema))
            stats = commit.write(commit.routing.prepare(records), tasks)
            assert len({s.file_id for s in stats}) == len(stats) == 2 * len(REGIONS)
            names = [(BaseFileName if n == 0 else LogFileName).parse(s.path.rsplit("/", 1)[1]) for s in stats]
            assert len({name.write_token for name in names if name is not None}) == tasks
            commit.complete(stats)
        files = sorted(p.relative_to(path) for p in path.glob("region=*/*"))
        batch = pa.Table.from_pylist(change_batch(rng, known, 1200, 2400, 310), schema=SCHEMA)
        abandoned = writer.begin_delta_commit(writer.check_schema(batch.schema))
        assert abandoned.write(abandoned.routing.prepare(batch), 2)
        abandoned.abandon()  # each task's marker file names its own files: all are deleted
        assert sorted(p.relative_to(path) for p in path.glob("region=*/*")) == files

    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == strip(oracle.rows(), DATA_COLUMNS)


def test_time_travel_and_incremental_reads(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(3)
    with table.writer(write_options()) as writer:
        first = writer.upsert(pa.Table.from_pylist([row("a", 10, False, rng), row("b", 10, False, rng)], schema=SCHEMA))
        second = writer.upsert(
            pa.Table.from_pylist([row("a", 20, False, rng), row("c", 20, False, rng)], schema=SCHEMA)
        )
        third = writer.upsert(pa.Table.from_pylist([row("b", 30, True, rng)], schema=SCHEMA))
    assert sorted(by_key(table.snapshot(as_of=first))) == ["a", "b"]
    assert by_key(table.snapshot(as_of=second))["a"]["updated_at"] == 20
    assert sorted(by_key(table.snapshot())) == ["a", "c"]
    changed = table.incremental(first, second)
    assert sorted(by_key(changed)) == ["a", "c"]
    assert table.incremental(second, third).num_rows == 0  # only a delete in (second, third]


def test_bad_input_names_the_field_and_writes_nothing(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(5)
    good = pa.Table.from_pylist([row("a", 10, False, rng)], schema=SCHEMA)
    with table.writer(write_options()) as writer:
        writer.upsert(good)
        before = sorted(os.listdir(path / ".hoodie"))
        cases = {
            "order_id": good.drop_columns(["order_id"]),
            "null or empty": good.set_column(0, "order_id", pa.array([None], pa.string())),
            "updated_at": good.set_column(4, "updated_at", pa.array([["x"]], pa.list_(pa.string()))),
            "amount": good.drop_columns(["amount"]),
        }
        for expected_words, batch in cases.items():
            with pytest.raises(InvalidBatchError, match=expected_words):
                writer.upsert(batch)
    assert sorted(os.listdir(path / ".hoodie")) == before
    assert by_key(table.snapshot())["a"]["updated_at"] == 10


def test_a_table_without_an_ordering_field_is_refused_by_name_before_any_instant(tmp_path):
    """Hudi allows a table without a precombine field; this engine merges by one, so it says so
    before it begins a deltacommit, and the table is left as it was."""
    path = tmp_path / "orders"
    table = make_table(path)
    config = TableConfig.load(table.storage)
    dataclasses.replace(config, precombine_field=None).save(table.storage, overwrite=True)
    before = sorted(os.listdir(path / ".hoodie"))
    rng = random.Random(6)
    with (
        pytest.raises(FormatError, match=r"no ordering field \(hoodie\.table\.precombine\.field\)"),
        MorTable.load(str(path)).writer(write_options()) as writer,
    ):
        writer.upsert(pa.Table.from_pylist([row("a", 10, False, rng)], schema=SCHEMA))
    assert sorted(set(os.listdir(path / ".hoodie")) - {".aux"}) == before  # .aux holds the writer's lease
    assert [p.name for p in path.iterdir()] == [".hoodie"]  # no partition, no data file


def test_second_writer_is_refused_and_a_crashed_writers_claim_expires(tmp_path):
    table = make_table(tmp_path / "orders")
    with table.writer(write_options(), description="job A"), pytest.raises(WriterConflictError, match="job A"):
        table.writer(write_options(), description="job B").open()
    stale = table.writer(write_options(lease_ttl_seconds=0.2), description="crashed job")
    stale.open()
    stale._guard._lease._stop.set()  # the heartbeat dies with its process; the file stays behind
    import time

    time.sleep(0.5)
    with table.writer(write_options(), description="job C") as writer:
        writer.upsert(pa.Table.from_pylist([row("z", 5, False, random.Random(0))], schema=SCHEMA))
    assert sorted(by_key(table.snapshot())) == ["z"]


def test_lease_of_a_writer_process_that_died_on_this_host_is_taken_over_at_once(tmp_path):
    table = make_table(tmp_path / "orders")
    code = (
        "import os, signal, sys\n"
        "from table.mor_table import MorTable\n"
        "from table.write.writer import WriteOptions\n"
        f"MorTable.load({str(tmp_path / 'orders')!r}).writer(WriteOptions(lease_ttl_seconds=3600), 'killed job').open()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    )
    assert killed.returncode == -9
    with table.writer(write_options(), description="restarted job") as writer:
        writer.upsert(pa.Table.from_pylist([row("z", 5, False, random.Random(0))], schema=SCHEMA))
    assert sorted(by_key(table.snapshot())) == ["z"]


def test_lease_whose_pid_now_belongs_to_another_process_is_taken_over_at_once(tmp_path):
    import dataclasses
    import socket
    import time

    from table.storage.lease import LEASE_PATH, LeaseHolder

    table = make_table(tmp_path / "orders")
    # as after a container restart: same host name, the pid reused by a process started later
    stale = LeaseHolder(
        "old-owner", "job before the restart", socket.gethostname(), os.getpid(), time.time(), 3600, process_start="1"
    )
    table.storage.write_bytes(LEASE_PATH, stale.to_bytes())
    with table.writer(write_options(), description="restarted job") as writer:
        writer.upsert(pa.Table.from_pylist([row("z", 5, False, random.Random(0))], schema=SCHEMA))
    live = dataclasses.replace(stale, process_start=None)  # unknown start time: the pid is trusted
    table.storage.write_bytes(LEASE_PATH, live.to_bytes())
    with pytest.raises(WriterConflictError, match="job before the restart"):
        table.writer(write_options(), description="second job").open()


CRASHING_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    import pyarrow.compute as pc
    from table.mor_table import MorTable
    from table.write.file_group_writer import WriteTask, write_file_groups
    from table.write.prepare import prepare_batch
    from table.write.routing import FILE_ID
    from table.write.writer import WriteOptions

    table = MorTable.load(sys.argv[1])
    batch = pa.ipc.open_file(sys.argv[2]).read_all()
    writer = table.writer(WriteOptions(initial_buckets=4, delete_field="is_deleted", lease_ttl_seconds=0.5)).open()
    prepared = prepare_batch(batch, writer.batch_spec, writer.key_generator)
    commit = writer.begin_delta_commit(writer.check_schema(batch.schema))
    routed = commit.routing.route(prepared)
    first_groups = pa.array(sorted(set(routed[FILE_ID].to_pylist()))[:3])
    write_file_groups(commit.context, WriteTask(0), commit.routing,
                      routed.filter(pc.is_in(routed[FILE_ID], value_set=first_groups)))
    os.kill(os.getpid(), signal.SIGKILL)  # dies between its log files and its commit
    """
)


def test_write_killed_before_commit_is_invisible_and_rolled_back(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(11)
    known: list[str] = []
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    first = change_batch(rng, known, 800, 0, 100)
    oracle.apply_batch(first)
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist(first, schema=SCHEMA))
    files_before = sorted(p.name for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts)

    doomed = pa.Table.from_pylist(change_batch(rng, known, 500, 800, 200), schema=SCHEMA)
    batch_file = tmp_path / "batch.arrow"
    with pa.ipc.new_file(batch_file, doomed.schema) as sink:
        sink.write_table(doomed)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path), str(batch_file)], env=env)
    assert proc.returncode == -9
    leftovers = sorted(p.name for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts)
    assert len(leftovers) > len(files_before)  # the crashed writer did write data files
    assert [i.state for i in Timeline.load(table.storage).pending()] == ["inflight"]
    # What a kill between writing a file's bytes and moving them into place leaves next to it.
    [doomed_log, *_] = [p for p in path.rglob(".*.log.*") if p.name not in files_before and ".hoodie" not in p.parts]
    torn_temp = Path(_temp_name(str(doomed_log)))
    torn_temp.write_bytes(b"#HUDI#\0\0")
    leftovers.append(torn_temp.name)

    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected

    import time

    time.sleep(0.6)  # the crashed writer's lease expires
    second = change_batch(rng, known, 300, 1300, 300)
    oracle.apply_batch(second)
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist(second, schema=SCHEMA))
    timeline = Timeline.load(table.storage)
    assert timeline.pending() == []
    assert [i.action for i in timeline.completed("rollback")] == ["rollback"]
    rollback = deserialize_plan("HoodieRollbackMetadata", timeline.read_content(timeline.completed("rollback")[0]))
    deleted = {Path(f).name for p in rollback["partitionMetadata"].values() for f in p["successDeleteFiles"]}
    assert deleted == set(leftovers) - set(files_before)  # exactly the crashed writer's files
    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def test_avro_and_parquet_log_blocks_read_back_the_same(tmp_path):
    rng = random.Random(21)
    known: list[str] = []
    batches = [change_batch(rng, known, 600, n * 600, 100 + 100 * n) for n in range(3)]
    results = {}
    for block_format in ("avro", "parquet"):
        path = tmp_path / block_format
        table = make_table(path)
        with table.writer(write_options(log_block_format=block_format)) as writer:
            for b in batches:
                writer.upsert(pa.Table.from_pylist(b, schema=SCHEMA))
        results[block_format] = strip(by_key(table.snapshot()), DATA_COLUMNS)
        assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == results[block_format]
    assert results["avro"] == results["parquet"]


def test_a_marked_file_no_write_stat_reports_is_deleted_before_the_commit_completes(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(13)
    known: list[str] = []
    first = change_batch(rng, known, 400, 0, 100)
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist(first, schema=SCHEMA))
        expected = strip(by_key(table.snapshot()), DATA_COLUMNS)
        # A task attempt that failed after writing its log file (or a duplicate, speculative one).
        [group] = table.file_system_view().latest_slices()[:1]
        instant, timeline = writer.begin()
        stray = f"{group.partition_path}/.{group.file_id}_{group.base_instant}.log.1_7-7-1"
        write_markers(
            table.storage, instant, 7, [MarkedFile(group.partition_path, stray.rsplit("/", 1)[1], IOType.APPEND)]
        )
        table.storage.create(stray, b"#HUDI#\0\0\0\0")  # cut off, as a killed attempt leaves it
        writer.complete(instant, timeline, [], table.schema(), None)

    assert not (path / stray).exists()
    assert Timeline.load(table.storage).completed_writes()[-1].timestamp == instant
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def dictionary_encoded_columns(path: Path) -> set[str]:
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    encoded = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    return {name for name, encodings in encoded.items() if "RLE_DICTIONARY" in encodings}


def test_base_files_dictionary_encode_few_valued_columns_and_keep_unique_ones_plain(tmp_path):
    table = make_table(tmp_path / "t")
    rng = random.Random(5)
    rows = [row(f"o-{i:07d}", 1 + i, deleted=False, rng=rng) for i in range(12_000)]
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    base_files = sorted((tmp_path / "t").glob("*/*.parquet"))
    assert len(base_files) == len(REGIONS)
    for path in base_files:
        assert dictionary_encoded_columns(path) == {
            "_hoodie_commit_time",
            "_hoodie_partition_path",
            "_hoodie_file_name",
            "region",
            "status",
        }, path.name


def test_small_base_files_are_not_counted_and_keep_their_data_columns_plain(tmp_path):
    table = make_table(tmp_path / "t")
    rng = random.Random(6)
    rows = [row(f"o-{i:07d}", 1 + i, deleted=False, rng=rng) for i in range(800)]  # about 100 a file
    with table.writer(write_options(initial_buckets=1)) as writer:
        writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    for path in sorted((tmp_path / "t").glob("*/*.parquet")):
        assert dictionary_encoded_columns(path) == {
            "_hoodie_commit_time",
            "_hoodie_partition_path",
            "_hoodie_file_name",
        }, path.name
