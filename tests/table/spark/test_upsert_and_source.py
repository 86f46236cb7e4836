"""The engine's Spark paths: distributed upsert and the `mor` data source, checked by hudi-rs."""

from __future__ import annotations

import os
import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, StringStartsWith
from pyspark.sql.pandas.types import from_arrow_schema

from table.index.consistent_hashing import hash_values
from table.mor_table import MorTable
from table.read.predicate import Predicate
from table.spark import datasource as spark_source
from table.spark.write import (
    PACKED,
    RECEIVED_CHUNK_BYTES,
    REREAD_PIECES,
    SPILL_WRITE_BYTES,
    TaskShare,
    _SpillBucket,
    _WriteTasks,
    pack,
    spark_hash_int,
    upsert_dataframe,
    write_dataframe,
    write_task_keys,
)
from table.storage.layout import LogFileName
from table.write.prepare import IS_DELETE
from table.write.routing import FILE_ID, KEY_HASH
from tests.support.oracle import Oracle
from tests.support.orders import (
    DATA_COLUMNS,
    REGIONS,
    SCHEMA,
    by_key,
    change_batch,
    hudi_rs_read,
    make_table,
    strip,
    write_options,
)

pytestmark = pytest.mark.spark


def test_dataframe_upserts_equal_the_oracle_through_every_reader(spark, tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    rng = random.Random(17)
    known: list[str] = []
    with table.writer(write_options(log_block_format="avro")) as writer:
        for n in range(3):
            batch = change_batch(rng, known, 3000, n * 3000, 100 + 100 * n)
            oracle.apply_batch(batch)
            # Input order decides ties between equal ordering values, so keep the batch's order.
            df = spark.createDataFrame(pa.Table.from_pylist(batch, schema=SCHEMA).to_pandas())
            assert upsert_dataframe(writer, df) is not None

    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected

    spark_source.register(spark)
    rows = spark.read.format("mor").load(str(path))
    assert rows.count() == len(expected)
    pruned = spark.read.format("mor").option("columns", "order_id,updated_at").load(str(path))
    assert pruned.columns == ["order_id", "updated_at"]
    got = {r.order_id: r.updated_at for r in pruned.collect()}
    assert got == {k: v["updated_at"] for k, v in expected.items()}
    emea = spark.read.format("mor").load(str(path)).where("region = 'emea'")
    assert emea.count() == sum(1 for v in expected.values() if v["region"] == "emea")
    n_slices = len(MorTable.load(str(path)).read_plan()[0])
    assert rows.rdd.getNumPartitions() < n_slices  # small slices share a task
    one_per_task = spark.read.format("mor").option("max_partition_bytes", 1).option("open_cost_bytes", 1)
    assert one_per_task.load(str(path)).rdd.getNumPartitions() == n_slices


def test_write_tasks_given_more_than_they_hold_write_their_file_groups_in_parts(spark, tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    rng = random.Random(18)
    known: list[str] = []
    with table.writer(write_options(task_memory_bytes=32 * 1024)) as writer:  # a few file groups a part
        for n in range(3):
            batch = change_batch(rng, known, 4000, n * 4000, 100 + 100 * n)
            oracle.apply_batch(batch)
            df = spark.createDataFrame(pa.Table.from_pylist(batch, schema=SCHEMA).to_pandas())
            assert upsert_dataframe(writer, df) is not None
            stats = writer.last_commit.write_stats()
            written = [s.file_id for s in stats]
            view = writer.file_system_view(table.timeline())
            assert len(written) == len(set(written)) == len(view.all_file_groups())  # each group one file
            if n == 0:  # groups larger than a task holds: base files written a piece of their keys at a time
                assert max(pq.ParquetFile(path / s.path).metadata.num_row_groups for s in stats) > 1
            else:  # and log files of a block per piece
                assert max(s.total_log_blocks for s in stats) > 2

    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def _rows_of_pieces(pieces: list[pa.Table], work: pa.RecordBatch) -> Iterator[pa.Table]:
    for piece in work.column("piece").to_pylist():
        yield pieces[piece]


def test_planned_work_writes_the_rows_it_reads_equal_to_the_oracle(spark, tmp_path):
    """A DataFrame of work, each row read into table rows by `to_rows` (as the streamer's offset
    ranges are): written through RDD operations, in parts as well, to the same table."""
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    rng = random.Random(19)
    known: list[str] = []
    with table.writer(write_options(task_memory_bytes=32 * 1024)) as writer:
        for n in range(2):
            batch = change_batch(rng, known, 4000, n * 4000, 100 + 100 * n)
            oracle.apply_batch(batch)
            rows = pa.Table.from_pylist(batch, schema=SCHEMA)
            pieces = [rows.slice(start, 700) for start in range(0, rows.num_rows, 700)]
            work = spark.createDataFrame([(i,) for i in range(len(pieces))], "piece int")  # in order, over 2 tasks
            commit = writer.begin_delta_commit(writer.check_schema(SCHEMA))
            result = write_dataframe(commit, work, partial(_rows_of_pieces, pieces), planned=True)
            assert result.metrics.rows == rows.num_rows
            commit.complete(result.stats)

    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(table.snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def _open_files_in(directory) -> list[str]:
    """The files this process holds open under `directory` (deleted ones included)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        if link.startswith(str(directory)):
            found.append(link)
    return found


@pytest.mark.unit
def test_a_task_share_past_its_memory_goes_to_disk_and_is_read_back_in_parts_of_whole_groups(tmp_path):
    rows = _routed(
        [f"g{i % 40:02d}" for i in range(20_000)],
        [f"p{i % 40 // 10}" for i in range(20_000)],
        [f"k{i:06d}" for i in range(20_000)],
    )
    tasks = _WriteTasks(1, (0,), {})
    values = [pack(rows.slice(i, 1000), tasks).column(PACKED)[0].as_buffer() for i in range(0, 20_000, 1000)]
    with TaskShare(memory_bytes=200_000, directory=str(tmp_path)) as share:
        for value in values:
            share.add(value)
        assert share.bytes == sum(v.size for v in values) > 200_000
        assert share.partitions == {f"g{i:02d}": f"p{i // 10}" for i in range(40)}
        pieces = list(share.pieces())
    assert len(pieces) > 2 and all(finished for _, finished in pieces)
    groups = [set(table[FILE_ID].to_pylist()) for table, _ in pieces]
    assert sum(map(len, groups)) == len(set().union(*groups)) == 40  # each group whole in one piece
    assert all(table.nbytes < 2 * 200_000 for table, _ in pieces)
    assert sorted(r for t, _ in pieces for r in t["payload"].to_pylist()) == sorted(rows["payload"].to_pylist())


@pytest.mark.unit
@pytest.mark.parametrize("memory_bytes", [10_000_000, 200_000], ids=["held", "spilled"])
def test_a_task_shares_pieces_come_ordered_by_file_group_upserts_before_deletes(tmp_path, memory_bytes):
    """The write slices each group's upserts and deletes out of a piece: the share hands it
    over in that order, so that the write holds no unordered copy of its rows."""
    count = 20_000
    rows = _routed(
        [f"g{i % 40:02d}" for i in range(count)],
        [f"p{i % 40 // 10}" for i in range(count)],
        [f"k{i:06d}" for i in range(count)],
        [i % 7 == 0 for i in range(count)],
    )
    with _task_share(rows, 1_000, memory_bytes=memory_bytes, directory=tmp_path) as share:
        pieces = [table for table, _ in share.pieces()]
    for piece in pieces:
        runs = list(zip(piece[FILE_ID].to_pylist(), piece[IS_DELETE].to_pylist()))
        first: dict[str, int] = {}
        for i, (group, _) in enumerate(runs):
            first.setdefault(group, i)
        assert runs == sorted(runs, key=lambda run: (first[run[0]], run[1]))
    payloads = sorted(p for piece in pieces for p in piece["payload"].to_pylist())
    assert payloads == sorted(rows["payload"].to_pylist())


@pytest.mark.unit
def test_spilled_rows_given_a_few_at_a_time_are_read_back_whole_in_a_few_record_batches(tmp_path):
    """The shuffle's values spread over every spill bucket a few rows each; a bucket gathers
    them into large record batches, so reading and splitting it costs what its rows cost."""
    rows = pa.table({"_hoodie_record_key": [f"k{i:06d}" for i in range(10_000)], "payload": ["x" * 90] * 10_000})
    bucket = _SpillBucket(str(tmp_path))
    try:
        for start in range(0, 10_000, 10):
            few = rows.slice(start, 10)
            bucket.write(few, few.nbytes)
        batches = list(bucket._batches())
    finally:
        bucket.close()
    assert pa.Table.from_batches(batches).equals(rows)
    assert len(batches) <= 2 + rows.nbytes // SPILL_WRITE_BYTES


def _routed(file_ids: list[str], partitions: list[str], keys: list[str], deletes: list[bool] | None = None) -> pa.Table:
    """Rows as routing leaves them: a file group, a partition, a record key and its hash, and
    whether it deletes, each."""
    return pa.table(
        {
            FILE_ID: file_ids,
            "_hoodie_partition_path": partitions,
            "_hoodie_record_key": keys,
            KEY_HASH: pa.array((hash_values(keys) & 0xFFFF).astype("uint16")),
            IS_DELETE: deletes or [False] * len(keys),
            "payload": [f"x{i:08d}" * 4 for i in range(len(keys))],
        }
    )


def _group_rows(file_ids: list[str], keys: list[str]) -> pa.Table:
    """Routed rows of one partition."""
    return _routed(file_ids, ["p"] * len(keys), keys)


def _task_share(rows: pa.Table, value_rows: int, memory_bytes: int, directory) -> TaskShare:
    """A write task's share of `rows`, received from the shuffle in values of `value_rows` rows."""
    tasks = _WriteTasks(1, (0,), {})
    share = TaskShare(memory_bytes=memory_bytes, directory=str(directory))
    for start in range(0, rows.num_rows, value_rows):
        share.add(pack(rows.slice(start, value_rows), tasks).column(PACKED)[0].as_buffer())
    return share


@pytest.mark.unit
def test_a_share_taken_in_over_several_chunks_spills_what_it_held_and_reads_every_row_back_once(tmp_path):
    """The first chunks are held; the one that takes the share past its memory spills them with
    itself, and what comes after goes to disk as it is taken in."""
    count = 150_000
    rows = _routed(
        [f"g{i % 40:02d}" for i in range(count)],
        [f"p{i % 40 // 10}" for i in range(count)],
        [f"k{i:07d}" for i in range(count)],
    )
    memory = RECEIVED_CHUNK_BYTES + RECEIVED_CHUNK_BYTES // 2
    with _task_share(rows, 1_000, memory_bytes=memory, directory=tmp_path) as share:
        assert share.bytes > 2 * RECEIVED_CHUNK_BYTES  # three chunks at least: one held, then spilled
        assert share.partitions == {f"g{i:02d}": f"p{i // 10}" for i in range(40)}
        pieces = list(share.pieces())
    assert len(pieces) > 1 and all(finished for _, finished in pieces)
    groups = [set(table[FILE_ID].to_pylist()) for table, _ in pieces]
    assert sum(map(len, groups)) == len(set().union(*groups)) == 40  # each group whole in one piece
    assert all(table.nbytes < 2 * memory for table, _ in pieces)
    keys = [k for table, _ in pieces for k in table["_hoodie_record_key"].to_pylist()]
    assert len(keys) == len(set(keys)) == count


@pytest.mark.unit
def test_a_file_group_larger_than_a_task_holds_comes_in_pieces_of_its_keys_the_last_one_finishing_it(tmp_path):
    rows = _group_rows(["big"] * 12_000 + ["small"] * 100, [f"k{i:06d}" for i in range(12_100)])
    with _task_share(rows, 1000, memory_bytes=100_000, directory=tmp_path) as share:
        pieces = list(share.pieces())
        assert _open_files_in(tmp_path) == []  # each spill file gone once read: a sync writes none of it back
    big = [(table, finished) for table, finished in pieces if "big" in table[FILE_ID].to_pylist()]
    assert len(big) > 3 and [finished for _, finished in big] == [False] * (len(big) - 1) + [True]
    keys = [k for table, _ in big for k in table["_hoodie_record_key"].to_pylist()]
    assert len(keys) == len(set(keys)) == 12_000  # each key in one piece only
    assert all(table.nbytes < 2 * 100_000 for table, _ in pieces)


@pytest.mark.unit
def test_a_group_a_few_times_larger_than_a_task_holds_is_read_once_a_piece_and_not_written_again(tmp_path, monkeypatch):
    created, create = [], tempfile.TemporaryFile

    def temporary_file(*args, **kwargs):
        created.append(create(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
    rows = _group_rows(["big"] * 30_000, [f"k{i:06d}" for i in range(30_000)])
    memory = rows.nbytes // 3
    with _task_share(rows, 1_000, memory_bytes=memory, directory=tmp_path) as share:
        pieces = list(share.pieces())
        assert _open_files_in(tmp_path) == []
    assert len(created) == 1  # the group's spill file, and no file of its pieces
    assert 1 < len(pieces) <= REREAD_PIECES
    assert [finished for _, finished in pieces] == [False] * (len(pieces) - 1) + [True]
    keys = [k for table, _ in pieces for k in table["_hoodie_record_key"].to_pylist()]
    assert len(keys) == len(set(keys)) == 30_000  # each key in one piece only
    assert all(table.nbytes < 2 * memory for table, _ in pieces)


@pytest.mark.unit
def test_a_group_of_one_key_larger_than_a_task_holds_comes_back_whole_and_finished(tmp_path):
    """Versions of one key cannot be split by key: the group is one piece, which finishes it, so
    that its file is written then rather than held until the task ends."""
    rows = _group_rows(["hot"] * 4_000, ["k"] * 4_000)
    with _task_share(rows, 500, memory_bytes=20_000, directory=tmp_path) as share:
        pieces = list(share.pieces())
    assert [(table.num_rows, finished) for table, finished in pieces] == [(4_000, True)]


def test_writes_leave_no_accumulator_or_broadcast_behind(spark, tmp_path):
    """A streaming job writes a micro-batch every few seconds for weeks: what a write hands its
    tasks goes when it is done, or the driver holds every batch's."""
    from pyspark import accumulators

    table = make_table(tmp_path / "orders")
    rng = random.Random(19)
    known: list[str] = []
    broadcast_files = Path(spark.sparkContext._temp_dir)

    def held() -> tuple[int, int]:
        return len(accumulators._accumulatorRegistry), len(list(broadcast_files.iterdir()))

    with table.writer(write_options()) as writer:
        for n in range(4):
            batch = change_batch(rng, known, 500, n * 500, 100 + 100 * n)
            assert upsert_dataframe(
                writer, spark.createDataFrame(pa.Table.from_pylist(batch, schema=SCHEMA).to_pandas())
            )
            if n == 0:
                after_first = held()
    assert held() == after_first


def test_the_write_stage_deals_the_file_groups_out_evenly_to_its_tasks(spark, tmp_path):
    """Hashing 16 file groups into a few tasks leaves some tasks far more than others as often as
    not, and the batch waits for the busiest; dealt out, each task writes as many."""
    table = make_table(tmp_path / "orders")
    rng = random.Random(23)
    known: list[str] = []
    with table.writer(write_options()) as writer:
        for n in range(2):
            batch = change_batch(rng, known, 2000, n * 2000, 100 + 100 * n)
            assert upsert_dataframe(
                writer, spark.createDataFrame(pa.Table.from_pylist(batch, schema=SCHEMA).to_pandas())
            )
        files = [Path(s.path).name for s in writer.last_commit.write_stats()]
    assert len(files) == len(REGIONS) * 4  # every bucket got a log file
    tasks = Counter(LogFileName.parse(name).write_token.split("-")[0] for name in files)
    assert len(tasks) == spark.sparkContext.defaultParallelism  # a task per core
    assert set(tasks.values()) == {len(files) // len(tasks)}


def test_the_write_tasks_keys_are_the_ints_spark_sends_to_each_task(spark):
    """The shuffle key of each write task comes from Spark's own hash, computed in Python so that
    no batch runs a Spark job to learn it."""
    from pyspark.sql import functions as F

    ints = spark.range(-3000, 3000).select(F.col("id").cast("int").alias("k"))
    assert {r.k: r.h for r in ints.select("k", F.hash("k").alias("h")).collect()} == {
        k: spark_hash_int(k) for k in range(-3000, 3000)
    }
    for count in range(1, 9):
        keys = spark.createDataFrame([(k,) for k in write_task_keys(count)], "k int")
        placed = keys.select(F.expr(f"pmod(hash(k), {count})").alias("task")).collect()
        assert [r.task for r in placed] == list(range(count))


def test_an_empty_dataframe_commits_nothing(spark, tmp_path):
    table = make_table(tmp_path / "orders")
    with table.writer(write_options()) as writer:
        empty = spark.createDataFrame([], from_arrow_schema(SCHEMA))
        assert upsert_dataframe(writer, empty) is None
    assert table.timeline().completed_writes() == []


def test_partition_filters_skip_slices_when_pushdown_is_enabled(spark, tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(23)
    known: list[str] = []
    rows = change_batch(rng, known, 2000, 0, 100)
    with table.writer(write_options()) as writer:
        writer.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    expected = strip(by_key(table.snapshot()), DATA_COLUMNS)
    spark.conf.set(spark_source.PUSHDOWN_CONF, "true")
    try:
        spark_source.register(spark)
        one_slice_per_task = spark.read.format("mor").option("max_partition_bytes", 1).option("open_cost_bytes", 1)
        emea = one_slice_per_task.load(str(path)).where("region = 'emea'")
        slices_read = emea.rdd.getNumPartitions()
        got = {r.order_id for r in emea.select("order_id").collect()}
    finally:
        spark.conf.set(spark_source.PUSHDOWN_CONF, "false")
        spark_source.register(spark)
    assert got == {k for k, v in expected.items() if v["region"] == "emea"}
    all_slices = len(MorTable.load(str(path)).read_plan()[0])
    assert slices_read == all_slices // len({v["region"] for v in expected.values()})


def test_range_filters_pushed_to_the_source_return_the_rows_spark_would_filter(spark, tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    rng = random.Random(29)
    known: list[str] = []
    with table.writer(write_options()) as writer:
        for n in range(3):  # base files, then log files with updates older and newer than the base rows
            writer.upsert(pa.Table.from_pylist(change_batch(rng, known, 3000, n * 3000, 100 + 100 * n), schema=SCHEMA))
    every_row = strip(by_key(table.snapshot()), DATA_COLUMNS)
    expected = {k for k, v in every_row.items() if 150 <= v["updated_at"] <= 250 and v["status"] in ("new", "paid")}
    query = "updated_at BETWEEN 150 AND 250 AND status IN ('new', 'paid') AND amount IS NOT NULL"
    spark.conf.set(spark_source.PUSHDOWN_CONF, "true")
    try:
        spark_source.register(spark)
        got = {r.order_id for r in spark.read.format("mor").load(str(path)).where(query).select("order_id").collect()}
    finally:
        spark.conf.set(spark_source.PUSHDOWN_CONF, "false")
        spark_source.register(spark)
    assert expected and got == expected


def test_comparisons_with_constants_become_predicates_and_other_filters_do_not():
    pushed = [
        GreaterThanOrEqual(("updated_at",), 150),
        LessThan(("updated_at",), 250),
        In(("status",), ("new", "paid")),
        IsNotNull(("amount",)),
        EqualTo(("kafka_key", "id"), 1),
        StringStartsWith(("status",), "n"),
        EqualTo(("status",), None),
    ]
    predicates = [spark_source.predicate_of(f) for f in pushed]
    assert predicates == [
        Predicate("updated_at", ">=", 150),
        Predicate("updated_at", "<", 250),
        Predicate("status", "in", ("new", "paid")),
        Predicate("amount", "not_null"),
        None,
        None,
        None,
    ]
