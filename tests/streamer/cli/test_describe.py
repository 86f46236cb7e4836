"""`streamer table ...` and `streamer query` on a table a real stream wrote: what they print for a
person, and JSON whose counts agree with the library's own view of the table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid

import matplotlib.image
import pytest

from streamer.sandbox.change_events import change_events
from table.index import consistent_hashing as ring
from table.mor_table import MorTable
from table.services.archive import ArchivePolicy, archive, read_archived_instants
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering
from table.timeline.instant_avro import serialize_plan
from table.timeline.timeline import Instant
from table.write.writer import WriteOptions
from tests.support import kafka_broker
from tests.support.ingestion import REPO, order_config, produce_orders, run_streamer, write_config

pytestmark = pytest.mark.e2e

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def table_path(kafka_bootstrap, tmp_path_factory) -> str:
    """An orders table from 3,000 change events in micro-batches of 500, compacted inline every
    two deltacommits: a timeline of deltacommits and commits."""
    tmp = tmp_path_factory.mktemp("inspect")
    topic = kafka_broker.create_topic(kafka_bootstrap, f"inspect-orders-{uuid.uuid4().hex[:8]}", partitions=2)
    produce_orders(kafka_bootstrap, topic, change_events(3_000, seed=11))
    config = write_config(
        tmp / "configs",
        order_config(
            tmp,
            "orders",
            kafka_bootstrap,
            topic,
            source={"max_offsets_per_trigger": 500},
            services={"compaction": {"mode": "inline", "every_delta_commits": 2}},
        ),
    )
    code, out = run_streamer(["run", str(config), "--once"])
    assert code == 0, out
    return str(tmp / "tables" / "orders")


def streamer_json(*args: str) -> dict:
    """The JSON document a command prints, read from stdout alone (Spark logs on stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "streamer.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def streamer_text(*args: str) -> str:
    code, out = run_streamer(list(args))
    assert code == 0, out
    return out


def copy_of(table_path: str, tmp_path) -> MorTable:
    path = tmp_path / "copy"
    shutil.copytree(table_path, path)
    return MorTable.load(str(path))


def test_info_shows_properties_and_schema(table_path):
    out = streamer_text("table", "info", table_path)
    for fact in ("orders", "MERGE_ON_READ", "order_id", "region", "updated_at", "SimpleKeyGenerator"):
        assert fact in out
    assert "amount" in out and "double" in out

    info = streamer_json("table", "info", table_path)
    assert info["name"] == "orders" and info["version"] == 6
    assert info["record_key_fields"] == ["order_id"] and info["partition_fields"] == ["region"]
    assert info["ordering_field"] == "updated_at" and info["hive_style_partitioning"] is True
    schema = MorTable.load(table_path).schema()
    assert [(c["name"], c["type"]) for c in info["columns"]] == [(f.name, str(f.type)) for f in schema]


def test_timeline_lists_every_instant_with_what_each_write_wrote(table_path):
    timeline = MorTable.load(table_path).timeline()
    doc = streamer_json("table", "timeline", table_path)
    assert [(e["instant"], e["action"], e["state"]) for e in doc["instants"]] == [
        (i.timestamp, i.action, i.state) for i in timeline.instants
    ]
    assert doc["pending_plans"] == []
    actions = {e["action"] for e in doc["instants"]}
    assert {"deltacommit", "commit"} <= actions
    upserts = [e for e in doc["instants"] if e["operation"] == "UPSERT"]
    assert all(e["log_files_added"] + e["base_files_added"] > 0 for e in upserts)
    compactions = [e for e in doc["instants"] if e["operation"] == "COMPACT"]
    assert compactions and all(e["base_files_added"] > 0 and e["log_files_added"] == 0 for e in compactions)
    assert sum(e["records_written"] for e in upserts) > 0

    out = streamer_text("table", "timeline", table_path, "--limit", "3")
    assert "pending plans\nnone" in out
    assert all(i.timestamp in out for i in timeline.instants[-3:])
    assert timeline.instants[0].timestamp not in out
    assert doc["instants"][-1]["time"] in out


def test_timeline_with_archived_includes_the_archived_instants(table_path, tmp_path):
    table = copy_of(table_path, tmp_path)
    with table.writer(WriteOptions()):
        assert archive(table, ArchivePolicy(min_instants=3, max_instants=5)).archived
    archived = read_archived_instants(table)

    doc = streamer_json("table", "timeline", str(tmp_path / "copy"), "--archived")
    assert [e["instant"] for e in doc["instants"] if e["archived"]] == [i.timestamp for i in archived]
    assert len(doc["instants"]) == len(archived) + len(table.timeline().instants)
    without = streamer_json("table", "timeline", str(tmp_path / "copy"))
    assert not any(e["archived"] for e in without["instants"])


def test_files_lists_each_file_group_with_its_latest_slice(table_path):
    view = MorTable.load(table_path).file_system_view()
    doc = streamer_json("table", "files", table_path)
    groups = {(g.partition_path, g.file_id): g for g in view.all_file_groups()}
    assert {(g["partition"], g["file_id"]) for g in doc["file_groups"]} == set(groups)
    for g in doc["file_groups"]:
        group = groups[(g["partition"], g["file_id"])]
        latest = group.latest_slice()
        assert (g["base_instant"], g["total_bytes"], g["log_files"]) == (
            latest.base_instant,
            latest.total_size,
            len(latest.log_files),
        )
        assert g["base_file_bytes"] + g["log_bytes"] == g["total_bytes"] and g["slices"] == len(group.slices)

    partition = view.partition_paths()[0]
    one = streamer_json("table", "files", table_path, "--partition", partition)
    assert {g["partition"] for g in one["file_groups"]} == {partition}
    out = streamer_text("table", "files", table_path)
    assert all(p in out for p in view.partition_paths()) and "KiB" in out


def test_buckets_cover_each_partitions_hash_ring(table_path):
    table = MorTable.load(table_path)
    doc = streamer_json("table", "buckets", table_path)
    assert [p["partition"] for p in doc["partitions"]] == table.file_system_view().partition_paths()
    for p in doc["partitions"]:
        metadata = ring.load_latest(table.storage, p["partition"])
        assert [b["file_id"] for b in p["buckets"]] == [n.file_id for n in ring.ring_nodes(metadata)]
        ends = [b["hash_end"] for b in p["buckets"]]
        previous_ends = ends[-1:] + ends[:-1]
        assert [b["hash_start"] for b in p["buckets"]] == [(e + 1) & ring.HASH_VALUE_MASK for e in previous_ends]
        assert all(b["bytes"] > 0 for b in p["buckets"]) and p["pending_resizes"] == []

    out = streamer_text("table", "buckets", table_path)
    assert f"partition {doc['partitions'][0]['partition']}: 2 buckets" in out
    assert "pending splits/merges\n  none" in out


def test_a_planned_split_shows_as_pending_in_buckets_and_timeline(table_path, tmp_path):
    table = copy_of(table_path, tmp_path)
    partition = table.file_system_view().partition_paths()[0]
    metadata = ring.load_latest(table.storage, partition)
    node = metadata.nodes[0]
    children = ring.split_node(metadata, node)
    timeline = table.timeline()
    instant = timeline.new_instant_time()
    timeline.create_requested(
        Instant(instant, "replacecommit", "requested"),
        serialize_plan("HoodieRequestedReplaceMetadata", split_plan(partition, node, children)),
    )

    doc = streamer_json("table", "buckets", table.base_uri)
    (resize,) = next(p for p in doc["partitions"] if p["partition"] == partition)["pending_resizes"]
    assert (resize["instant"], resize["kind"], resize["file_ids"]) == (instant, "split", [node.file_id])
    assert [(c["value"], c["file_id"], c["tag"]) for c in resize["children"]] == [
        (c.value, c.file_id, "REPLACE") for c in children
    ]
    assert f"split at {instant}: {node.file_id}" in streamer_text("table", "buckets", table.base_uri)

    timeline_doc = streamer_json("table", "timeline", table.base_uri, "--limit", "1")
    assert timeline_doc["pending_plans"] == [instant]
    out = streamer_text("table", "timeline", table.base_uri)
    plans = out.split("instants (")[0]
    assert "PENDING" in plans and instant in plans and "replacecommit" in plans


def test_a_clustering_plan_that_sorts_buckets_shows_each_as_a_pending_sort(table_path, tmp_path):
    table = copy_of(table_path, tmp_path)
    with table.writer(WriteOptions()) as writer:
        instant = schedule_clustering(
            writer, ClusteringPolicy(split_threshold_bytes=2**40, merge_threshold_bytes=0, sort_columns=("amount",))
        )
    view = table.file_system_view()
    buckets_by_partition = {p: {g.file_id for g in view.file_groups(p).values()} for p in view.partition_paths()}

    doc = streamer_json("table", "buckets", table.base_uri)
    for p in doc["partitions"]:
        resizes = p["pending_resizes"]
        assert {r["kind"] for r in resizes} == {"sort"} and {r["instant"] for r in resizes} == {instant}
        assert {f for r in resizes for f in r["file_ids"]} == buckets_by_partition[p["partition"]]
        assert all(len(r["children"]) == 1 and r["children"][0]["tag"] == "REPLACE" for r in resizes)
    assert f"sort at {instant}" in streamer_text("table", "buckets", table.base_uri)
    (entry,) = [e for e in streamer_json("table", "timeline", table.base_uri)["instants"] if e["instant"] == instant]
    assert entry["pending_plan"] and entry["plan_file_groups"] == sum(len(g) for g in buckets_by_partition.values())


def split_plan(partition: str, node: ring.HashingNode, children) -> dict:
    """A consistent-hashing clustering plan splitting one bucket, as Hudi's planner writes it."""
    return {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [{"fileId": node.file_id, "partitionPath": partition}],
                    "numOutputFileGroups": 2,
                    "extraMetadata": {
                        "clustering.group.partition": partition,
                        "clustering.group.child.node": ring.children_to_json(children),
                        "clustering.group.sequence.no": "0",
                    },
                }
            ],
            "extraMetadata": {},
        },
        "extraMetadata": {},
    }


