"""Tables on object storage: an `s3://` table on a real S3-compatible server process (S3Proxy,
the session's `s3_server`), reached through pyarrow's S3 file system with the credentials and
endpoint of the table's storage options or of the AWS environment variables.

One table goes through every table service on the server and every reader reads it; the
requests each micro-batch costs are counted from the server's request log and must not grow
with the table's history; and the streaming job, killed mid-batch and cut off from a frozen
server for 20 s, ends with the oracle's rows.

Several writers share an S3 table's commit lock (`table.storage.object_store_lock`): the server
creates an object once however many writers race for it (S3Proxy honours `If-None-Match: *`);
writers in two processes commit side by side, taking the lock at one PUT a commit; a holder stopped
past half the lock's expiry does not complete, and one killed holding it is taken over at once.
"""

from __future__ import annotations

import collections
import contextlib
import statistics
import threading
import time
import uuid

import hudi
import pyarrow as pa
import pytest

from streamer.checkpoint import table_checkpoint
from streamer.config.model import IndexSettings, ServicesSettings
from streamer.scheduler import BackgroundExecutor, TableServices
from table.errors import WriterConflictError
from table.mor_table import MorTable, TableSpec
from table.services.archive import read_archived_instants
from table.spark.datasource import register
from table.storage.conditional import ConditionalWrites
from table.storage.file_io import Storage
from table.storage.lease import WriterLease
from table.timeline.timeline import State
from table.write.file_group_writer import WriteTask, write_file_groups
from table.write.prepare import prepare_batch
from table.write.writer import WriteOptions
from tests.support.ingestion import (
    DATA_COLUMNS,
    ORDER_SCHEMA,
    end_offsets,
    expected_rows,
    order_config,
    produce_orders,
    run_streamer,
    settled_change_events,
    streamer_process,
    write_config,
)
from tests.support.oracle import Oracle
from tests.support.orders import DATA_COLUMNS as ORDERS_COLUMNS
from tests.support.orders import REGIONS, SCHEMA, by_key, make_table, strip, write_options
from tests.support.writer_processes import finished, optimistic, rows_in, wait_until_holding, writer_process

STORED_SCHEMA = ORDER_SCHEMA.remove(ORDER_SCHEMA.get_field_index("deleted"))
SERVICES = {
    "clustering": {"mode": "inline", "every_delta_commits": 1},
    "compaction": {"mode": "inline", "every_delta_commits": 2},
    "clean": {"mode": "inline", "retained": 2},
    "archive": {"mode": "inline", "min_instants": 4, "max_instants": 8},
}
SPLIT = {"initial_buckets": 2, "max_buckets": 4, "split_threshold_mb": 0.001, "merge_threshold_mb": 0}
MERGE = {"initial_buckets": 2, "min_buckets": 1, "split_threshold_mb": 1024, "merge_threshold_mb": 512}


def new_bucket(s3_server) -> str:
    return s3_server.create_bucket(f"tables-{uuid.uuid4().hex[:10]}")


def new_table(path: str, options: dict) -> MorTable:
    return MorTable.create(path, TableSpec("orders", STORED_SCHEMA, ("order_id",), "updated_at", ("region",)), options)


def services(table, writer, executor, index: dict, **overrides) -> TableServices:
    return TableServices(
        ServicesSettings.model_validate({**SERVICES, **overrides}),
        table,
        writer,
        executor,
        index=IndexSettings.model_validate(index),
    )


def batches(events: list[dict], size: int) -> list[pa.Table]:
    return [pa.Table.from_pylist(events[i : i + size], schema=ORDER_SCHEMA) for i in range(0, len(events), size)]


def rows_by_key(rows: list[dict]) -> dict:
    assert len(rows) == len({r["order_id"] for r in rows}), "a key read twice"
    return {r["order_id"]: {c: r[c] for c in DATA_COLUMNS} for r in rows}


def hudi_rs_rows(path: str, options: dict) -> dict:
    table = hudi.HudiTableBuilder.from_base_uri(path).with_storage_options(options).build()
    return rows_by_key([r for b in table.read() for r in b.select(DATA_COLUMNS).to_pylist()])


