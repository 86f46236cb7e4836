"""Broker faults: a broker that goes away and comes back under a running job, one that never comes
back, and a topic whose offsets are gone (deleted and recreated) under a table that holds them.

The outage scenarios run their own tansu behind a TCP proxy (`kafka_broker.proxied_broker`):
tansu keeps topics in memory only, so a restarted one would have lost them; closing the proxy
takes the broker off the network without losing anything, and SIGSTOP hangs it.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest

import kafka_broker
from ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    run_streamer,
    streamer_process,
    write_config,
)
from streamer import app
from streamer.config import JobConfig
from streamer.demo import change_events
from streamer.sink import DATA_LOSS_KEY
from table.mor_table import MorTable

pytestmark = pytest.mark.e2e


def settled_change_events(count: int, seed: int) -> list[dict]:
    """`change_events` without the updates that come after their order's delete with an older
    ordering value. Whether such an update shows depends on where batches fall (a delete of a
    key the table does not hold yet leaves nothing behind, as in Hudi), and a continuous job's
    batches fall where timing puts them."""
    deleted_at: dict[str, int] = {}
    events = []
    for event in change_events(count, seed=seed):
        deleted = deleted_at.get(event["order_id"])
        if deleted is not None and event["updated_at"] < deleted:
            continue
        if event["deleted"]:
            deleted_at[event["order_id"]] = max(deleted or 0, event["updated_at"])
        events.append(event)
    return events


class JobOutput:
    """The lines a job process prints, collected as they come (Spark fills a pipe quickly)."""

    def __init__(self, proc):
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self._reader.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the job exited while waiting for {what}:\n{self.text[-5000:]}"
            assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{self.text[-5000:]}"
            time.sleep(0.5)

    def finish(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code


def _has_read(table_path: str, topic: str, records: int) -> bool:
    return (MorTable.exists(table_path) and MorTable.load(table_path).checkpoint() is not None
            and sum(committed_offsets(table_path, topic).values()) >= records)


def test_a_continuous_job_rides_out_an_unreachable_and_a_hung_broker_without_loss_duplicates_or_restart(tmp_path):
    events = settled_change_events(6_000, seed=71)
    quarter = len(events) // 4
    before, refused, after, hung = (events[:quarter], events[quarter:2 * quarter],
                                    events[2 * quarter:3 * quarter], events[3 * quarter:])
    with kafka_broker.proxied_broker(str(tmp_path / "tansu.log")) as broker:
        topic = kafka_broker.create_topic(broker.bootstrap, "orders", partitions=2)
        produce_orders(broker.bootstrap, topic, before)
        path = write_config(tmp_path / "configs", order_config(
            tmp_path, "orders", broker.bootstrap, topic,
            source={"max_offsets_per_trigger": 1_000, "options": {"fetchOffset.timeoutMs": 5_000}},
            stream={"trigger_interval": "2 seconds"}))
        table_path = str(tmp_path / "tables" / "orders")
        job = JobOutput(streamer_process(["run", str(path)]))
        try:
            job.wait_for(lambda: _has_read(table_path, topic, len(before)), "first records in the table")

            broker.proxy.cut()  # connections refused for 25 s, several triggers
            producer = threading.Thread(target=produce_orders, args=(broker.bootstrap, topic, refused))
            producer.start()  # its records wait in the producer until the broker is back
            time.sleep(25)
            broker.proxy.restore()
            producer.join()
            produce_orders(broker.bootstrap, topic, after)
            job.wait_for(lambda: _has_read(table_path, topic, len(before) + len(refused) + len(after)),
                         "the records of and after the outage")

            broker.hang()  # connections open, nothing answered, for 20 s
            producer = threading.Thread(target=produce_orders, args=(broker.bootstrap, topic, hung))
            producer.start()
            time.sleep(20)
            broker.wake()
            producer.join()
            job.wait_for(lambda: _has_read(table_path, topic, len(events)), "the records of the hang")

            assert job.proc.poll() is None
            job.proc.send_signal(signal.SIGTERM)
            assert job.finish() == 0, job.text[-5000:]
        finally:
            if job.proc.poll() is None:
                job.proc.kill()
                job.finish()

        out = job.text
        assert out.count("orders: streaming orders ->") == 1  # one query from start to end
        assert re.search(rf"Kafka .+ to {re.escape(broker.bootstrap)} failed \(attempt 1, .+\); retrying in .+: \S", out)
        batch_records = [int(n.replace(",", "")) for n in re.findall(r"orders batch \d+: ([\d,]+) records", out)]
        assert sum(batch_records) == len(events)  # every record read once
        assert_table_matches(table_path, events)
        assert committed_offsets(table_path, topic) == end_offsets(broker.bootstrap, topic)


def test_brokers_that_stay_away_end_the_query_with_an_error_naming_them(spark, tmp_path):
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"  # nothing listens there
    config = JobConfig.from_mapping(order_config(
        tmp_path, "orders", bootstrap, "orders",
        source={"max_broker_outage_seconds": 4, "options": {"fetchOffset.timeoutMs": 1_000}}))

    started = time.monotonic()
    (outcome,) = app.run([config], spark, once=True).tables

    assert time.monotonic() - started < 90
    assert outcome.error.startswith(f"KafkaSourceTimeoutError: Kafka brokers {bootstrap} did not answer")
    assert "maxBrokerOutageMs=4000" in outcome.error and "source.max_broker_outage_seconds" in outcome.error
    assert MorTable.load(config.table.path).timeline().completed_writes() == []


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after its deletion"
        time.sleep(0.2)
    kafka_broker.create_topic(bootstrap, topic, partitions=partitions)


def test_a_recreated_topic_stops_the_job_naming_the_offsets_unless_data_loss_is_tolerated(
        spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = settled_change_events(3_000, seed=73)
    old, new = events[:2_000], events[2_000:]
    produce_orders(kafka_bootstrap, topic, old)
    mapping = order_config(tmp_path, "orders", kafka_bootstrap, topic)
    path = write_config(tmp_path / "configs", mapping)
    table_path = mapping["table"]["path"]
    assert app.run([JobConfig.from_mapping(mapping)], spark, once=True).tables[0].error is None
    wanted = committed_offsets(table_path, topic)

    _recreate(kafka_bootstrap, topic, partitions=2)
    produce_orders(kafka_bootstrap, topic, new)
    held = end_offsets(kafka_bootstrap, topic)
    assert all(held[p] < wanted[p] for p in held)  # the new topic's offsets start again at 0
    code, out = run_streamer(["run", str(path), "--once"])

    assert code == 1, out
    (summary,) = [line for line in out.splitlines() if line.startswith("orders: 0 batches")]
    assert "FAILED: KafkaDataLossError: " in summary
    for p in (0, 1):
        assert (f"topic '{topic}' partition {p}: the offset to read next is {wanted[p]} but the broker holds "
                f"offsets 0 to {held[p] - 1}") in summary
    assert "source.fail_on_data_loss" in summary
    assert committed_offsets(table_path, topic) == wanted
    assert_table_matches(table_path, old)

    mapping["source"]["fail_on_data_loss"] = False
    (outcome,) = app.run([JobConfig.from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(new)
    assert_table_matches(table_path, old + new)
    assert committed_offsets(table_path, topic) == held
    jumped = MorTable.load(table_path).last_commit_metadata().extra_metadata[DATA_LOSS_KEY]
    assert json.loads(jumped) == [{"topic": topic, "partition": p, "from": wanted[p], "to": 0} for p in (0, 1)]