def test_stats_count_rows_bytes_and_files_as_the_library_does(table_path):
    table = MorTable.load(table_path)
    rows = table.snapshot()
    view = table.file_system_view()
    slices = [s for g in view.all_file_groups() for s in g.slices.values()]
    doc = streamer_json("table", "stats", table_path)
    assert doc["row_count"] == rows.num_rows
    assert sum(p["rows"] for p in doc["partitions"]) == rows.num_rows
    assert doc["total_bytes"] == sum(s.total_size for s in slices)
    assert doc["log_files"] == sum(len(s.log_files) for s in slices)
    assert doc["file_groups"] == len(view.all_file_groups())
    timeline = table.timeline()
    assert doc["commits"] == len(timeline.completed_writes())
    assert doc["last_commit"] == timeline.last_completed_write().timestamp

    out = streamer_text("table", "stats", table_path)
    assert re.search(rf"^rows\s+{rows.num_rows:,}$", out, re.M) and doc["last_commit"] in out


def test_report_draws_bucket_and_file_plots(table_path, tmp_path):
    out = streamer_text("table", "report", table_path, "--out", str(tmp_path / "report"))
    paths = out.split()
    assert [os.path.basename(p) for p in paths] == ["buckets.png", "files_over_time.png"]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
        height, width, _ = matplotlib.image.imread(path).shape
        assert width >= 400 and height >= 300


