"""The crash matrix: the streaming job killed hard (SIGKILL) at every failure point of every
protocol (`table/failpoints.py`), restarted until a run finishes, and the table checked after
every run; and torn log files, read by every reader.

The points share one table in a chain: each crash's restart is the next point's run, and the
rollback points crash inside the restart of a crashed batch. After every run: the rows through
our reader and hudi-rs equal an oracle of the events up to the offsets the table committed,
every data file belongs to a completed instant or is marked by a pending one (nothing a reader
could pick up from a rolled-back write), no file a reader's latest slices need is missing, and
what the previous crashes left pending gets resolved. The last run, without a failpoint, must
end with the whole stream in the table, the committed offsets at the topic's end and no pending
instant of any action. The matrix (point, runs, outcome) is printed in the terminal summary.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from streamer.sandbox.change_events import MALFORMED, REGIONS, as_kafka_records, change_events
from table import failpoints
from table.file_group.log_file.block import MAGIC, CorruptBlock
from table.file_group.log_file.reader import read_log_file
from table.mor_table import MorTable, TableSpec
from table.spark.datasource import register
from table.storage.layout import LogFileName
from table.storage.markers import marked_files
from table.write.writer import WriteOptions
from tests.support import kafka_broker
from tests.support.ingestion import (
    DATA_COLUMNS,
    REPO,
    assert_data_files_belong_to_instants,
    committed_offsets,
    end_offsets,
    expected_rows,
    hudi_rs_rows,
    order_config,
    our_rows,
    run_streamer,
    write_config,
)
from tests.support.three_writers import LOCK_HELD

BATCH = 300  # source.max_offsets_per_trigger: each run's batches are small
BATCHES = 8  # the first batch, the initial load, takes two batches' worth

# Every failure point, in the order the chain crashes at them. What each run does before its
# crash follows from the crash before it: the first batch, the initial load of the backlog,
# creates the table and its buckets (two per partition, over a tiny split threshold), so the
# first clustering splits them.
CHAIN = [
    "deltacommit.base_file_written",  # run 1: the initial load (batch 1) dies writing base files
    "clustering.requested",  # the restart writes batch 1 again; its inline clustering planned
    "clustering.files_written",  # the restart executes the plan (services resume at start)
    "clustering.completed",
    "deltacommit.requested",  # batch 2, over and over: each restart rolls the last one back
    "deltacommit.inflight",
    "deltacommit.markers_written",
    "deltacommit.log_file_written",
    "logfile.torn_write",
    "deltacommit.files_written",
    "rollback.requested",  # the restart dies rolling back the batch above,
    "rollback.files_deleted",  # and the next ones while finishing that rollback
    "rollback.completed",
    "deltacommit.completed",  # batch 2 committed, its checkpoint not recorded by Spark
    "sink.batch_committed",  # Spark replays batch 2 (skipped), batch 3 committed
    "compaction.requested",  # batch 4; clustering finds nothing more (max_buckets)
    "compaction.files_written",  # the restarts execute the plan
    "compaction.completed",
    "clean.requested",  # batch 5 (and a second, inline compaction), then the clean plan
    "clean.files_deleted",
    "clean.completed",
    "archive.entries_written",  # batch 6: the first run to reach archival
    "sink.quarantine_committed",  # the last batch holds the malformed records
]
# The runs that read with the python reader (`source.options.reader: python`), the others with the
# native one: where the reader matters most, a commit Spark's checkpoint does not know of and the
# restart that must not read its records again.
PYTHON_READER_RUNS = frozenset({"deltacommit.completed", "sink.batch_committed"})
# The runs whose batches Spark's tasks write (`stream.driver_write_max_records: 0`), the others'
# the driver writes (`streamer.driver_write`): writes killed in an executor's Python worker, the
# initial load's base files and a log file, and the torn log file it leaves.
SPARK_TASK_WRITE_RUNS = frozenset(
    {"deltacommit.base_file_written", "deltacommit.markers_written", "logfile.torn_write"}
)


def two_region_events(count: int, seed: int) -> list[dict]:
    """The demo's order changes folded onto two regions (keys keep theirs), so that every batch
    touches few file groups."""
    fold = {region: ("emea", "apac")[i % 2] for i, region in enumerate(REGIONS)}
    return [dict(e, region=fold[e["region"]]) for e in change_events(count, seed=seed)]


def matrix_config(tmp_path: Path, bootstrap: str, topic: str) -> dict:
    """Every service inline and due after each deltacommit; buckets split once (2 to 4 per
    partition), never merge; clean and archival keep few instants, so each has work early."""
    return order_config(
        tmp_path,
        "orders",
        bootstrap,
        topic,
        source={"max_offsets_per_trigger": BATCH, "initial_load_max_records": 2 * BATCH},
        decode={"on_error": "quarantine"},
        index={"initial_buckets": 2, "max_buckets": 4, "split_threshold_mb": 0.001, "merge_threshold_mb": 0},
        services={
            "clustering": {"mode": "inline", "every_delta_commits": 1},
            "compaction": {"mode": "inline", "every_delta_commits": 1},
            "clean": {"mode": "inline", "retained": 2},
            "archive": {"mode": "inline", "min_instants": 4, "max_instants": 8},
        },
    )


# -- checking a table after a run ------------------------------------------------------------------


def committed_events(path: str, topic: str, events: list[dict], offsets: list[tuple[int, int]]) -> list[dict]:
    """The events below the offsets the table's last commit records."""
    committed = committed_offsets(path, topic)
    return [e for e, (p, o) in zip(events, offsets) if o < committed.get(p, 0)]


