"""The streaming job beside another writer of its table (`table.concurrency:
optimistic_concurrency_control`): a micro-batch whose commit another writer's commit overtook in
the same file groups is rolled back, read from its offsets and written again, and says so; the
table ends with both writers' rows and the topic's offsets, nothing lost or twice. Two jobs feed
one table from two topics, each resuming from its own checkpoint. Three writers (the stream, a
backfill and a delete) killed at random, once with the commit lock held, leave the table every
reader, Apache Hudi 0.15 among them, sees as the oracle says."""

from __future__ import annotations

import copy
import json
import shutil

import pyarrow as pa
import pytest

from streamer.checkpoint import checkpoint_key
from streamer.sink import BATCH_STATS_KEY
from table import CommitMetadata, Concurrency, MorTable, WriteOptions
from table.failpoints import PAUSE_ENV_VAR
from tests.support.ingestion import (
    DATA_COLUMNS,
    ORDER_SCHEMA,
    JobOutput,
    assert_data_files_belong_to_instants,
    committed_offsets,
    end_offsets,
    expected_rows,
    hudi_rs_rows,
    order_config,
    our_rows,
    produce_orders,
    settled_change_events,
    streamer_process,
    write_config,
)
from tests.support.three_writers import LOCK_HELD, Kill, ThreeWriters

pytestmark = pytest.mark.e2e

BATCH = 150
#: How long each of the job's commits waits with its files written, before its commit lock: the
#: other writer commits in that window.
HELD_SECONDS = 4


def test_a_batch_overtaken_by_another_writers_commit_is_written_again_with_nothing_lost(
    kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=1, prefix="orders")
    events = settled_change_events(2 * BATCH, seed=71)
    produce_orders(kafka_bootstrap, topic, events)
    mapping = order_config(
        tmp_path,
        "orders",
        kafka_bootstrap,
        topic,
        table={"concurrency": "optimistic_concurrency_control"},
        source={"max_offsets_per_trigger": BATCH},
    )
    path = mapping["table"]["path"]
    job = JobOutput(
        streamer_process(
            ["run", str(write_config(tmp_path / "configs", mapping)), "--once"],
            env={PAUSE_ENV_VAR: f"deltacommit.files_written={HELD_SECONDS}"},
        )
    )

    def second_batch_held() -> bool:
        if not MorTable.exists(path):
            return False
        timeline = MorTable.load(path).timeline()
        return bool(timeline.completed("deltacommit")) and bool(timeline.pending("deltacommit"))

    job.wait_for(second_batch_held, "the second batch's commit")
    overtaking = [dict(e, updated_at=e["updated_at"] + 10_000_000, deleted=False) for e in events[:40]]
    with MorTable.load(path).writer(
        WriteOptions(initial_buckets=2, delete_field="deleted", concurrency=Concurrency.OPTIMISTIC), "a backfill"
    ) as backfill:
        backfill.upsert(pa.Table.from_pylist(overtaking, schema=ORDER_SCHEMA))

    assert job.finish() == 0, job.text[-5000:]
    assert "writing it again (1 of 3)" in job.text and "conflicts with deltacommit" in job.text, job.text[-5000:]
    assert our_rows(path) == expected_rows(events + overtaking)
    assert committed_offsets(path, topic) == end_offsets(kafka_bootstrap, topic)
    assert not MorTable.load(path).timeline().pending("deltacommit")


