"""`streamer backfill CONFIG --from PATH|SQL` and `streamer delete CONFIG --where SQL`: writes
beside the stream (`streamer.backfill`), each a Spark job of its own."""

from __future__ import annotations

import argparse
import sys


def add_write_commands(commands) -> None:
    backfill = commands.add_parser(
        "backfill",
        help="upsert a Parquet or JSON dataset, or a Spark SQL query, into a config's table as one commit",
        description="Upsert the rows of a dataset (a Parquet or JSON path) or of a Spark SQL query into the "
        "table of CONFIG, as one deltacommit. With table.concurrency: optimistic_concurrency_control it runs "
        "while the table's job streams into it; a conflict with the job's commits is written again.",
    )
    backfill.add_argument("config", metavar="CONFIG", help="the table's YAML config")
    backfill.add_argument(
        "--from", dest="source", required=True, metavar="PATH|SQL", help="a dataset's path, or a query"
    )
    backfill.add_argument("--format", choices=["parquet", "json"], help="the dataset's format (default: by its name)")
    delete = commands.add_parser(
        "delete",
        help="delete the rows of a config's table that a Spark SQL condition matches, as one commit",
        description="Delete the rows of the table of CONFIG that WHERE matches (a Spark SQL condition over its "
        "columns, e.g. customer = 'c-42'), as one deltacommit, beside the job as backfill does.",
    )
    delete.add_argument("config", metavar="CONFIG", help="the table's YAML config")
    delete.add_argument("--where", required=True, metavar="SQL", help="which rows to delete")
    for parser in (backfill, delete):
        parser.add_argument("--master", help="Spark master when not launched by spark-submit (default local[*])")
        parser.add_argument(
            "--conf", action="append", default=[], type=_setting, metavar="KEY=VALUE", help="a Spark setting"
        )


def write_command(args: argparse.Namespace) -> int:
    from streamer.app import configure_logging, spark_session, stop_spark
    from streamer.backfill import backfill, delete_where
    from streamer.config.loading import load_config
    from streamer.errors import ConfigError
    from table import TableError

    configure_logging("WARNING")
    try:
        config = load_config(args.config)
        conf = dict(args.conf)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    spark = spark_session(args.master, conf)
    try:
        if args.command == "backfill":
            result = backfill(spark, config, args.source, args.format)
        else:
            result = delete_where(spark, config, args.where)
    except (TableError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        stop_spark(spark)
    print(result.line(config.table.name, args.command))
    return 0


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expects KEY=VALUE, got {text!r}")
    return key, value
