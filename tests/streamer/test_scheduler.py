"""Table services as the ingestion job runs them: after each commit, inline or in the background,
over many commits; and the offline `streamer cluster` command. The writer here is the
pure-Python one; the streaming job calls the same hooks."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from streamer.cli import main as cli
from streamer.config.loading import config_from_mapping
from streamer.config.model import IndexSettings, ServicesSettings
from streamer.scheduler import BackgroundExecutor, TableServices
from table import Concurrency
from table.index import consistent_hashing as ring
from table.mor_table import MorTable
from table.plans.pending import pending_clusterings, pending_compactions
from table.services.clustering.planner import ClusteringPolicy, schedule_clustering
from table.write.file_group_writer import WriteTask, write_file_groups
from table.write.prepare import prepare_batch
from tests.support.oracle import Oracle
from tests.support.orders import DATA_COLUMNS, SCHEMA, by_key, hudi_rs_read, make_table, row, strip, write_options

pytestmark = pytest.mark.unit


def monotonic_batch(rng: random.Random, known: list[str], size: int, first_id: int, clock: int) -> list[dict]:
    """Inserts, updates and deletes whose ordering values only grow, so the expected rows do not
    depend on when a compaction forgets a delete (Hudi drops deleted keys from base files)."""
    rows = []
    for i in range(size):
        roll = rng.random()
        if known and roll < 0.55:
            rows.append(row(rng.choice(known), clock + i, deleted=False, rng=rng))
        elif known and roll < 0.62:
            rows.append(row(rng.choice(known), clock + i, deleted=True, rng=rng))
        else:
            key = f"o-{first_id + i:07d}"
            known.append(key)
            rows.append(row(key, clock + i, deleted=False, rng=rng))
    return rows


class Stream:
    """A writer committing monotonic batches, with the oracle of what it wrote."""

    def __init__(self, table, writer, seed: int = 3):
        self.table = table
        self.writer = writer
        self.oracle = Oracle("order_id", "updated_at", "is_deleted")
        self.rng = random.Random(seed)
        self.known: list[str] = []
        self.commits = 0

    def commit(self, size: int = 60) -> str:
        batch = monotonic_batch(
            self.rng, self.known, size, first_id=self.commits * size, clock=1_000 + self.commits * size
        )
        self.oracle.apply_batch(batch)
        self.commits += 1
        return self.writer.upsert(pa.Table.from_pylist(batch, schema=SCHEMA))

    def expected(self) -> dict:
        return strip(self.oracle.rows(), DATA_COLUMNS)


def assert_both_readers_match(path, expected: dict) -> None:
    assert strip(by_key(MorTable.load(str(path)).snapshot()), DATA_COLUMNS) == expected
    assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == expected


def services(table, writer, executor: BackgroundExecutor, index: dict | None = None, **settings) -> TableServices:
    return TableServices(
        ServicesSettings.model_validate(settings),
        table,
        writer,
        executor,
        index=IndexSettings.model_validate(index or {}),
    )


def data_files(path) -> list:
    return [p for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie")]


def test_hundreds_of_commits_keep_the_active_timeline_and_the_file_count_within_bounds(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    bounds = {"min_instants": 10, "max_instants": 15}
    timeline_sizes, file_counts = [], []
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            compaction={"mode": "inline", "every_delta_commits": 4},
            clean={"mode": "inline", "retained": 3},
            archive={"mode": "inline", **bounds},
        )
        for _ in range(240):
            stream.commit(size=40)
            svc.after_commit()
            timeline_sizes.append(len(table.timeline().completed()))
            file_counts.append(len(data_files(path)))
    executor.shutdown()

    assert max(timeline_sizes[50:]) <= bounds["max_instants"]
    assert min(timeline_sizes[50:]) >= bounds["min_instants"]
    # files stop growing: the second half of the run peaks where the first half did
    assert max(file_counts[120:]) <= 1.05 * max(file_counts[:120])
    assert_both_readers_match(path, stream.expected())


def test_inline_compaction_every_n_delta_commits_bounds_log_files_per_file_group(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            compaction={"mode": "inline", "every_delta_commits": 3},
            clean={"mode": "off"},
            archive={"mode": "off"},
        )
        for _ in range(21):
            stream.commit()
            svc.after_commit()
            slices = table.file_system_view().latest_slices()
            assert max(len(s.log_files) for s in slices) <= 3
        # the last commit was followed by a compaction: base files alone hold every record
        assert len(table.timeline().completed("commit")) >= 5
        before_plan = stream.expected()
        assert strip(by_key(table.read_optimized()), DATA_COLUMNS) == before_plan
        stream.commit()  # lands in log files: visible to snapshots, not to read-optimized reads
        assert strip(by_key(table.read_optimized()), DATA_COLUMNS) == before_plan
    executor.shutdown()
    assert_both_readers_match(path, stream.expected())


def test_async_compaction_executes_in_the_background_while_the_writer_keeps_committing(tmp_path, monkeypatch):
    monkeypatch.setenv("MOR_STREAMER_PAUSE", "compaction.files_written=0.8")
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    commits_during_a_plan = 0
    with table.writer(write_options()) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            compaction={"mode": "async", "every_delta_commits": 2},
            clean={"mode": "inline", "retained": 4},
            archive={"mode": "off"},
        )
        # Until two compactions have completed in the background, however fast the commits are
        # beside them: a plan's execution pauses 0.8 s, and the next is planned once it is done.
        for _ in range(400):
            if len(table.timeline().completed("commit")) >= 2 and commits_during_a_plan >= 2:
                break
            pending_before = bool(pending_compactions(table))
            stream.commit()
            if pending_before and pending_compactions(table):
                # our reader merges the pending slice with the previous one; hudi-rs 0.5 only
                # sees these writes once the plan completes (see test_compaction)
                commits_during_a_plan += 1
                assert strip(by_key(table.snapshot()), DATA_COLUMNS) == stream.expected()
            svc.after_commit()
        assert executor.wait_idle(timeout=60)
    executor.shutdown()

    assert commits_during_a_plan >= 2
    assert pending_compactions(table) == []
    assert len(table.timeline().completed("commit")) >= 2
    assert_both_readers_match(path, stream.expected())


# -- clustering: bucket splits, merges and sorts -------------------------------------------------

# Buckets of 17 KiB and more split at 10 KiB; nothing is small enough to merge.
SMALL_BUCKETS = {"initial_buckets": 2, "split_threshold_mb": 0.006, "merge_threshold_mb": 0.001}
ONLY_CLUSTERING = {"compaction": {"mode": "off"}, "clean": {"mode": "off"}, "archive": {"mode": "off"}}
SPLITS = ClusteringPolicy(split_threshold_bytes=10 * 1024, merge_threshold_bytes=1024, min_buckets=2)


def bucket_counts(table) -> dict[str, int]:
    """Buckets per partition, by the latest committed hashing metadata."""
    completed = set(table.timeline().completed_timestamps().active)
    return {
        p: len(ring.load_latest(table.storage, p, completed, repair=False).nodes)
        for p in table.file_system_view().partition_paths()
    }


def data_rows(table) -> dict:
    return strip(by_key(table.snapshot()), DATA_COLUMNS)


def test_clustering_policy_comes_from_the_index_and_clustering_settings(tmp_path):
    table = make_table(tmp_path / "orders")
    with table.writer(write_options()) as writer:
        svc = services(
            table,
            writer,
            BackgroundExecutor(),
            index={
                "initial_buckets": 3,
                "max_buckets": 64,
                "split_threshold_mb": 1.5,
                "merge_threshold_mb": 0.25,
                "split_point": "distribution",
            },
            clustering={"sort_columns": ["status", "amount"], "max_partitions": 2, "max_plan_mb": 10},
        )
        policy = svc.clustering_policy()
        defaults = services(table, writer, BackgroundExecutor()).clustering_policy()

    assert policy == ClusteringPolicy(
        split_threshold_bytes=1536 * 1024,
        merge_threshold_bytes=256 * 1024,
        min_buckets=3,
        max_buckets=64,
        split_point="distribution",
        max_partitions=2,
        max_bytes=10 * 1024 * 1024,
        sort_columns=("status", "amount"),
    )
    # min_buckets defaults to initial_buckets; Hudi's 120 MB file size x 2.0 to split, x 0.2 to merge
    assert (defaults.split_threshold_bytes, defaults.merge_threshold_bytes) == (240 * 1024 * 1024, 24 * 1024 * 1024)
    assert (defaults.min_buckets, defaults.max_buckets, defaults.max_bytes) == (4, 1024, 2048 * 1024 * 1024)
    assert (defaults.split_point, defaults.max_partitions, defaults.sort_columns) == ("middle", None, ())


def test_inline_clustering_splits_grown_buckets_and_every_reader_keeps_every_row(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            index=SMALL_BUCKETS,
            clustering={"mode": "inline", "every_delta_commits": 3},
            **ONLY_CLUSTERING,
        )
        for _ in range(2):
            stream.commit(size=300)
            svc.after_commit()
        assert table.timeline().completed("replacecommit") == []  # not due before the 3rd deltacommit
        stream.commit(size=300)
        before_counts, before_rows = bucket_counts(table), data_rows(table)
        svc.after_commit()

        (_replace,) = table.timeline().completed("replacecommit")
        assert pending_clusterings(table) == []
        after_counts = bucket_counts(table)
        assert set(after_counts) == set(before_counts) and set(before_counts.values()) == {2}
        assert all(after_counts[p] > before_counts[p] for p in before_counts)
        assert data_rows(table) == before_rows == stream.expected()
        assert_both_readers_match(path, stream.expected())

        # writes after the resize go to the new buckets; the count starts again from the replacecommit
        for _ in range(3):
            stream.commit(size=300)
            svc.after_commit()
        assert len(table.timeline().completed("replacecommit")) == 2
        assert sum(bucket_counts(table).values()) > sum(after_counts.values())
    executor.shutdown()
    assert_both_readers_match(path, stream.expected())


def test_inline_clustering_merges_small_buckets_but_not_below_min_buckets(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options(initial_buckets=8)) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            index={"initial_buckets": 8, "min_buckets": 3, "split_threshold_mb": 8, "merge_threshold_mb": 4},
            clustering={"mode": "inline", "every_delta_commits": 2},
            **ONLY_CLUSTERING,
        )
        for _ in range(6):
            stream.commit(size=80)
            svc.after_commit()
        counts = bucket_counts(table)
    executor.shutdown()

    assert table.timeline().completed("replacecommit")
    assert set(counts.values()) == {3}  # from 8 buckets, merged down to the floor and no further
    assert_both_readers_match(path, stream.expected())


def test_async_clustering_executes_in_the_background_while_the_writer_keeps_committing(tmp_path, monkeypatch):
    monkeypatch.setenv("MOR_STREAMER_PAUSE", "clustering.files_written=0.8")
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    commits_during_a_plan = 0
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = Stream(table, writer)
        svc = services(
            table,
            writer,
            executor,
            index=SMALL_BUCKETS,
            clustering={"mode": "async", "every_delta_commits": 2},
            **ONLY_CLUSTERING,
        )
        # Ten commits at least; more while a slow machine has not finished two resizes yet.
        for n in range(40):
            if n >= 10 and len(table.timeline().completed("replacecommit")) >= 2:
                break
            pending_before = bool(pending_clusterings(table))
            stream.commit(size=150)
            if pending_before and pending_clusterings(table):
                # dual writes: the old buckets take every write and stay what readers see
                commits_during_a_plan += 1
                assert strip(by_key(table.snapshot()), DATA_COLUMNS) == stream.expected()
                assert strip(by_key(hudi_rs_read(path)), DATA_COLUMNS) == stream.expected()
            svc.after_commit()
            if not pending_before and pending_clusterings(table):
                assert executor.busy_with("orders", "clustering")  # scheduled, handed to the executor
        assert executor.wait_idle(timeout=60)
    executor.shutdown()

    assert commits_during_a_plan >= 2
    assert executor.failures == 0
    assert pending_clusterings(table) == []
    assert len(table.timeline().completed("replacecommit")) >= 2
    assert all(n > 2 for n in bucket_counts(table).values())
    assert_both_readers_match(path, stream.expected())


def test_a_pending_clustering_is_executed_at_resume_unless_clustering_is_off(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = Stream(table, writer)
        for _ in range(4):
            stream.commit(size=300)
        instant = schedule_clustering(writer, SPLITS)  # as a run that crashed before executing it
        services(table, writer, executor, clustering={"mode": "off"}).resume()
        assert pending_clusterings(table) == [instant]
        services(table, writer, executor, clustering={"mode": "inline"}).resume()
        assert pending_clusterings(table) == []
        assert instant in [i.timestamp for i in table.timeline().completed("replacecommit")]
    executor.shutdown()
    assert_both_readers_match(path, stream.expected())


def test_finish_executes_a_clustering_still_pending(tmp_path):
    path = tmp_path / "orders"
    table = make_table(path)
    executor = BackgroundExecutor()
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = Stream(table, writer)
        for _ in range(4):
            stream.commit(size=300)
        instant = schedule_clustering(writer, SPLITS)
        assert services(table, writer, executor, clustering={"mode": "async"}).finish(timeout=30)
    executor.shutdown()
    assert pending_clusterings(table) == []
    assert instant in [i.timestamp for i in table.timeline().completed("replacecommit")]
    assert_both_readers_match(path, stream.expected())


def test_sort_columns_that_are_not_table_columns_are_found_before_the_job_starts():
    from streamer import preflight

    config = config_from_mapping(
        {
            "table": {
                "name": "orders",
                "path": "/data/orders",
                "record_key": "order_id",
                "ordering_field": "updated_at",
            },
            "source": {"bootstrap_servers": "broker:9092", "topics": "orders"},
            "decode": {"value": {"format": "json", "schema": "order_id STRING, updated_at BIGINT, tags ARRAY<STRING>"}},
            "services": {"clustering": {"sort_columns": ["updated_at", "amount", "tags"]}},
        },
        "orders.yaml",
    )

    found = [str(p) for p in preflight.check(config)]

    assert len(found) == 2, found
    assert (
        "orders.yaml: services.clustering.sort_columns.1: no column 'amount' in the value's fields "
        "(order_id, updated_at, tags); fix: "
    ) in found[0]
    assert (
        "orders.yaml: services.clustering.sort_columns.2: column 'tags' is of type list<element: string>, "
        "which cannot be sorted by; fix: "
    ) in found[1]


# -- the offline command: streamer cluster ------------------------------------------------------


def table_with_grown_buckets(path, commits: int = 4):
    """A table of 2 buckets per partition, some 24 KiB each (past SPLITS' 10 KiB whatever the
    sizes of file names and instants in them), and the oracle of its rows."""
    table = make_table(path)
    with table.writer(write_options(initial_buckets=2)) as writer:
        stream = Stream(table, writer)
        for _ in range(commits):
            stream.commit(size=300)
    return table, stream


SMALL_FLAGS = ["--split-threshold-mb", "0.01", "--merge-threshold-mb", "0.001", "--min-buckets", "2"]


def test_streamer_cluster_plans_and_executes_a_clustering_and_prints_its_result(tmp_path, capsys):
    path = tmp_path / "orders"
    table, stream = table_with_grown_buckets(path)

    assert cli.main(["cluster", str(path), "--split-threshold-mb", "1", "--merge-threshold-mb", "0.001"]) == 0
    assert capsys.readouterr().out == "clustering: nothing to cluster\n"
    assert cli.main(["cluster", str(path), *SMALL_FLAGS]) == 0

    out = capsys.readouterr().out.splitlines()
    (replace,) = table.timeline().completed("replacecommit")
    assert out[0] == f"clustering: scheduled {replace.timestamp}"
    # every bucket (4 partitions of 2) split in two; each child got its records
    assert out[1].startswith(
        f"clustering {replace.timestamp}: clustered 8 split(s) at {replace.timestamp}: "
        f"16 file group(s) of {len(stream.expected())} record(s)"
    )
    assert set(bucket_counts(table).values()) == {4}
    assert pending_clusterings(table) == []
    assert_both_readers_match(path, stream.expected())


def test_streamer_cluster_executes_a_pending_plan_without_the_writer_lease(tmp_path, capsys):
    path = tmp_path / "orders"
    table, stream = table_with_grown_buckets(path)
    with table.writer(write_options(initial_buckets=2)) as writer:
        instant = schedule_clustering(writer, SPLITS)
        # a streaming job holds the table; executing the plan needs only the plan's own lease
        assert cli.main(["cluster", str(path)]) == 0
    assert f"clustering {instant}: clustered 8 split(s)" in capsys.readouterr().out
    assert pending_clusterings(table) == []
    assert_both_readers_match(path, stream.expected())


def test_streamer_cluster_takes_the_policy_of_a_table_config_and_flags_override_it(tmp_path, capsys):
    path = tmp_path / "orders"
    table, stream = table_with_grown_buckets(path)
    config = {
        "table": {"name": "orders", "path": str(path), "record_key": "order_id", "ordering_field": "updated_at"},
        "source": {"bootstrap_servers": "broker:9092", "topics": "orders"},
        "decode": {"value": {"format": "json", "schema": "order_id STRING, updated_at BIGINT"}},
        "index": {"initial_buckets": 2, "split_threshold_mb": 0.01, "merge_threshold_mb": 0.001},
        "services": {"clustering": {"sort_columns": ["nope"]}},
    }
    config_path = tmp_path / "orders.yaml"
    config_path.write_text(yaml.safe_dump(config))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**config, "table": {**config["table"], "path": str(tmp_path / "other")}}))

    assert cli.main(["cluster", str(path), "--config", str(config_path)]) == 2
    err = capsys.readouterr().err
    assert "services.clustering.sort_columns: no column(s) ['nope']" in err and str(config_path) in err
    assert cli.main(["cluster", str(path), "--config", str(other)]) == 2
    assert "is the config of the table at" in capsys.readouterr().err
    assert cli.main(["cluster", str(path), "--sort-columns", "a,b"]) == 2
    assert "--sort-columns: no column(s) ['a', 'b']" in capsys.readouterr().err
    assert table.timeline().instants == table.timeline().completed("deltacommit")  # nothing planned

    assert cli.main(["cluster", str(path), "--config", str(config_path), "--sort-columns", "status"]) == 0
    assert "clustered 8 split(s)" in capsys.readouterr().out
    assert set(bucket_counts(table).values()) == {4}
    for file_slice in table.file_system_view().latest_slices():  # the flag's sort columns, not the config's
        statuses = pq.read_table(path / file_slice.base_file.path, columns=["status"])["status"].to_pylist()
        assert statuses == sorted(statuses)
    assert_both_readers_match(path, stream.expected())


def test_streamer_cluster_rollback_removes_a_pending_plan_and_its_dual_writes(tmp_path, capsys):
    path = tmp_path / "orders"
    table, stream = table_with_grown_buckets(path)
    with table.writer(write_options(initial_buckets=2)) as writer:
        instant = schedule_clustering(writer, SPLITS)
        stream.writer = writer
        stream.commit(size=300)  # dual-written to the planned buckets' children
        children = {
            f for p in table.file_system_view().partition_paths() for f in (path / p).iterdir() if instant in f.name
        }
        assert children  # the children's log files start a slice at the plan's instant
        # the job holds the writer lease: rolling back is refused, naming the holder
        assert cli.main(["cluster", str(path), "--rollback", instant]) == 2
        assert "is being written by another writer" in capsys.readouterr().err
    counts = bucket_counts(table)

    assert cli.main(["cluster", str(path), "--rollback", instant]) == 0

    (rollback,) = table.timeline().completed("rollback")
    assert capsys.readouterr().out == f"clustering {instant}: rolled back by {rollback.timestamp}\n"
    assert pending_clusterings(table) == [] and table.timeline().completed("replacecommit") == []
    assert not any(f.exists() for f in children)
    assert bucket_counts(table) == counts
    assert_both_readers_match(path, stream.expected())
    assert cli.main(["cluster", str(path), "--rollback", instant]) == 2
    assert f"no pending clustering at {instant}" in capsys.readouterr().err


def test_status_and_the_timeline_list_a_pending_clustering(tmp_path):
    from streamer.cli.describe import timeline_entries
    from streamer.cli.status import table_status

    path = tmp_path / "orders"
    table, _ = table_with_grown_buckets(path)
    with table.writer(write_options(initial_buckets=2)) as writer:
        instant = schedule_clustering(writer, SPLITS)
    config = config_from_mapping(
        {
            "table": {"name": "orders", "path": str(path), "record_key": "order_id", "ordering_field": "updated_at"},
            "source": {"bootstrap_servers": "broker:9092", "topics": "orders"},
            "decode": {"value": {"format": "json", "schema": "order_id STRING, updated_at BIGINT"}},
        }
    )

    status = table_status(config)
    assert status.pending == [f"{instant} replacecommit requested"]
    assert f"  pending  {instant} replacecommit requested" in status.lines()
    summary = timeline_entries(table)
    assert summary.pending_plans == [instant]
    (entry,) = [e for e in summary.instants if e.instant == instant]
    assert entry.plan_file_groups == 8  # every bucket of 4 partitions x 2 splits


def test_streamer_compact_plans_beside_an_optimistic_writer_once_its_pending_write_completes(tmp_path, capsys):
    path = tmp_path / "orders"
    table = make_table(path)
    with table.writer(write_options(concurrency=Concurrency.OPTIMISTIC), description="the job") as writer:
        stream = Stream(table, writer)
        for _ in range(3):
            stream.commit()
        batch = monotonic_batch(stream.rng, stream.known, 60, first_id=10_000, clock=50_000)
        pending = writer.begin_delta_commit(writer.check_schema(SCHEMA))
        args = ["compact", str(path), "--schedule", "--concurrency", "optimistic_concurrency_control"]
        with ThreadPoolExecutor(1) as offline:
            compacting = offline.submit(cli.main, args)
            time.sleep(1.0)
            assert not compacting.done() and not table.timeline().pending("compaction")  # waits for the write
            prepared = prepare_batch(
                pa.Table.from_pylist(batch, schema=SCHEMA), writer.batch_spec, writer.key_generator
            )
            pending.complete(
                write_file_groups(pending.context, WriteTask(0), pending.routing, pending.routing.route(prepared))
            )
            stream.oracle.apply_batch(batch)
            assert compacting.result(timeout=60) == 0

    out = capsys.readouterr().out
    assert "compaction: scheduled " in out
    compacted = table.timeline().completed("commit")
    assert compacted and compacted[-1].timestamp > pending.instant
    assert_both_readers_match(path, stream.expected())
