"""The `streamer` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamer", description="Stream Kafka topics into Hudi merge-on-read tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(commands.add_parser(
        "run", help="stream the tables of a config file or directory into their tables",
        description="Run one streaming query per table config until stopped (SIGTERM/SIGINT stop it "
                    "cleanly), or with --once until what the topics hold now is in the tables."))
    commands.add_parser("demo", help="embedded broker, sample order changes, a streaming upsert and a report")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_command(args)
    if args.command == "demo":
        from streamer.demo import main as demo

        return demo()
    return 2


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG_OR_DIR", help="a table's YAML config, or a directory of them")
    parser.add_argument("--once", action="store_true",
                        help="process what is available now, run due services, and exit")
    parser.add_argument("--master", help="Spark master when not launched by spark-submit (default local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting; repeatable")


def run_command(args: argparse.Namespace) -> int:
    from streamer.config import ConfigError, load_configs

    from streamer.app import configure_logging

    configure_logging()
    try:
        configs = load_configs(args.config)
        conf = dict(_key_value(c) for c in args.conf)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from streamer import app
    from streamer.job import StartupError

    spark = app.spark_session(args.master, conf)
    try:
        result = app.run(configs, spark, once=args.once)
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for table in result.tables:
        status = f"FAILED: {table.error}" if table.error else "ok"
        print(f"{table.name}: {table.batches} batches, {table.records:,} records, {table.bad:,} bad, "
              f"last commit {table.last_instant or '-'}: {status}")
    return result.exit_code


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--conf expects KEY=VALUE, got {text!r}")
    return key, value


if __name__ == "__main__":
    sys.exit(main())
