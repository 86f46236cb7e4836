"""Writes beside the stream (`streamer.backfill`): a Parquet dataset, a JSON one or a Spark query
upserted into a job's table, and the rows a condition matches deleted, each one commit that
records no stream checkpoint, so the job goes on from its own offsets."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.backfill import backfill, delete_where
from streamer.checkpoint import table_checkpoint
from streamer.config.loading import config_from_mapping
from streamer.sandbox.change_events import change_events
from tests.support.ingestion import (
    ORDER_SCHEMA,
    committed_table,
    expected_rows,
    hudi_rs_rows,
    order_config,
    our_rows,
    run_streamer,
    settled,
    write_config,
)

pytestmark = pytest.mark.spark

OFFSETS = {"orders": {0: 120}}


@pytest.fixture
def job_table(tmp_path):
    """A table a job wrote (with its checkpoint), and the config, under optimistic concurrency."""
    events = settled(change_events(120, seed=31))
    mapping = order_config(
        tmp_path, "orders", "127.0.0.1:9", "orders", table={"concurrency": "optimistic_concurrency_control"}
    )
    committed_table(mapping["table"]["path"], events, OFFSETS)
    return mapping, events


def later(events: list[dict], first: int, count: int, clock: int) -> list[dict]:
    """Updates of `count` keys the events made (each in its partition), from `first`, newer than any event."""
    regions = {e["order_id"]: e["region"] for e in events}
    keys = sorted(regions)[first : first + count]
    assert len(keys) == count, f"the events made {len(regions)} keys"
    return [
        {
            "order_id": k,
            "customer": "backfill",
            "region": regions[k],
            "amount": float(i),
            "status": "paid",
            "note": "",
            "updated_at": clock + i,
            "deleted": False,
        }
        for i, k in enumerate(keys)
    ]


def test_a_backfill_of_a_parquet_dataset_a_json_one_and_a_query_lands_beside_the_jobs_checkpoint(
    spark, job_table, tmp_path
):
    mapping, events = job_table
    config = config_from_mapping(mapping)
    parquet_rows, json_rows = later(events, 0, 15, 10**13), later(events, 15, 10, 10**13)
    pq.write_table(pa.Table.from_pylist(parquet_rows, schema=ORDER_SCHEMA), tmp_path / "fix.parquet")
    (tmp_path / "fix.json").write_text("".join(json.dumps(r) + "\n" for r in json_rows))
    spark.createDataFrame(later(events, 25, 5, 2 * 10**13)).createOrReplaceTempView("corrections")

    results = [
        backfill(spark, config, str(tmp_path / "fix.parquet")),
        backfill(spark, config, str(tmp_path / "fix.json")),
        backfill(spark, config, f"SELECT {', '.join(ORDER_SCHEMA.names)} FROM corrections"),
    ]

    assert [r.upserted for r in results] == [15, 10, 5] and all(r.instant for r in results)
    expected = expected_rows(events + parquet_rows + json_rows + later(events, 25, 5, 2 * 10**13))
    path = mapping["table"]["path"]
    assert our_rows(path) == expected and hudi_rs_rows(path) == expected
    assert table_checkpoint_offsets(path) == OFFSETS


def table_checkpoint_offsets(path: str) -> dict:
    from table import MorTable

    checkpoint = table_checkpoint(MorTable.load(path))
    assert checkpoint is not None
    return {t: dict(p) for t, p in checkpoint.offsets.items()}


def test_a_delete_removes_the_rows_its_condition_matches_and_nothing_else(spark, job_table):
    mapping, _ = job_table
    path = mapping["table"]["path"]
    before = our_rows(path)
    doomed = {k for k, r in before.items() if r["region"] == "emea"}
    assert doomed and len(doomed) < len(before)

    result = delete_where(spark, config_from_mapping(mapping), "region = 'emea'")

    assert result.deleted == len(doomed) and result.upserted == 0
    expected = {k: r for k, r in before.items() if k not in doomed}
    assert our_rows(path) == expected and hudi_rs_rows(path) == expected
    assert table_checkpoint_offsets(path) == OFFSETS
    assert delete_where(spark, config_from_mapping(mapping), "region = 'emea'").instant is None


def test_streamer_backfill_says_what_it_wrote(job_table, tmp_path):
    mapping, events = job_table
    rows = later(events, 0, 12, 10**13)
    pq.write_table(pa.Table.from_pylist(rows, schema=ORDER_SCHEMA), tmp_path / "fix.parquet")
    config = write_config(tmp_path / "configs", mapping)

    code, out = run_streamer(["backfill", str(config), "--from", str(tmp_path / "fix.parquet"), "--master", "local[1]"])

    assert code == 0, out[-3000:]
    assert "orders: backfill: 12 row(s) upserted, 0 deleted -> deltacommit " in out
    assert our_rows(mapping["table"]["path"]) == expected_rows(events + rows)
