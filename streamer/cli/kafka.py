"""`streamer kafka start|stop|status|produce`: a real Apache Kafka on this machine for trying
things out (`streamer.sandbox.local_kafka`), and a console producer for any broker."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from streamer.errors import BrokerStartError, MavenFetchError
from streamer.sandbox import local_kafka
from streamer.sandbox.topics import create_topic, partition_count, produce, topic_sizes

DEFAULT_PARTITIONS = 3


def add_kafka_commands(commands) -> None:
    kafka = commands.add_parser(
        "kafka",
        help="a local Apache Kafka for trying things out: start, stop, status, produce",
        description="Run Apache Kafka itself on this machine (one node, from its Maven Central jars: "
        "needs Java 17+ and Maven) for trying things out. It keeps running after the command "
        "returns, and keeps its data in --dir until `stop --delete-data`.",
    )
    actions = kafka.add_subparsers(dest="kafka_command", required=True)
    start = actions.add_parser("start", help="start the local broker (or say where it runs already)")
    start.add_argument(
        "--port",
        type=int,
        metavar="N",
        help="the port of a new broker (default 9092 when free, else any free port; 0 for any)",
    )
    stop = actions.add_parser("stop", help="stop the local broker; its data stays unless --delete-data")
    stop.add_argument("--delete-data", action="store_true", help="also delete the broker's directory")
    status = actions.add_parser("status", help="whether the local broker runs, where, and its topics")
    produce = actions.add_parser(
        "produce",
        help="produce the lines of stdin to a topic, one record per line",
        description="Produce each non-empty line of standard input to TOPIC as one record's value, and "
        "wait until the broker has them all. The topic is created when missing.",
    )
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument(
        "--key-field",
        metavar="NAME",
        help="each line is a JSON object: its NAME field is the record's key (so that the "
        "records of a key go to one partition, in order)",
    )
    produce.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        metavar="N",
        help=f"partitions of a topic created here (default {DEFAULT_PARTITIONS})",
    )
    produce.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="the brokers (default: $KAFKA_BOOTSTRAP_SERVERS, else the local broker)",
    )
    for parser in (start, stop, status, produce):
        parser.add_argument(
            "--dir",
            type=Path,
            default=None,
            metavar="DIR",
            help=f"the local broker's directory (default {local_kafka.default_dir()})",
        )


def kafka_command(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    directory = args.dir or local_kafka.default_dir()
    try:
        if args.kafka_command == "start":
            return _start(directory, args.port)
        if args.kafka_command == "stop":
            return _stop(directory, args.delete_data)
        if args.kafka_command == "status":
            return _status(directory)
        return _produce(directory, args)
    except (BrokerStartError, MavenFetchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KafkaException as e:  # the brokers did not answer, or refused
        print(f"error: {e.args[0].str()}", file=sys.stderr)
        return 4
    except RuntimeError as e:  # records the brokers did not take
        print(f"error: {e}", file=sys.stderr)
        return 4


def _start(directory: Path, port: int | None) -> int:
    print(f"starting Apache Kafka in {directory} (the first start fetches its jars with mvn)", file=sys.stderr)
    broker, started = local_kafka.start(directory, port)
    print(
        f"Apache Kafka {broker.version} {'started' if started else 'runs already'} at {broker.bootstrap} "
        f"(pid {broker.pid})"
    )
    print(f"  data and log in {broker.directory}")
    print(f"  use it:   export KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}")
    print(f"  stop it:  streamer kafka stop{_dir_flag(directory)}   (add --delete-data to remove its data)")
    return 0


def _stop(directory: Path, delete_data: bool) -> int:
    had_data = directory.exists()
    broker = local_kafka.stop(directory, delete_data)
    state = (
        f"stopped Apache Kafka at {broker.bootstrap} (pid {broker.pid})" if broker else "no local broker was running"
    )
    if not had_data:
        kept = f"no data in {directory.resolve()}"
    else:
        kept = f"deleted {directory.resolve()}" if delete_data else f"its data stays in {directory.resolve()}"
    print(f"{state}; {kept}")
    return 0


def _status(directory: Path) -> int:
    broker = local_kafka.running(directory.resolve())
    if broker is None:
        print(
            f"no local broker runs (directory {directory}); start one with `streamer kafka start{_dir_flag(directory)}`"
        )
        return 3
    if not local_kafka.answers(broker):
        print(f"Apache Kafka pid {broker.pid} runs but does not answer at {broker.bootstrap}; see {broker.log_path}")
        return 3
    print(f"Apache Kafka {broker.version} at {broker.bootstrap} (pid {broker.pid}), data in {broker.directory}")
    sizes = topic_sizes(broker.bootstrap)
    for topic, (partitions, records) in sorted(sizes.items()):
        print(f"  {topic}: {partitions} partition(s), {records:,} record(s)")
    if not sizes:
        print("  no topics yet")
    return 0


def _produce(directory: Path, args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if not bootstrap:
        broker = local_kafka.running(directory.resolve())
        if broker is None:
            print(
                "error: no brokers: give --bootstrap-servers, set KAFKA_BOOTSTRAP_SERVERS, or start the local "
                "broker with `streamer kafka start`",
                file=sys.stderr,
            )
            return 2
        bootstrap = broker.bootstrap
    records = []
    for number, line in enumerate(sys.stdin, 1):
        value = line.rstrip("\r\n")
        if not value.strip():
            continue
        key = None
        if args.key_field:
            try:
                key = json.loads(value)[args.key_field]
            except (ValueError, KeyError, TypeError):
                print(
                    f"error: line {number}: not a JSON object with a field {args.key_field!r}: {value[:80]}",
                    file=sys.stderr,
                )
                return 2
            key = (key if isinstance(key, str) else json.dumps(key)).encode()
        records.append((key, value.encode(), None))
    if partition_count(bootstrap, args.topic) is None:
        create_topic(bootstrap, args.topic, partitions=args.partitions, exist_ok=True)
    produce(bootstrap, args.topic, records)
    print(f"produced {len(records):,} record(s) to {args.topic} at {bootstrap}")
    return 0


def _dir_flag(directory: Path) -> str:
    return "" if directory.resolve() == local_kafka.default_dir().resolve() else f" --dir {directory}"