def our_rows(path: str, options: dict | None = None) -> dict:
    return rows_by_key(MorTable.load(path, options).snapshot(columns=DATA_COLUMNS).to_pylist())


def write_without_completing(writer, records: pa.Table) -> None:
    """A deltacommit whose files are all written, abandoned before it completes (a batch that
    failed after its tasks): its rollback must leave nothing behind."""
    prepared = prepare_batch(records, writer.batch_spec, writer.key_generator)
    commit = writer.begin_delta_commit(writer.check_schema(records.schema))
    write_file_groups(commit.context, WriteTask(0), commit.routing, commit.routing.route(prepared))
    commit.abandon()


@pytest.mark.spark
def test_a_table_on_s3_goes_through_every_service_and_every_reader_reads_the_oracles_rows(s3_server, spark):
    path = f"s3://{new_bucket(s3_server)}/warehouse/orders"
    options = s3_server.storage_options
    events = settled_change_events(1_600, seed=91)
    table = new_table(path, options)
    executor = BackgroundExecutor()
    with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted")) as writer:
        splitting = services(table, writer, executor, SPLIT)
        for batch in batches(events[:1_000], 200):
            writer.upsert(batch)
            splitting.after_commit()
        write_without_completing(writer, batches(events[1_000:1_200], 200)[0])
        merging = services(table, writer, executor, MERGE)
        for batch in batches(events[1_000:], 200):
            writer.upsert(batch)
            merging.after_commit()
        merging.finish()
    executor.shutdown()

    timeline = MorTable.load(path, options).timeline()
    done = collections.Counter(i.action for i in timeline.completed())
    archived = collections.Counter(i.action for i in read_archived_instants(MorTable.load(path, options)))
    assert timeline.pending() == []
    assert (done + archived)["replacecommit"] >= 2  # buckets split, then merged
    assert (done + archived)["commit"] >= 2 and (done + archived)["clean"] >= 1  # compactions, cleans
    assert (done + archived)["rollback"] == 1 and sum(archived.values()) > 0
    assert Storage(path, options).list_dir(".hoodie/.temp", recursive=True) == []  # no marker left
    expected = expected_rows(events)
    assert our_rows(path, options) == expected
    assert hudi_rs_rows(path, options) == expected
    register(spark)
    reader = spark.read.format("mor").option("columns", ",".join(DATA_COLUMNS))
    for name, value in options.items():
        reader = reader.option(name, value)  # the executors reach the server with them
    assert rows_by_key([r.asDict() for r in reader.load(path).collect()]) == expected