def assert_readers_show(path: str, expected: dict) -> None:
    ours = our_rows(path)
    assert ours == expected, f"our reader: {len(ours)} rows, {len(expected)} expected"
    assert hudi_rs_rows(path) == expected, "hudi-rs"


def pending_instants(path: str) -> dict[str, str]:
    """Instant time -> `action.state` of every pending instant."""
    return {i.timestamp: f"{i.action}.{i.state}" for i in MorTable.load(path).timeline().pending()}


def torn_log_files(path: str) -> list[str]:
    """Log files a pending instant marked whose last block is cut off."""
    table = MorTable.load(path)
    torn = []
    for instant in table.timeline().pending():
        for file in marked_files(table.storage, instant.timestamp):
            if LogFileName.parse(file.rsplit("/", 1)[-1]) and table.storage.exists(file):
                blocks = read_log_file(table.storage, file)
                if blocks and isinstance(blocks[-1], CorruptBlock):
                    torn.append(file)
    return torn


def spark_mor_rows(spark, path: str) -> dict:
    rows = spark.read.format("mor").option("columns", ",".join(DATA_COLUMNS)).load(path).collect()
    assert len(rows) == len({r["order_id"] for r in rows}), "the mor source reads a key twice"
    return {r["order_id"]: {c: r[c] for c in DATA_COLUMNS} for r in rows}


# -- the matrix ------------------------------------------------------------------------------------


@dataclass
class MatrixRow:
    point: str
    left: dict[str, str]  # the pending instants its crash made or moved on, by instant time
    files_left: int  # data files those instants had written
    seconds: float  # of the crashed run
    runs: int = 1  # the crashed run and the restarts until what it left was resolved
    outcome: str = ""

    def resolve_if_done(self, pending: dict[str, str]) -> None:
        self.runs += 1
        if not set(self.left) & set(pending):
            left = ", ".join(sorted(self.left.values())) or "nothing pending"
            files = f", {self.files_left} data file(s)" if self.files_left else ""
            self.outcome = f"ok: left {left}{files}; resolved"


def crash_leftovers(path: str, before: dict[str, str], pending: dict[str, str]) -> tuple[dict[str, str], int]:
    """The pending instants a run made or moved to another state, and the data files they wrote."""
    left = {t: s for t, s in pending.items() if before.get(t) != s}
    storage = MorTable.load(path).storage
    return left, sum(storage.exists(f) for t in left for f in marked_files(storage, t))


def matrix_table(rows: list[MatrixRow], seconds: float) -> list[str]:
    width = max(len(r.point) for r in rows)
    lines = [
        f"crash matrix: {len(rows)} failure points in {seconds:.0f}s",
        f"  {'point':<{width}}  runs  crash run  outcome",
    ]
    lines += [f"  {r.point:<{width}}  {r.runs:>4}  {r.seconds:>8.0f}s  {r.outcome or 'FAILED'}" for r in rows]
    return lines


