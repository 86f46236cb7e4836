"""Several writers on one table under optimistic concurrency (`table.write.concurrency`), on a local
disk: writers in separate processes commit side by side where their file groups are disjoint; a
commit whose file groups another one wrote since it began is refused, rolled back, and succeeds
when written again; a writer stalled (SIGSTOP) past the commit lock's expiry cannot commit over
its successor; a live writer's pending write is not rolled back by another writer's start."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest

from table import MorTable, WriteConflictError, WriterConflictError
from table.storage.commit_lock import LOCK_PATH
from tests.support.oracle import Oracle
from tests.support.orders import (
    DATA_COLUMNS,
    REGIONS,
    SCHEMA,
    by_key,
    hudi_rs_read,
    make_table,
    row,
    strip,
    write_options,
)
from tests.support.writer_processes import finished, optimistic, rows_in, wait_until_holding, writer_process

pytestmark = pytest.mark.unit


def assert_readers_show(path: Path, oracle: Oracle) -> None:
    expected = strip(oracle.rows(), DATA_COLUMNS)
    assert strip(by_key(MorTable.load(str(path)).snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def test_writers_in_two_processes_on_disjoint_partitions_commit_side_by_side(tmp_path):
    path = tmp_path / "orders"
    make_table(path)
    first = [rows_in(REGIONS[:2], 150, 1_000 + 200 * b, seed=b, prefix="a") for b in range(6)]
    second = [rows_in(REGIONS[2:], 150, 1_000 + 200 * b, seed=50 + b, prefix="b") for b in range(6)]

    writers = [writer_process(path, first, optimistic()), writer_process(path, second, optimistic())]
    results = [finished(w) for w in writers]

    assert [code for code, _ in results] == [0, 0], results
    committed = [set(result["committed"]) for _, result in results]
    timeline = MorTable.load(str(path)).timeline()
    assert {i.timestamp for i in timeline.completed("deltacommit")} == committed[0] | committed[1]
    assert not timeline.pending() and not (path / LOCK_PATH).exists()
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    for batch in first + second:
        oracle.apply_batch(batch)
    assert_readers_show(path, oracle)


def test_a_commit_over_file_groups_written_since_it_began_is_refused_and_rolled_back_then_succeeds_again(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    base = rows_in(REGIONS, 200, 1_000, seed=1, prefix="o")
    oracle.apply_batch(base)
    with table.writer(write_options(**optimistic()), description="first") as first:
        first.upsert(pa.Table.from_pylist(base, schema=SCHEMA))
    keys = [r["order_id"] for r in base]
    rng = random.Random(2)
    ours = [row(k, 2_000 + i, deleted=False, rng=rng) for i, k in enumerate(keys[:100])]
    theirs = [row(k, 3_000 + i, deleted=False, rng=rng) for i, k in enumerate(keys[50:150])]

    with (
        table.writer(write_options(**optimistic()), description="ours") as writer,
        table.writer(write_options(**optimistic()), description="theirs") as other,
    ):
        began = writer.begin_delta_commit(writer.check_schema(SCHEMA))
        routed = began.routing.route(prepared(writer, ours))
        stats = write_batch(began, routed)
        other_instant = other.upsert(pa.Table.from_pylist(theirs, schema=SCHEMA))
        with pytest.raises(WriteConflictError) as refused:
            began.complete(stats)
        assert refused.value.other == other_instant and refused.value.file_groups
        assert f"conflicts with deltacommit {other_instant}" in str(refused.value)
        timeline = table.timeline()
        assert not timeline.pending("deltacommit") and began.instant not in {i.timestamp for i in timeline.instants}
        assert timeline.completed("rollback")

        writer.upsert(pa.Table.from_pylist(ours, schema=SCHEMA))  # written again: nothing new since
    oracle.apply_batch(theirs)
    oracle.apply_batch(ours)
    assert_readers_show(path, oracle)


def prepared(writer, rows: list[dict]) -> pa.Table:
    from table.write.prepare import prepare_batch

    return prepare_batch(pa.Table.from_pylist(rows, schema=SCHEMA), writer.batch_spec, writer.key_generator)


def write_batch(commit, routed: pa.Table) -> list:
    from table.write.file_group_writer import WriteTask, write_file_groups

    return write_file_groups(commit.context, WriteTask(0), commit.routing, routed)


def test_a_writer_stopped_past_the_commit_locks_expiry_cannot_commit_over_its_successor(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    holding, resume = tmp_path / "holding", tmp_path / "resume"
    stalled_rows = rows_in(REGIONS, 100, 1_000, seed=3, prefix="s")
    wait = f"Path({str(holding)!r}).touch()\n            while not Path({str(resume)!r}).exists(): time.sleep(0.01)"
    stalled = writer_process(path, [stalled_rows], optimistic(commit_lock_ttl_seconds=1.0), before_complete=wait)
    wait_until_holding(stalled, holding)
    os.kill(stalled.pid, signal.SIGSTOP)
    try:
        time.sleep(1.5)  # past the lock's expiry
        successor_rows = rows_in(REGIONS, 100, 5_000, seed=4, prefix="n")
        with table.writer(write_options(**optimistic()), description="successor") as successor:
            successor.upsert(pa.Table.from_pylist(successor_rows, schema=SCHEMA))
        resume.touch()
    finally:
        os.kill(stalled.pid, signal.SIGCONT)

    code, result = finished(stalled)

    assert code == 3 and result["error"] == "CommitLockError", result
    assert "was taken over after it expired" in result["message"]
    timeline = table.timeline()
    assert len(timeline.completed("deltacommit")) == 1 and not timeline.pending("deltacommit")
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    oracle.apply_batch(successor_rows)
    assert_readers_show(path, oracle)


def test_a_live_writers_pending_write_survives_another_writers_start_and_a_dead_ones_is_rolled_back(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    live = table.writer(write_options(**optimistic()), description="live").open()
    pending = live.begin_delta_commit(live.check_schema(SCHEMA))
    dead = table.writer(write_options(**optimistic(heartbeat_interval_seconds=60)), description="dead").open()
    abandoned = dead.begin_delta_commit(dead.check_schema(SCHEMA))
    dead.close()
    heartbeat = path / ".hoodie" / ".heartbeat" / abandoned.instant
    old = time.time() - 600
    os.utime(heartbeat, (old, old))  # as if its process died ten minutes ago

    with table.writer(write_options(**optimistic()), description="third") as third:
        third.upsert(pa.Table.from_pylist(rows_in(REGIONS, 50, 1_000, seed=5, prefix="t"), schema=SCHEMA))

    pending_now = {i.timestamp for i in table.timeline().pending("deltacommit")}
    assert pending.instant in pending_now and abandoned.instant not in pending_now
    pending.abandon()
    live.close()


def test_writers_of_both_modes_on_one_table_never_write_over_each_other(tmp_path):
    """An optimistic writer is refused while a single writer holds the lease (it checks no commit);
    a single writer's start leaves a live optimistic writer's pending write alone."""
    table = make_table(tmp_path / "orders")
    with (
        table.writer(write_options(), description="the job"),
        pytest.raises(WriterConflictError, match="being written by a single writer, the job"),
    ):
        table.writer(write_options(**optimistic()), description="a backfill").open()

    live = table.writer(write_options(**optimistic()), description="a backfill").open()
    pending = live.begin_delta_commit(live.check_schema(SCHEMA))
    with table.writer(write_options(), description="streamer compact"):
        assert pending.instant in {i.timestamp for i in table.timeline().pending("deltacommit")}
    pending.abandon()
    live.close()


def test_a_writer_killed_while_holding_the_commit_lock_holds_up_no_one(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    holding = tmp_path / "holding"
    killed = writer_process(
        path,
        [rows_in(REGIONS, 50, 1_000, seed=6, prefix="k")],
        optimistic(),
        before_complete=f"Path({str(holding)!r}).touch()\n            time.sleep(600)",
    )
    wait_until_holding(killed, holding)
    killed.kill()
    killed.wait()

    started = time.monotonic()
    successor_rows = rows_in(REGIONS, 50, 5_000, seed=7, prefix="n")
    with table.writer(write_options(**optimistic()), description="successor") as successor:
        successor.upsert(pa.Table.from_pylist(successor_rows, schema=SCHEMA))

    assert time.monotonic() - started < 10  # not the lock's 60 s expiry
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    oracle.apply_batch(successor_rows)
    assert_readers_show(path, oracle)