def test_two_jobs_feed_one_table_from_two_topics_and_each_resumes_from_its_own_checkpoint(
    kafka_bootstrap, kafka_topic, tmp_path
):
    topics = {name: kafka_topic(partitions=1, prefix=f"orders-{name}") for name in ("eu", "us")}
    events = {
        name: [dict(e, order_id=f"{name}-{e['order_id']}") for e in settled_change_events(120, seed=seed)]
        for name, seed in (("eu", 72), ("us", 73))
    }
    base = order_config(
        tmp_path, "orders", kafka_bootstrap, "", table={"concurrency": "optimistic_concurrency_control"}
    )
    configs = {}
    for name, topic in topics.items():
        produce_orders(kafka_bootstrap, topic, events[name][:80])
        mapping = copy.deepcopy(base)
        mapping["source"].update(topics=topic, checkpoint_id=name)
        mapping["stream"]["checkpoint_location"] = str(tmp_path / "checkpoints" / name)
        configs[name] = write_config(tmp_path / "configs" / name, mapping)
    path = base["table"]["path"]

    jobs = [JobOutput(streamer_process(["run", str(configs[name]), "--once"])) for name in topics]
    for job in jobs:
        assert job.finish() == 0, job.text[-5000:]
    assert our_rows(path) == expected_rows(events["eu"][:80] + events["us"][:80])

    # A commit of another writer is the latest (no stream's checkpoint in it); the eu job, its
    # Spark checkpoint gone, resumes from its own last commit, before it.
    fix = [dict(events["us"][0], order_id="fix-1", updated_at=10**9, deleted=False)]
    with MorTable.load(path).writer(
        WriteOptions(initial_buckets=2, delete_field="deleted", concurrency=Concurrency.OPTIMISTIC), "a fix"
    ) as writer:
        writer.upsert(pa.Table.from_pylist(fix, schema=ORDER_SCHEMA))
    produce_orders(kafka_bootstrap, topics["eu"], events["eu"][80:])
    shutil.rmtree(tmp_path / "checkpoints" / "eu")
    job = JobOutput(streamer_process(["run", str(configs["eu"]), "--once"]))
    assert job.finish() == 0, job.text[-5000:]

    assert our_rows(path) == expected_rows(events["eu"] + events["us"][:80] + fix)
    for name, topic in topics.items():
        assert committed_offsets(path, topic, checkpoint_id=name) == end_offsets(kafka_bootstrap, topic)
    assert records_committed(path, "eu") == len(events["eu"]), "the eu job read a record twice"
    assert records_committed(path, "us") == 80


def records_committed(path: str, checkpoint_id: str) -> int:
    """The records of the stream's batches, as its commits count them."""
    timeline = MorTable.load(path).timeline()
    extras = [CommitMetadata.from_json(timeline.read_content(i)).extra_metadata for i in timeline.completed_writes()]
    return sum(json.loads(e[BATCH_STATS_KEY])["records"] for e in extras if checkpoint_key(checkpoint_id) in e)


def test_three_writers_killed_at_random_and_once_holding_the_commit_lock_lose_and_duplicate_nothing(
    kafka_bootstrap, kafka_topic, tmp_path, hudi_judge
):
    topic = kafka_topic(partitions=2, prefix="orders")
    writers = ThreeWriters(tmp_path, kafka_bootstrap, topic, seed=74, rounds=2)
    plans = [
        {"stream": writers.random_kill(), "backfill": Kill(failpoint=LOCK_HELD)},
        {"stream": writers.random_kill(), "backfill": writers.random_kill(), "delete": writers.random_kill()},
    ]
    killed = 0
    for number, kills in enumerate(plans, start=1):
        runs = writers.round(number, kills)
        killed += sum(r.killed for r in runs.values())
        expected = writers.expected(number)
        assert our_rows(writers.path) == expected, f"round {number}: our reader"
        assert hudi_rs_rows(writers.path) == expected, f"round {number}: hudi-rs"
        assert committed_offsets(writers.path, topic) == end_offsets(kafka_bootstrap, topic)
        assert_data_files_belong_to_instants(writers.path)
        if number == 1:
            assert runs["backfill"].killed == 1 and f"failpoint {LOCK_HELD}:" in runs["backfill"].outputs[0]
    hudi_rows = hudi_judge.snapshot(writers.path).to_pylist()
    assert len(hudi_rows) == len(expected), "Apache Hudi reads a key twice, or misses one"
    assert {r["order_id"]: {c: r[c] for c in DATA_COLUMNS} for r in hudi_rows} == expected, "Apache Hudi 0.15"
    assert killed >= 2, "no kill but the failure point's landed"
