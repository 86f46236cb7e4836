"""Table services inside the streaming job: async compaction overlapping micro-batches, inline
services, and the offline commands. A crash at each step of a service is the crash matrix's
(test_crash_matrix.py)."""

from __future__ import annotations

import os
import threading
import time

import hudi
import pytest

from streamer import app
from streamer.checkpoint import table_checkpoint
from streamer.config.loading import config_from_mapping
from streamer.sandbox.change_events import change_events
from table.mor_table import MorTable
from table.plans.pending import pending_compactions
from table.timeline.timeline import Timeline
from tests.support.ingestion import (
    DATA_COLUMNS,
    assert_table_matches,
    expected_rows,
    order_config,
    produce_orders,
    run_streamer,
    write_config,
)

pytestmark = pytest.mark.e2e


def monotonic_events(count: int, seed: int) -> list[dict]:
    """The demo's change stream without late events: after a compaction Hudi no longer knows a
    deleted key, so an older update arriving later would bring it back (as in Hudi itself)."""
    events = change_events(count, seed)
    for clock, e in enumerate(events, start=1):
        e["updated_at"] = clock
    return events


def committed_events(table_path: str, events: list[dict], offsets_of: dict) -> tuple[str, list[dict]]:
    """The latest completed deltacommit and the events it covers, by the offsets it recorded."""
    table = MorTable.load(table_path)
    timeline = table.timeline()
    checkpoint = table_checkpoint(table, timeline)
    instant = timeline.completed("deltacommit")[-1].timestamp
    ((_topic, parts),) = checkpoint.offsets.items()
    ends = {int(p): o for p, o in parts.items()}
    return instant, [e for e, (p, o) in zip(events, offsets_of) if o < ends.get(p, 0)]


def test_async_compaction_overlaps_micro_batches_and_every_state_reads_as_the_oracle(
    spark, kafka_bootstrap, kafka_topic, tmp_path, monkeypatch
):
    monkeypatch.setenv("MOR_STREAMER_PAUSE", "compaction.files_written=3")
    topic = kafka_topic(partitions=2, prefix="orders")
    events = monotonic_events(15_000, seed=5)
    offsets = produce_orders(kafka_bootstrap, topic, events[:9_000])
    config = config_from_mapping(
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 600},
            stream={"trigger_interval": "200 milliseconds"},
            services={
                "compaction": {"mode": "async", "every_delta_commits": 3},
                "clean": {"mode": "inline", "retained": 2},
                "archive": {"mode": "off"},
            },
        )
    )
    path = config.table.path
    result: list = []
    runner = threading.Thread(target=lambda: result.append(app.run([config], spark)), daemon=True)
    runner.start()

    # A poll can see several states at once (a new plan pends while the last one's clean has run);
    # hudi-rs 0.5 reads a pending plan's new slices only once it completes, so it judges the
    # states it sees with no plan pending.
    states = {"before any plan", "pending plan", "after compaction", "after cleaning"}
    judged_by_us, judged_by_hudi_rs = set(), set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and runner.is_alive():
        if not MorTable.exists(path) or not MorTable.load(path).timeline().completed("deltacommit"):
            time.sleep(0.2)
            continue
        table = MorTable.load(path)
        held = _states_held(table)
        instant, covered = committed_events(path, events[: len(offsets)], offsets)
        if len(covered) == len(offsets) < len(events) and judged_by_us | held != states:
            # The stream drained before every state came (a clean comes with a deltacommit after
            # a compaction): more changes come.
            offsets += produce_orders(kafka_bootstrap, topic, events[len(offsets) : len(offsets) + 1_500])
        expected = None
        if held - judged_by_us:
            expected = expected_rows(covered)
            assert our_rows_as_of(path, instant) == expected, held
            judged_by_us |= held
        if "pending plan" not in held and held - judged_by_hudi_rs:
            expected = expected or expected_rows(covered)
            assert hudi_rs_rows_as_of(path, instant) == expected, held
            judged_by_hudi_rs |= held
        if len(covered) == len(offsets) and not pending_compactions(table) and judged_by_us == states:
            break
        time.sleep(0.2)
    for query in spark.streams.active:
        query.stop()
    runner.join(timeout=120)

    assert judged_by_us == states
    assert judged_by_hudi_rs == states - {"pending plan"}
    assert_table_matches(path, events[: len(offsets)])
    timeline = Timeline.load(MorTable.load(path).storage)
    assert _a_deltacommit_completed_while_a_compaction_ran(path, timeline)


def _states_held(table: MorTable) -> set[str]:
    timeline = table.timeline()
    held = set()
    if pending_compactions(table):
        held.add("pending plan")
    if timeline.completed("commit"):
        held.add("after compaction")
    if timeline.completed("clean"):
        held.add("after cleaning")
    return held or {"before any plan"}


def our_rows_as_of(path: str, instant: str) -> dict:
    rows = MorTable.load(path).snapshot(columns=DATA_COLUMNS, as_of=instant).to_pylist()
    return {r["order_id"]: r for r in rows}


def hudi_rs_rows_as_of(path: str, instant: str) -> dict:
    options = hudi.HudiReadOptions().with_as_of_timestamp(instant)
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(options)
    return {r["order_id"]: r for b in batches for r in b.select(DATA_COLUMNS).to_pylist()}


def _a_deltacommit_completed_while_a_compaction_ran(path: str, timeline: Timeline) -> bool:
    """A deltacommit newer than a compaction plan whose completed file predates the plan's."""
    hoodie = os.path.join(path, ".hoodie")
    for plan in timeline.completed("commit"):
        done = os.path.getmtime(os.path.join(hoodie, f"{plan.timestamp}.commit"))
        for d in timeline.completed("deltacommit"):
            if (
                d.timestamp > plan.timestamp
                and os.path.getmtime(os.path.join(hoodie, f"{d.timestamp}.deltacommit")) < done
            ):
                return True
    return False


def test_offline_commands_compact_clean_and_archive_a_table(kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, prefix="orders")
    events = monotonic_events(4_000, seed=13)
    produce_orders(kafka_bootstrap, topic, events)
    path = write_config(
        tmp_path / "configs",
        order_config(
            tmp_path,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 300},
            services={"compaction": {"mode": "off"}, "clean": {"mode": "off"}, "archive": {"mode": "off"}},
        ),
    )
    table_path = str(tmp_path / "tables" / "orders")
    code, out = run_streamer(["run", str(path), "--once"])
    assert code == 0, out
    assert MorTable.load(table_path).timeline().completed("commit") == []

    code, out = run_streamer(["compact", table_path, "--schedule"])
    assert code == 0, out
    code, out = run_streamer(["compact", table_path])  # nothing pending is nothing to do
    assert code == 0 and "no pending plan" in out, out
    code, out = run_streamer(["clean", table_path, "--retained", "1"])
    assert code == 0, out
    code, out = run_streamer(["archive", table_path, "--min-instants", "3", "--max-instants", "5"])
    assert code == 0, out

    timeline = MorTable.load(table_path).timeline()
    assert timeline.completed("commit") and timeline.completed("clean")
    assert len(timeline.completed()) <= 5
    assert_table_matches(table_path, events)
