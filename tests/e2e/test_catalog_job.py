"""The streaming job with `sync:` against the session's Hive Metastore, and a metastore that is down
for a while: commits go on, `streamer status`, `streamer doctor` and the catalog metric say how far
behind the catalog is and why, and the catalog catches up once the metastore is back."""

from __future__ import annotations

import logging

import pytest

from streamer import app
from streamer.catalog import CatalogSync, metastore_connector, sync_target
from streamer.cli.doctor import TableDoctor, Verdict
from streamer.cli.status import table_status
from streamer.config.loading import config_from_mapping
from streamer.metrics import Metrics
from streamer.sandbox.change_events import change_events
from table.file_group.fs_view import list_partitions
from table.mor_table import MorTable
from table.sync import LAST_COMMIT_TIME_SYNC, HiveMetastoreClient, HiveSync
from tests.support.ingestion import (
    assert_table_matches,
    committed_table,
    order_config,
    produce_orders,
    run_streamer,
    write_config,
)

pytestmark = pytest.mark.e2e


def catalog_metric(metrics: Metrics, name: str, table: str) -> float:
    return metrics.registry.get_sample_value(f"mor_streamer_{name}", {"table": table})


def test_a_job_commits_while_its_metastore_is_down_and_its_catalog_catches_up_when_it_is_back(
    spark, kafka_bootstrap, kafka_topic, tmp_path, hive_metastore, caplog
):
    topic = kafka_topic(partitions=2, prefix="orders")
    first, later = change_events(3000, seed=3), change_events(6000, seed=3)[3000:]
    produce_orders(kafka_bootstrap, topic, first)
    config = config_from_mapping(
        order_config(
            tmp_path,
            "synced_orders",
            kafka_bootstrap,
            topic,
            sync={"metastore_uris": hive_metastore.uri, "database": "lake_job", "timeout_seconds": 5},
        )
    )
    path = config.table.path

    hive_metastore.stop()
    try:
        with caplog.at_level(logging.WARNING, logger="streamer.catalog"):
            result = app.run([config], spark, once=True)
        assert result.tables[0].error is None and result.tables[0].batches >= 1
        assert_table_matches(path, first)  # the commits went on
        failures = [r for r in caplog.records if "catalog sync of lake_job.synced_orders_rt" in r.getMessage()]
        assert failures and all("failed" in r.getMessage() and "commit(s) behind" in r.getMessage() for r in failures)

        status = table_status(config, kafka_timeout=5)
        commits = len(MorTable.load(path).timeline().completed_writes())
        assert status.catalog["failing_since"] and status.catalog["commits_behind"] == commits
        assert f"not synced yet ({commits} commit(s) to sync); failing since" in status.catalog_line
        assert any(line.startswith("  catalog  ") for line in status.lines())
        (doctor,) = [c for c in TableDoctor(config, timeout=2).checks() if c.subject == "catalog"]
        assert doctor.verdict == Verdict.PROBLEM and hive_metastore.uri in doctor.found

        metrics = Metrics()
        table = MorTable.load(path)
        catalog = CatalogSync(
            config.sync,
            table,
            HiveSync(table, sync_target(config), metastore_connector(config.sync, spark._jvm)),
            metrics.table("synced_orders", 1.0, 10),
        )
        catalog.after_commit()
        assert catalog_metric(metrics, "catalog_commits_behind", "synced_orders") == commits
        assert catalog_metric(metrics, "catalog_sync_failures_total", "synced_orders") == 1
    finally:
        hive_metastore.start()

    catalog.after_commit()  # the next commit's retry finds the metastore back
    assert catalog_metric(metrics, "catalog_commits_behind", "synced_orders") == 0
    catalog.close()

    produce_orders(kafka_bootstrap, topic, later)
    assert app.run([config], spark, once=True).tables[0].error is None
    assert_table_matches(path, first + later)
    status = table_status(config, kafka_timeout=5)
    assert status.catalog["commits_behind"] == 0 and not status.catalog["failing_since"]
    assert "in step with the table" in status.catalog_line
    last = MorTable.load(path).timeline().last_completed_write().timestamp
    client = HiveMetastoreClient(spark._jvm, hive_metastore.uri)
    try:
        for name in ("synced_orders_rt", "synced_orders_ro"):
            registered = client.get_table("lake_job", name)
            assert client.parameter(registered, LAST_COMMIT_TIME_SYNC) == last
            assert client.partition_names("lake_job", name) == set(list_partitions(MorTable.load(path).storage))
    finally:
        client.close()
    (doctor,) = [c for c in TableDoctor(config, timeout=2).checks() if c.subject == "catalog"]
    assert doctor.verdict == Verdict.OK


def test_streamer_sync_registers_a_table_written_before_sync_was_on(spark, tmp_path, hive_metastore):
    events = change_events(500, seed=8)
    table = committed_table(tmp_path / "tables" / "old_orders", events, {"orders": {0: len(events)}})
    mapping = order_config(
        tmp_path,
        "old_orders",
        "127.0.0.1:9",
        "orders",
        sync={"metastore_uris": hive_metastore.uri, "database": "lake_offline", "mode": "off"},
    )
    config_path = write_config(tmp_path / "configs", mapping)

    code, output = run_streamer(["sync", str(config_path)])

    assert code == 0, output
    assert "old_orders: lake_offline.old_orders_rt, lake_offline.old_orders_ro synced to" in output
    last = table.timeline().last_completed_write().timestamp
    client = HiveMetastoreClient(spark._jvm, hive_metastore.uri)
    try:
        for name in ("old_orders_rt", "old_orders_ro"):
            assert client.parameter(client.get_table("lake_offline", name), LAST_COMMIT_TIME_SYNC) == last
            assert client.partition_names("lake_offline", name) == set(list_partitions(table.storage))
    finally:
        client.close()
    assert "in step with the table" in table_status(config_from_mapping(mapping), kafka_timeout=1).catalog_line