def crash_chain(
    chain: list[str],
    config: Path,
    path: str,
    topic: str,
    events: list[dict],
    offsets: list[tuple[int, int]],
    spark,
    rows: list[MatrixRow],
    extra_args: tuple[str, ...] = (),
    configs: Mapping[str, tuple[Path, str]] | None = None,
) -> None:
    """`streamer run --once` killed at each point of `chain` in turn, then run to the end; the
    table checked after every run (see the module's doc), a row per point added to `rows`. The
    run killed at a point of `configs` runs with that config instead of `config`, and must log
    the line given with it."""
    for point in [*chain, None]:
        before = pending_instants(path) if MorTable.exists(path) else {}
        run_started = time.monotonic()
        run_config, logged = (configs or {}).get(point or "", (config, ""))
        code, out = run_streamer(
            ["run", str(run_config), "--once", *extra_args], env={failpoints.FAIL_ENV_VAR: point} if point else None
        )
        seconds = time.monotonic() - run_started
        if point is not None:
            assert code == -signal.SIGKILL, f"{point} was never reached (exit {code}):\n{out[-6000:]}"
            assert f"failpoint {point}:" in out, out[-6000:]
            assert logged in out, f"{point}: the run logged no {logged!r}"
        else:
            assert code == 0, out[-6000:]

        expected = expected_rows(committed_events(path, topic, events, offsets))
        assert_readers_show(path, expected)
        assert_data_files_belong_to_instants(path)
        pending = pending_instants(path)
        for row in rows:
            if not row.outcome:
                row.resolve_if_done(pending)
        if point == "logfile.torn_write":
            assert torn_log_files(path), "the killed batch left no torn log file"
            assert spark_mor_rows(spark, path) == expected, "the mor source"
        if point is not None:
            rows.append(MatrixRow(point, *crash_leftovers(path, before, pending), seconds))


def assert_whole_stream_in(path: str, topic: str, events: list[dict], bootstrap: str) -> None:
    assert pending_instants(path) == {}
    assert our_rows(path) == expected_rows(events)
    assert committed_offsets(path, topic) == end_offsets(bootstrap, topic)
    quarantined = MorTable.load(path + "_quarantine").snapshot(columns=["value"])["value"].to_pylist()
    assert sorted(quarantined) == sorted(MALFORMED), "each malformed record once in the quarantine table"


@pytest.mark.e2e
def test_every_failure_point_restarts_to_the_oracle_with_nothing_lost_duplicated_or_left_pending(
    kafka_bootstrap, kafka_topic, tmp_path, spark, terminal_summary
):
    register(spark)
    topic = kafka_topic(partitions=2, prefix="orders")
    events = two_region_events(BATCHES * BATCH, seed=97)
    bad = [(b"bad", raw, None) for raw in MALFORMED]
    offsets = kafka_broker.produce(kafka_bootstrap, topic, as_kafka_records(events) + bad)
    mapping = matrix_config(tmp_path, kafka_bootstrap, topic)
    config = write_config(tmp_path / "configs", mapping)
    spark_tasks = write_config(
        tmp_path / "configs-spark-tasks", {**mapping, "stream": {**mapping["stream"], "driver_write_max_records": 0}}
    )
    mapping["source"]["options"] = {"reader": "python"}
    python_reader = write_config(tmp_path / "configs-python-reader", mapping)
    path = str(tmp_path / "tables" / "orders")

    rows: list[MatrixRow] = []
    started = time.monotonic()
    try:
        crash_chain(
            CHAIN,
            config,
            path,
            topic,
            events,
            offsets,
            spark,
            rows,
            configs={
                **dict.fromkeys(PYTHON_READER_RUNS, (python_reader, "with the python reader")),
                **dict.fromkeys(SPARK_TASK_WRITE_RUNS, (spark_tasks, "every batch is written by Spark's tasks")),
            },
        )
        assert_whole_stream_in(path, topic, events, kafka_bootstrap)
    finally:
        if rows:
            terminal_summary.extend(matrix_table(rows, time.monotonic() - started))
    assert [r.point for r in rows] == CHAIN and all(r.outcome for r in rows)


# The points where the source matters, for Spark's own `kafka` format: the initial load (a batch
# query before the stream with that format) killed writing, a commit Spark's checkpoint does not
# know of (the restart must not read its records again), and a quarantine commit before its
# batch's own. The other points are the table's, whichever source feeds it.
KAFKA_FORMAT_CHAIN = [
    "deltacommit.base_file_written",  # run 1: the initial load's batch query dies writing base files
    "deltacommit.completed",  # the restart loads again and commits; killed before Spark records it
    "sink.quarantine_committed",  # the last batch holds the malformed records
]


