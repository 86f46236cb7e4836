"""The `streamer` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from streamer.cli.kafka import add_kafka_commands, kafka_command
from streamer.cli.sync import add_sync_command, sync_command
from streamer.cli.verify import add_verify_command, verify_command
from streamer.cli.writes import add_write_commands, write_command
from streamer.errors import InvalidArgumentError
from table import CleanPolicyKind, CompactionStrategyKind, Concurrency, SplitPoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamer", description="Stream Kafka topics into Hudi merge-on-read tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(
        commands.add_parser(
            "run",
            help="stream the tables of a config file or directory into their tables",
            description="Run the tables of a config file or directory until stopped (SIGTERM/SIGINT stop it "
            "cleanly), or with --once until what the topics hold now is in the tables. Tables that read from "
            "the same brokers share one streaming query; a mirror file's tables share one.",
        )
    )
    commands.add_parser("demo", help="a local Apache Kafka, sample order changes, a streaming upsert and a report")
    add_kafka_commands(commands)
    add_maintenance_commands(commands)
    add_table_commands(commands)
    add_status_commands(commands)
    add_sync_command(commands)
    add_verify_command(commands)
    add_write_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "status":
        return status_command(args)
    if args.command == "doctor":
        return doctor_command(args)
    if args.command in ("table", "query"):
        return table_command(args)
    if args.command == "run":
        return run_command(args)
    if args.command == "sync":
        return sync_command(args)
    if args.command in ("compact", "cluster", "clean", "archive"):
        from streamer.cli.maintenance import run_offline

        return run_offline(args)
    if args.command == "demo":
        from streamer.cli.demo import main as demo

        return demo()
    if args.command == "kafka":
        return kafka_command(args)
    if args.command == "verify":
        return verify_command(args)
    if args.command in ("backfill", "delete"):
        return write_command(args)
    return 2


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG_OR_DIR", help="a table's YAML config, or a directory of them")
    parser.add_argument("--once", action="store_true", help="process what is available now, run due services, and exit")
    parser.add_argument("--master", help="Spark master when not launched by spark-submit (default local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting; repeatable")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG adds where each micro-batch's time went (fetch, decode, route, write, commit)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one JSON object per line (time, level, logger, message), for log shippers",
    )


def add_maintenance_commands(commands) -> None:
    compact = commands.add_parser(
        "compact",
        help="execute pending compaction plans of a table; --schedule plans one first",
        description="Execute the table's pending compaction plans as a separate job. With --schedule, "
        "first plan a new compaction (this needs the table's writer lease: not while a "
        "streaming job writes the table; that job schedules its own).",
    )
    compact.add_argument("table_path", metavar="TABLE_PATH")
    compact.add_argument("--schedule", action="store_true", help="plan a new compaction before executing")
    # Flags left out take the engine's defaults (CompactionStrategy, CleanPolicy, ArchivePolicy).
    compact.add_argument(
        "--strategy",
        choices=[kind.value for kind in CompactionStrategyKind],
        help=f"default {CompactionStrategyKind.LOG_FILE_COUNT.value}",
    )
    compact.add_argument("--min-log-files", type=int)
    compact.add_argument("--max-io-mb", type=int)
    add_cluster_command(commands)
    clean = commands.add_parser(
        "clean",
        help="remove file slices the retained commits no longer need",
        description="Finish pending cleans, then plan and execute a new one. Needs the table's writer lease.",
    )
    clean.add_argument("table_path", metavar="TABLE_PATH")
    clean.add_argument(
        "--policy",
        choices=[kind.value for kind in CleanPolicyKind],
        help=f"default {CleanPolicyKind.KEEP_LATEST_COMMITS.value}",
    )
    clean.add_argument("--retained", type=int)
    archive = commands.add_parser(
        "archive",
        help="move old instants to the archived timeline",
        description="Archive the oldest completed instants. Needs the table's writer lease.",
    )
    archive.add_argument("table_path", metavar="TABLE_PATH")
    archive.add_argument("--min-instants", type=int)
    archive.add_argument("--max-instants", type=int)
    for name in ("compact", "cluster", "clean", "archive"):
        commands.choices[name].add_argument(
            "--concurrency",
            choices=[mode.value for mode in Concurrency],
            default=Concurrency.SINGLE_WRITER.value,
            help="optimistic_concurrency_control: beside a job whose table.concurrency is that too (planning "
            "waits for a moment no write is pending); default single_writer, which needs the writer lease",
        )


def add_cluster_command(commands) -> None:
    cluster = commands.add_parser(
        "cluster",
        help="split, merge and sort buckets: execute pending clustering plans, else plan one and execute it",
        description="Execute the table's pending clustering plans as a separate job; when none is pending, "
        "plan one (bucket splits, merges and sorts) and execute it. Planning needs the table's "
        "writer lease: not while a streaming job writes the table; that job schedules its own. "
        "The policy is that of --config (index.* and services.clustering.*), else the defaults, "
        "with the flags below on top. --rollback removes a pending plan instead (needs the lease too).",
    )
    cluster.add_argument("table_path", metavar="TABLE_PATH")
    cluster.add_argument(
        "--config", metavar="CONFIG", help="the table's YAML config, for its resize and clustering settings"
    )
    cluster.add_argument("--rollback", metavar="INSTANT", help="roll the pending clustering plan at INSTANT back")
    cluster.add_argument(
        "--split-threshold-mb", metavar="MB", type=float, help="split buckets larger than this (default 240)"
    )
    cluster.add_argument(
        "--merge-threshold-mb",
        metavar="MB",
        type=float,
        help="merge adjacent buckets that together stay within this (default 24)",
    )
    cluster.add_argument(
        "--min-buckets",
        metavar="N",
        type=int,
        help="the fewest buckets merges leave a partition with (default: index.min_buckets, "
        "else index.initial_buckets, 4)",
    )
    cluster.add_argument(
        "--max-buckets", metavar="N", type=int, help="the most buckets splits give a partition (default 1024)"
    )
    cluster.add_argument(
        "--split-point",
        choices=[point.value for point in SplitPoint],
        help="cut a split bucket's hash range at its middle (default) or at its records' median hash",
    )
    cluster.add_argument(
        "--sort-columns", metavar="A,B", help="sort each bucket's base file by these columns; '' for none"
    )
    cluster.add_argument(
        "--max-partitions", metavar="N", type=int, help="the most partitions one plan takes buckets from"
    )
    cluster.add_argument(
        "--max-plan-mb", metavar="MB", type=float, help="the most MiB one plan rewrites (default 2048)"
    )


def add_status_commands(commands) -> None:
    status = commands.add_parser(
        "status",
        help="each configured table: last commit, offsets, lag, pending instants, last error",
        description="What each table says, read from its storage, and its lag behind the topics. "
        "Brokers that do not answer in time leave the lag unknown. Exit status: 0 all well, "
        "3 a table has a problem, 4 Kafka could not be reached, 2 a bad config.",
    )
    status.add_argument("config", metavar="CONFIG_OR_DIR")
    status.add_argument("--json", action="store_true", help="one JSON document: a list of table statuses")
    status.add_argument(
        "--kafka-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long the brokers have to answer (default 5)",
    )
    doctor = commands.add_parser(
        "doctor",
        help="check everything a table job needs; one line per check, with the fix",
        description="Check the configs, Java and Spark, the Kafka connector, the brokers and topics, "
        "the schema registry and each table (storage, writer lease, pending instants, "
        "timeline, compaction debt, quarantine). Exit status 1 when any check finds a problem.",
    )
    doctor.add_argument("config", metavar="CONFIG_OR_DIR")
    doctor.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long the brokers and the schema registry have to answer (default 5)",
    )


def add_table_commands(commands) -> None:
    table = commands.add_parser("table", help="what a table looks like: info, timeline, files, buckets, stats, report")
    views = table.add_subparsers(dest="table_command", required=True)
    parsers = {
        name: views.add_parser(name, help=text)
        for name, text in (
            ("info", "properties and current schema"),
            ("timeline", "instants, pending plans first"),
            ("files", "file groups and their latest slice"),
            ("buckets", "consistent-hashing buckets per partition"),
            ("stats", "rows, bytes and files per partition"),
            ("report", "PNG plots of buckets and files over time"),
        )
    }
    parsers["timeline"].add_argument("--limit", type=int, help="only the newest N instants (and pending plans)")
    parsers["timeline"].add_argument("--archived", action="store_true", help="include archived instants")
    parsers["files"].add_argument("--partition", help="one partition path, e.g. region=eu")
    parsers["report"].add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    query = commands.add_parser("query", help="SQL over a table read as view t (local Spark)")
    query.add_argument("--sql", required=True, help='e.g. "SELECT region, count(*) FROM t GROUP BY region"')
    query.add_argument("--limit", type=int, default=50, help="rows printed (default 50)")
    query.add_argument("--as-of", metavar="INSTANT", help="the table as of an instant (end of --incremental-from)")
    reads = query.add_mutually_exclusive_group()
    reads.add_argument("--read-optimized", action="store_true", help="base files only")
    reads.add_argument("--incremental-from", metavar="INSTANT", help="rows changed after INSTANT")
    for parser in (*parsers.values(), query):
        parser.add_argument("table_path", metavar="TABLE_PATH")
        parser.add_argument("--json", action="store_true", help="one JSON document (keys: streamer/cli/describe.py)")


def run_command(args: argparse.Namespace) -> int:
    from streamer.app import configure_logging
    from streamer.errors import ConfigError
    from streamer.preflight import load_checked_all

    configure_logging(args.log_level, args.log_format)
    try:
        conf = dict(_key_value(c) for c in args.conf)
        configs, mirrors = load_checked_all(args.config)
    except ConfigError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(
            f"{len(e.problems)} problem(s) in {args.config}, found before starting Spark; nothing ran", file=sys.stderr
        )
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from streamer import app
    from streamer.errors import StartupError
    from streamer.kafka import connector as kafka_connector
    from table import WriterConflictError

    conf, connector = kafka_connector.with_connector(
        conf, [c.source.format for c in configs], under_spark_submit="PYSPARK_GATEWAY_PORT" in os.environ
    )
    try:
        spark = app.spark_session(args.master, conf)
    except Exception as e:  # Spark's JVM did not start; a connector it could not fetch is the likely cause
        if connector is None:
            raise
        print(f"error: {kafka_connector.unavailable(connector, e)}", file=sys.stderr)
        return 2
    try:
        result = app.run(configs, spark, once=args.once, mirrors=mirrors)
    except (StartupError, WriterConflictError) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    finally:
        app.stop_spark(spark)
    for table in result.tables:
        print(table.line())
    for refusal in result.refused:
        print(refusal)
    return result.exit_code


def status_command(args: argparse.Namespace) -> int:
    import json

    from streamer.cli.status import exit_code, statuses
    from streamer.config.loading import load_all
    from streamer.errors import ConfigError
    from streamer.mirror import mirrored_configs

    try:
        configs, mirrors = load_all(args.config)
        for mirror in mirrors:
            configs += mirrored_configs(mirror, args.kafka_timeout)
        found = statuses(configs, args.kafka_timeout)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([s.to_dict() for s in found], indent=2))
    else:
        for s in found:
            print("\n".join(s.lines()))
    return exit_code(found)


def doctor_command(args: argparse.Namespace) -> int:
    from streamer.cli.doctor import diagnose

    report = diagnose(args.config, args.timeout)
    print("\n".join(report.lines()))
    return report.exit_code


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidArgumentError(f"--conf expects KEY=VALUE, got {text!r}")
    return key, value


def table_command(args: argparse.Namespace) -> int:
    """`streamer table ...` and `streamer query`: print one document; 2 for a bad path or query."""
    from streamer.cli import describe, output
    from table import MorTable, TableNotFoundError

    try:
        table = MorTable.load(args.table_path)
        document, text = _table_document(table, args, describe, output)
    except (TableNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(document.to_dict(), indent=2, default=str) if args.json else text(document))
    return 0


def _table_document(table, args: argparse.Namespace, describe, output):
    if args.command == "query":
        rows = describe.read_rows(table, args.as_of, args.read_optimized, args.incremental_from)
        return describe.query(rows, args.sql, args.limit), output.render_query
    kind = args.table_command
    if kind == "info":
        return describe.table_info(table), output.render_info
    if kind == "timeline":
        return describe.timeline_entries(table, args.limit, args.archived), output.render_timeline
    if kind == "files":
        return describe.file_groups(table, args.partition), output.render_files
    if kind == "buckets":
        return describe.buckets(table), output.render_buckets
    if kind == "stats":
        return describe.table_stats(table), output.render_stats
    from streamer.cli.report import write_report

    return describe.ReportFiles([str(p) for p in write_report(table, Path(args.out))]), output.render_report


if __name__ == "__main__":
    sys.exit(main())
