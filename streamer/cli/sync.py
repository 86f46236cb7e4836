"""`streamer sync CONFIG`: register or repair each configured table's catalog entries offline.

For tables written before `sync:` was on, for a catalog that lost them, or for one registered by
hand: both tables get the table's columns, Hudi's formats and properties, and the table's
partitions (those on storage less those the timeline dropped; registered ones not among them are
dropped). It needs no writer lease, so it may run
while the job streams. The client is the job's: Hive's, in a local Spark driver's JVM, with the
same `--conf` settings and `hive-site.xml` a `streamer run` would have.
"""

from __future__ import annotations

import argparse
import sys

from streamer.errors import InvalidArgumentError


def add_sync_command(commands) -> None:
    sync = commands.add_parser(
        "sync",
        help="register or repair the tables' Hive Metastore entries (_rt, _ro) now",
        description="For each config with a sync: section, register the table in its metastore as "
        "Hudi's HiveSyncTool does, or repair its registration: columns, formats, properties "
        "and the partitions on storage. Exit status 1 when a sync failed, 2 for a bad config.",
    )
    sync.add_argument("config", metavar="CONFIG_OR_DIR")
    sync.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (spark.hadoop.hive.metastore.*); repeatable",
    )


def sync_command(args: argparse.Namespace) -> int:
    from streamer.app import configure_logging, spark_session, stop_spark
    from streamer.catalog import CatalogSync, metastore_connector, sync_target
    from streamer.config.loading import load_configs
    from streamer.errors import ConfigError
    from table import HiveSync, MorTable, TableNotFoundError, UnsupportedTableVersionError

    configure_logging("WARNING")
    try:
        configs = [(c, c.sync) for c in load_configs(args.config) if c.sync is not None]
        conf = dict(_key_value(c) for c in args.conf)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not configs:
        print(f"error: no config in {args.config} has a sync: section", file=sys.stderr)
        return 2
    failed = False
    tables = []  # each table read before Spark starts: one it cannot read costs no Spark session
    for config, sync in configs:
        try:
            tables.append((config, sync, MorTable.load(config.table.path, config.table.storage_options)))
        except (TableNotFoundError, UnsupportedTableVersionError) as e:
            print(f"{config.table.name}: {e}")
            failed = True
    if not tables:
        return 1
    spark = spark_session("local[1]", conf)
    try:
        jvm, hadoop_conf = spark._jvm, spark._jsc.hadoopConfiguration()
        for config, sync, table in tables:
            hive = HiveSync(table, sync_target(config), metastore_connector(sync, jvm, hadoop_conf))
            catalog = CatalogSync(sync.model_copy(update={"mode": "inline"}), table, hive)
            try:
                result = catalog.sync_now(repair=True)
            finally:
                catalog.close()
            if result is None:
                print(f"{config.table.name}: FAILED: {catalog.state.last_error}")
                failed = True
            else:
                print(f"{config.table.name}: {result}")
    finally:
        stop_spark(spark)
    return 1 if failed else 0


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidArgumentError(f"--conf expects KEY=VALUE, got {text!r}")
    return key, value