@pytest.mark.unit
def test_of_two_writers_starting_together_on_s3_exactly_one_holds_the_table(s3_server):
    path = f"s3://{new_bucket(s3_server)}/orders"
    table = new_table(path, s3_server.storage_options)
    start = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def start_writer(name: str) -> None:
        lease = WriterLease(Storage(path, s3_server.storage_options), f"writer {name}")
        start.wait()
        try:
            outcomes[name] = lease.acquire()
        except WriterConflictError as e:
            outcomes[name] = e

    threads = [threading.Thread(target=start_writer, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    held = [lease for lease in outcomes.values() if isinstance(lease, WriterLease)]
    refused = [e for e in outcomes.values() if isinstance(e, WriterConflictError)]
    assert len(held) == 1 and len(refused) == 1, outcomes
    with pytest.raises(WriterConflictError, match="being written by another writer: writer"):
        table.writer(description="a third writer").open()
    held[0].release()
    with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted")) as writer:  # free again
        writer.upsert(batches(settled_change_events(50, seed=97), 50)[0])


@pytest.mark.unit
def test_requests_per_micro_batch_on_s3_do_not_grow_with_the_tables_history(s3_server, monkeypatch, terminal_summary):
    bucket = new_bucket(s3_server)
    path = f"s3://{bucket}/orders"
    for name, value in s3_server.environment.items():  # this time from the environment, as AWS tools
        monkeypatch.setenv(name, value)
    events = settled_change_events(5_000, seed=93)
    table = new_table(path, {})
    executor = BackgroundExecutor()
    per_batch: list[collections.Counter] = []
    with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted")) as writer:
        job_services = services(
            table,
            writer,
            executor,
            {"initial_buckets": 2},
            clustering={"mode": "off"},
            compaction={"mode": "inline", "every_delta_commits": 4},
        )
        for batch in batches(events, 200):
            mark = s3_server.requests.mark()
            writer.upsert(batch)
            job_services.after_commit()
            time.sleep(0.05)  # the server logs a request after answering it
            per_batch.append(s3_server.requests.since(mark, bucket=bucket))
    executor.shutdown()

    early, late = per_batch[4:12], per_batch[-8:]
    assert len(MorTable.load(path).timeline().completed()) <= 8  # archival kept the timeline short
    assert max(c["LIST"] for c in late) <= max(c["LIST"] for c in early), [c["LIST"] for c in per_batch]
    assert statistics.mean(c["LIST"] for c in late) <= statistics.mean(c["LIST"] for c in early) + 0.5
    assert our_rows(path) == expected_rows(events)
    kinds = ("PUT", "GET", "LIST", "HEAD", "DELETE")
    partitions = len({e["region"] for e in events})
    terminal_summary.append(
        f"S3 requests per micro-batch ({len(per_batch)} batches of 200 events over {partitions} "
        "partitions; compaction every 4, clean and archival inline), early / late batches:"
    )
    terminal_summary.append(
        "  "
        + "  ".join(
            f"{k} {statistics.mean(c[k] for c in early):.1f}/{statistics.mean(c[k] for c in late):.1f}" for k in kinds
        )
    )


@pytest.mark.unit
def test_requests_per_micro_batch_on_s3_do_not_grow_with_the_partitions_it_touches(s3_server, terminal_summary):
    """Plain deltacommits touching every file group of 2 and of 40 partitions: the same LISTs,
    HEADs, GETs and DELETEs, and PUTs that are the data files plus the same few."""
    counts = {}
    for partitions in (2, 40):
        path = f"s3://{new_bucket(s3_server)}/orders"
        events = [
            dict(e, region=f"r{int(e['order_id'].split('-')[1]) % partitions:02d}")  # a key keeps its partition
            for e in settled_change_events(2_400, seed=94)
        ]
        table = new_table(path, s3_server.storage_options)
        per_batch = []
        with table.writer(WriteOptions(initial_buckets=2, delete_field="deleted")) as writer:
            for batch in batches(events, 800):
                mark = s3_server.requests.mark()
                writer.upsert(batch)
                time.sleep(0.05)  # the server logs a request after answering it
                per_batch.append(
                    (s3_server.requests.since(mark, bucket=path.split("/")[2]), len(writer.last_commit.write_stats()))
                )
        assert our_rows(path, s3_server.storage_options) == expected_rows(events)
        counts[partitions] = per_batch[1:]  # after the load, which creates the partitions
    for (few, few_files), (many, many_files) in zip(counts[2], counts[40]):
        assert many_files == 20 * few_files
        assert {k: many[k] for k in ("LIST", "HEAD", "GET", "DELETE")} == {
            k: few[k] for k in ("LIST", "HEAD", "GET", "DELETE")
        }
        assert many["PUT"] - many_files == few["PUT"] - few_files
    terminal_summary.append(
        "S3 requests per plain deltacommit, 2 and 40 partitions of 2 buckets: "
        + "; ".join(
            f"{n} partitions: "
            + " ".join(f"{k} {c[k]}" for k in ("PUT", "GET", "LIST", "HEAD", "DELETE"))
            + f" ({files} data files)"
            for n, ((c, files), *_) in counts.items()
        )
    )


@pytest.mark.e2e
def test_the_job_on_s3_killed_mid_batch_and_cut_off_from_a_frozen_server_ends_with_the_oracles_rows(
    s3_server, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(4_000, seed=95)
    offsets = produce_orders(kafka_bootstrap, topic, events[:2_000])
    path = f"s3://{new_bucket(s3_server)}/orders"
    env = s3_server.environment  # the job reaches the server as AWS tools do, from the environment
    options = s3_server.storage_options  # the test's own reads, from storage options
    config = order_config(
        tmp_path,
        "orders",
        kafka_bootstrap,
        topic,
        table={"path": path},
        source={"max_offsets_per_trigger": 500},
        services={"compaction": {"mode": "inline", "every_delta_commits": 2}},
    )
    config_file = write_config(tmp_path / "configs", config)

    # 1. SIGKILLed after the sixth log file, in its second batch: nothing of that batch is visible.
    code, out = run_streamer(
        ["run", str(config_file), "--once"], env={**env, "MOR_STREAMER_FAILPOINT": "deltacommit.log_file_written:6"}
    )
    assert code == -9, out[-3000:]
    committed = committed_offsets_on(path, topic, options)
    assert our_rows(path, options) == expected_rows(events_below(events, offsets, committed))
    assert pending_deltacommits(path, options)  # left inflight for the restart to roll back

    # 2. The restart rolls it back and goes on; the server freezes for 20 s mid-run.
    offsets += produce_orders(kafka_bootstrap, topic, events[2_000:])
    job = streamer_process(
        ["run", str(config_file), "--once"], env={**env, "MOR_STREAMER_PAUSE": "deltacommit.inflight=1"}
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(job.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not (rolled_back(path, options) and pending_deltacommits(path, options)):
            assert job.poll() is None and time.monotonic() < deadline, "".join(output)[-5000:]
            time.sleep(0.2)
        s3_server.hang()
        try:
            time.sleep(20)
        finally:
            s3_server.wake()
        job.wait(300)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        reader.join(10)
    committed = committed_offsets_on(path, topic, options)
    assert our_rows(path, options) == expected_rows(events_below(events, offsets, committed))
    assert hudi_rs_rows(path, options) == expected_rows(events_below(events, offsets, committed))

    # 3. A run that failed on the frozen server leaves its batch to the next one, which completes it.
    out = "".join(output)
    if job.returncode != 0:
        code, out = run_streamer(["run", str(config_file), "--once"], env=env)
        assert code == 0, out[-3000:]
    expected = expected_rows(events)
    assert our_rows(path, options) == expected
    assert hudi_rs_rows(path, options) == expected
    assert committed_offsets_on(path, topic, options) == end_offsets(kafka_bootstrap, topic)
    assert pending_deltacommits(path, options) == []
    _, status = run_streamer(["status", str(config_file)], env=env)
    for text in (out, status, "".join(output)):  # the secret key is never printed
        assert s3_server.secret_access_key not in text


def committed_offsets_on(path: str, topic: str, options: dict) -> dict[int, int]:
    checkpoint = table_checkpoint(MorTable.load(path, options)) if MorTable.exists(path, options) else None
    return dict(checkpoint.offsets[topic]) if checkpoint else {}


def events_below(events: list[dict], offsets: list[tuple[int, int]], committed: dict[int, int]) -> list[dict]:
    return [e for e, (p, o) in zip(events, offsets) if o < committed.get(p, 0)]


def pending_deltacommits(path: str, options: dict) -> list:
    if not MorTable.exists(path, options):
        return []
    return [i for i in MorTable.load(path, options).timeline().pending("deltacommit") if i.state is State.INFLIGHT]


def rolled_back(path: str, options: dict) -> bool:
    return MorTable.exists(path, options) and bool(MorTable.load(path, options).timeline().completed("rollback"))


# -- several writers: the commit lock on S3 --------------------------------------------------------


def test_s3proxy_creates_an_object_once_however_many_writers_race_to_create_it(s3_server):
    writes = ConditionalWrites(Storage(f"s3://{new_bucket(s3_server)}/orders", s3_server.storage_options))
    start = threading.Barrier(12)
    created = []

    def create(i: int) -> None:
        start.wait()
        with contextlib.suppress(FileExistsError):
            writes.create(".hoodie/lock", f"writer {i}".encode())
            created.append(i)

    racers = [threading.Thread(target=create, args=(i,)) for i in range(12)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()

    assert len(created) == 1
    assert writes.read(".hoodie/lock")[0] == f"writer {created[0]}".encode()


def test_writers_in_two_processes_commit_to_an_s3_table_side_by_side_taking_the_lock_in_one_put(s3_server, tmp_path):
    bucket = new_bucket(s3_server)
    path = f"s3://{bucket}/orders"
    table = make_table(path, s3_server.storage_options)
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    batches = {
        half: [rows_in(regions, 60, 1_000 * (n + 1), seed=n, prefix=f"{half}{n}") for n in range(3)]
        for half, regions in (("a", REGIONS[:2]), ("b", REGIONS[2:]))
    }
    writers = [writer_process(path, b, optimistic(), env=s3_server.environment) for b in batches.values()]
    for writer in writers:
        code, result = finished(writer)
        assert code == 0, result
    for b in batches.values():
        for batch in b:
            oracle.apply_batch(batch)

    mark = s3_server.requests.mark()
    alone = [rows_in(REGIONS, 60, 9_000 + n, seed=10 + n, prefix=f"c{n}") for n in range(3)]
    with table.writer(write_options(**optimistic()), description="alone") as writer:
        for batch in alone:
            writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))
            oracle.apply_batch(batch)
    lock_requests = s3_server.requests.since(mark, bucket, key="orders/.hoodie/lock")

    # taken at first try at every commit, so released after each (one bulk delete, keyless in the log)
    assert lock_requests == {"PUT": 3}
    assert len(table.timeline().completed("deltacommit")) == 9
    assert strip(by_key(MorTable.load(path, s3_server.storage_options).snapshot()), ORDERS_COLUMNS) == strip(
        oracle.rows(), ORDERS_COLUMNS
    )


def test_an_s3_writer_stopped_past_half_the_locks_expiry_does_not_complete_and_one_killed_holding_it_holds_up_no_one(
    s3_server, tmp_path
):
    path = f"s3://{new_bucket(s3_server)}/orders"
    table = make_table(path, s3_server.storage_options)
    holding = tmp_path / "holding"
    hold = f"Path({str(holding)!r}).touch()\n            time.sleep(600)"
    stall = f"Path({str(holding)!r}).touch()\n            time.sleep(1.5)"
    stalled_rows = rows_in(REGIONS, 50, 1_000, seed=3, prefix="s")
    stalled = writer_process(
        path, [stalled_rows], optimistic(commit_lock_ttl_seconds=2.0), before_complete=stall, env=s3_server.environment
    )
    code, result = finished(stalled)
    assert code == 3 and result["error"] == "CommitLockError" and "past half its expiry" in result["message"], result
    holding.unlink()

    killed = writer_process(
        path, [rows_in(REGIONS, 50, 2_000, seed=4, prefix="k")], optimistic(), hold, s3_server.environment
    )
    wait_until_holding(killed, holding)
    killed.kill()
    killed.wait()
    started = time.monotonic()
    successor_rows = rows_in(REGIONS, 50, 5_000, seed=5, prefix="n")
    with table.writer(write_options(**optimistic()), description="successor") as successor:
        successor.upsert(pa.Table.from_pylist(successor_rows, schema=SCHEMA))

    assert time.monotonic() - started < 10  # not after the lock's 60 s expiry
    oracle = Oracle("order_id", "updated_at", "is_deleted")
    oracle.apply_batch(successor_rows)
    snapshot = MorTable.load(path, s3_server.storage_options).snapshot()
    assert strip(by_key(snapshot), ORDERS_COLUMNS) == strip(oracle.rows(), ORDERS_COLUMNS)
    timeline = table.timeline()
    assert len(timeline.completed("deltacommit")) == 1 and len(timeline.completed("rollback")) == 1  # the stalled