def test_query_runs_sql_over_the_snapshot(table_path):
    count = MorTable.load(table_path).snapshot().num_rows
    doc = streamer_json("query", table_path, "--sql", "SELECT region, count(*) AS n FROM t GROUP BY region")
    assert doc["columns"] == ["region", "n"] and not doc["truncated"]
    assert sum(n for _, n in doc["rows"]) == count

    out = streamer_text(
        "query",
        table_path,
        "--sql",
        "SELECT region, count(*) AS n FROM t GROUP BY region ORDER BY region",
        "--limit",
        "2",
    )
    region, n = min(doc["rows"])
    assert re.search(r"^region\s+n$", out, re.M) and re.search(rf"^{region}\s+{n:,}$", out, re.M)
    assert "(more rows; raise --limit)" in out


def test_query_reads_the_base_files_or_the_changes_between_two_instants(table_path):
    table = MorTable.load(table_path)
    sql = "SELECT count(*) AS n FROM t"
    assert streamer_json("query", table_path, "--read-optimized", "--sql", sql)["rows"] == [
        [table.read_optimized().num_rows]
    ]
    first, second = (i.timestamp for i in table.timeline().completed("deltacommit")[:2])
    changed = table.incremental(first, second).num_rows
    assert 0 < changed < table.snapshot(as_of=second).num_rows  # neither nothing nor the whole table
    doc = streamer_json("query", table_path, "--incremental-from", first, "--as-of", second, "--sql", sql)
    assert doc["rows"] == [[changed]]


@pytest.mark.parametrize("command", [["table", "info"], ["table", "stats"], ["query", "--sql", "SELECT 1"]])
def test_a_path_without_a_table_exits_2_with_a_message(command, tmp_path):
    code, out = run_streamer([*command, str(tmp_path / "nothing")])
    assert code == 2
    assert f"error: no Hudi table at {tmp_path / 'nothing'}" in out
