"""A commit's routing as its tasks get it: pickled compactly, it routes every record where the
driver's routing does, dual writes of a pending resize and partitions new to the table included."""

from __future__ import annotations

import pickle
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from table.schema import PARTITION_PATH
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering
from table.write.prepare import prepare_batch
from table.write.routing import FILE_ID
from tests.support.orders import SCHEMA, make_table, row, write_options

pytestmark = pytest.mark.unit


def test_a_routing_sent_to_a_task_routes_as_the_drivers_with_dual_writes_and_new_partitions(tmp_path):
    rng = random.Random(3)
    table = make_table(tmp_path / "orders")
    with table.writer(write_options(initial_buckets=2)) as writer:
        writer.upsert(pa.Table.from_pylist([row(f"o-{i:05d}", 1, False, rng) for i in range(600)], schema=SCHEMA))
        resize = schedule_clustering(writer, ClusteringPolicy(split_threshold_bytes=1, merge_threshold_bytes=0))
        assert resize is not None

        rows = [row(f"o-{i:05d}", 2, False, rng) for i in range(0, 900, 3)]
        rows += [{**r, "region": f"new-{i % 3}"} for i, r in enumerate(rows[:60])]
        records = pa.Table.from_pylist(rows, schema=SCHEMA)
        commit = writer.begin_delta_commit(writer.check_schema(records.schema))
        prepared = prepare_batch(records, writer.batch_spec, writer.key_generator)
        sent = pickle.loads(pickle.dumps(commit.routing))

        on_driver, on_task = commit.routing.route(prepared), sent.route(prepared)
        assert on_task.equals(on_driver)
        assert on_task.num_rows > prepared.num_rows, "a pending split writes its buckets' records twice"
        targets = {
            f: sent.target(f, p) for f, p in zip(on_task[FILE_ID].to_pylist(), on_task[PARTITION_PATH].to_pylist())
        }
        assert targets == {
            f: commit.routing.target(f, p)
            for f, p in zip(on_driver[FILE_ID].to_pylist(), on_driver[PARTITION_PATH].to_pylist())
        }
        new = pc.match_substring(on_task[PARTITION_PATH], "new-")
        assert pc.sum(new).as_py() == 60
        assert {t.base_instant for t in targets.values() if "new-" in t.partition_path} == {None}, "new groups"
        commit.abandon()