@pytest.mark.e2e
def test_failure_points_of_the_source_restart_to_the_oracle_with_sparks_kafka_format(
    kafka_bootstrap, kafka_topic, tmp_path, spark, terminal_summary
):
    from harness.spark import kafka_connector

    jars = ",".join(str(jar) for jar in kafka_connector().jars)
    topic = kafka_topic(partitions=2, prefix="orders")
    events = two_region_events(6 * BATCH, seed=98)
    bad = [(b"bad", raw, None) for raw in MALFORMED]
    offsets = kafka_broker.produce(kafka_bootstrap, topic, as_kafka_records(events) + bad)
    mapping = order_config(
        tmp_path,
        "orders",
        kafka_bootstrap,
        topic,
        decode={"on_error": "quarantine"},
        source={"format": "kafka", "max_offsets_per_trigger": BATCH, "initial_load_max_records": 2 * BATCH},
    )
    config = write_config(tmp_path / "configs", mapping)
    path = str(tmp_path / "tables" / "orders")

    rows: list[MatrixRow] = []
    started = time.monotonic()
    try:
        crash_chain(
            KAFKA_FORMAT_CHAIN,
            config,
            path,
            topic,
            events,
            offsets,
            spark,
            rows,
            extra_args=("--conf", f"spark.jars={jars}"),
        )
        assert_whole_stream_in(path, topic, events, kafka_bootstrap)
    finally:
        if rows:
            terminal_summary.extend(["source.format: kafka", *matrix_table(rows, time.monotonic() - started)])
    assert [r.point for r in rows] == KAFKA_FORMAT_CHAIN and all(r.outcome for r in rows)


@pytest.mark.unit
def test_the_matrix_or_the_three_writer_test_crashes_at_every_failure_point_in_the_code_and_the_docs():
    in_code = set()
    for source in [*REPO.glob("table/**/*.py"), *REPO.glob("streamer/**/*.py")]:
        in_code |= set(
            re.findall(
                r'(?:failpoints\.reach|failpoints\.torn_write|reach_failpoint)\(\s*"([^"]+)"', source.read_text()
            )
        )
    in_docstring = set(re.findall(r"^- `([a-z_]+\.[a-z_]+)`:", failpoints.__doc__, re.MULTILINE))
    architecture = (REPO / "docs" / "architecture.md").read_text()
    crashed_at = [*CHAIN, LOCK_HELD]  # only optimistic writers take the commit lock: not the matrix's job
    assert sorted(in_code) == sorted(crashed_at)
    assert in_docstring == in_code
    assert [p for p in crashed_at if f"`{p}`" not in architecture] == []


# -- torn log files --------------------------------------------------------------------------------

ORDERS = pa.schema([("order_id", pa.string()), ("amount", pa.int64()), ("updated_at", pa.int64())])


@pytest.mark.unit
@pytest.mark.parametrize("block_format", ["parquet", "avro"])
def test_a_log_file_cut_off_in_its_last_block_reads_as_its_earlier_blocks(tmp_path, block_format):
    """A commit's log file holding a data block then a delete block, cut anywhere in the delete
    block: the data block is read, the cut block skipped (as Hudi's reader does), never an error."""
    path = str(tmp_path / "table")
    table = MorTable.create(path, TableSpec("orders", ORDERS, ("order_id",), "updated_at"))
    with table.writer(WriteOptions(initial_buckets=1, delete_field="deleted", log_block_format=block_format)) as w:
        w.upsert(
            pa.table(
                {
                    "order_id": [f"o{i}" for i in range(6)],
                    "amount": list(range(6)),
                    "updated_at": [1] * 6,
                    "deleted": [False] * 6,
                }
            )
        )
        w.upsert(
            pa.table(
                {
                    "order_id": ["o1", "o2", "o3"],
                    "amount": [100, 0, 0],
                    "updated_at": [2, 2, 2],
                    "deleted": [False, True, True],
                }
            )
        )
    (log,) = list(Path(path).rglob(".*.log.*"))
    data = log.read_bytes()
    second = data.find(MAGIC, 1)
    assert second > 0 and [
        type(b).__name__ for b in read_log_file(table.storage, log.relative_to(path).as_posix())
    ] == ["DataBlock", "DeleteBlock"]
    whole = {f"o{i}": i for i in range(6)} | {"o1": 100}
    after_delete = {k: v for k, v in whole.items() if k not in ("o2", "o3")}
    # hudi-rs 0.5 refuses a file that ends inside a block's 8-byte length field (just after its
    # magic): "read of 8 byte(s) ... runs past the end". Every other cut it skips, as we do.
    length_field = range(second + len(MAGIC), second + len(MAGIC) + 8)
    for cut in sorted(
        {
            second,
            second + 3,
            *length_field,
            second + 14,
            second + 40,
            (second + len(data)) // 2,
            len(data) - 9,
            len(data) - 1,
            len(data),
        }
    ):
        log.write_bytes(data[:cut])
        want = after_delete if cut == len(data) else whole
        ours = {
            r["order_id"]: r["amount"] for r in MorTable.load(path).snapshot(columns=["order_id", "amount"]).to_pylist()
        }
        assert ours == want, cut
        if cut not in length_field:
            batches = hudi.HudiTableBuilder.from_base_uri(path).build().read()
            assert {r["order_id"]: r["amount"] for b in batches for r in b.to_pylist()} == want, cut
