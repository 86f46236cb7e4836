"""`make demo`: a local Apache Kafka, a stream of order changes, `streamer run configs/ --once`, a report.

Runs on a machine with Java and Maven: it starts the local broker (`streamer kafka start`: Apache
Kafka from its Maven Central jars), or uses the one running already, recreates the `orders` topic
there and produces order change events (inserts, updates, deletes, late updates, and a few
malformed messages) to it, runs the ingestion job over the demo table config in `configs/`, and
prints what landed, checked with hudi-rs. The broker keeps running: the demo ends with what to
try next on it, commands to paste.

`DEMO_EVENTS` (30000), `DEMO_OUTPUT` (`demo-output`: tables and checkpoints), `DEMO_CONFIGS`
(`configs/`) and `DEMO_KAFKA_DIR` (the local broker's directory) change what it does.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pyarrow.compute as pc

from streamer.errors import BrokerStartError, MavenFetchError
from streamer.sandbox import local_kafka
from streamer.sandbox.change_events import MALFORMED, as_kafka_records, change_events
from streamer.sandbox.topics import create_topic, delete_topic, produce

TOPIC = "orders"
DEMO_CONFIGS = Path(os.environ.get("DEMO_CONFIGS", Path(__file__).resolve().parents[2] / "configs"))


def main() -> int:
    from streamer import app
    from streamer.app import configure_logging
    from streamer.preflight import load_checked

    out = Path(os.environ.get("DEMO_OUTPUT", "demo-output")).resolve()
    kafka_dir = Path(os.environ.get("DEMO_KAFKA_DIR") or local_kafka.default_dir())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    os.environ["MOR_STREAMER_DATA"] = str(out)
    events = change_events(int(os.environ.get("DEMO_EVENTS", "30000")))

    print(f"broker   Apache Kafka in {kafka_dir} (its first start fetches the jars with mvn)", flush=True)
    try:
        broker, started = local_kafka.start(kafka_dir)
    except (BrokerStartError, MavenFetchError) as e:
        print(f"error: the demo needs Apache Kafka, which cannot start here: {e}", file=sys.stderr)
        return 1
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap
    print(
        f"broker   Apache Kafka {broker.version} at {broker.bootstrap} (pid {broker.pid}, "
        f"{'started' if started else 'running already'})"
    )
    if delete_topic(broker.bootstrap, TOPIC):
        print(f"topic    '{TOPIC}' deleted, left by an earlier demo")
    create_topic(broker.bootstrap, TOPIC, partitions=3)
    records = as_kafka_records(events)
    at = len(records) // 2
    records[at:at] = [(b"bad", raw, None) for raw in MALFORMED]
    started_at = time.monotonic()
    produce(broker.bootstrap, TOPIC, records)
    print(
        f"produce  {len(records):,} messages to '{TOPIC}' ({len(MALFORMED)} malformed) "
        f"in {time.monotonic() - started_at:.1f}s"
    )
    configure_logging()
    configs = load_checked(DEMO_CONFIGS)
    print(f"run      streamer run {_shown(DEMO_CONFIGS)} --once")
    spark = app.spark_session(conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    started_at = time.monotonic()
    result = app.run(configs, spark, once=True)
    seconds = time.monotonic() - started_at
    app.stop_spark(spark)
    for config, outcome in zip(configs, result.tables):
        report(config, outcome, seconds)
        next_steps(broker, config, events, out, kafka_dir)
    return result.exit_code


def report(config, outcome, seconds: float) -> None:
    import hudi

    from table import MorTable

    table = MorTable.load(config.table.path)
    snapshot = table.snapshot()
    timeline = table.timeline()
    commits = timeline.completed_writes()
    compactions = timeline.completed("commit")
    print()
    print(f"read     {outcome.records:,} records in {outcome.batches} micro-batches, {seconds:.1f}s")
    if outcome.error:
        print(f"FAILED   {outcome.error}")
    print(f"table    {config.table.path}")
    print(
        f"commits  {len(commits) - len(compactions)} deltacommits and {len(compactions)} compaction(s): "
        f"{commits[0].timestamp} .. {commits[-1].timestamp}"
    )
    print("rows by partition:")
    counts = (
        snapshot.group_by("_hoodie_partition_path").aggregate([("order_id", "count")]).sort_by("_hoodie_partition_path")
    )
    for partition, n in zip(counts["_hoodie_partition_path"].to_pylist(), counts["order_id_count"].to_pylist()):
        print(f"  {partition:<18} {n:>7,}")
    print(f"  {'total':<18} {snapshot.num_rows:>7,}")
    top = snapshot.filter(pc.equal(snapshot["status"], "delivered")).sort_by([("amount", "descending")]).slice(0, 5)
    print("sample query: the five largest delivered orders")
    for r in top.select(["order_id", "region", "amount", "updated_at"]).to_pylist():
        print(f"  {r['order_id']}  {r['region']:<8} {r['amount']:>8.2f}  updated_at={r['updated_at']}")
    if MorTable.exists(config.table.quarantine_location):
        bad = MorTable.load(config.table.quarantine_location).snapshot(
            columns=["topic", "partition", "offset", "reason"]
        )
        print(f"quarantine  {bad.num_rows} malformed messages in {config.table.quarantine_location}:")
        for r in bad.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist():
            print(f"  {r['topic']}[{r['partition']}]@{r['offset']}: {r['reason']}")
    batches = hudi.HudiTableBuilder.from_base_uri(config.table.path).build().read()
    theirs = sum(b.num_rows for b in batches)
    verdict = "same row count" if theirs == snapshot.num_rows else "DIFFERENT row count"
    print(f"hudi-rs  reads {theirs:,} rows: {verdict} as our snapshot reader")
    if theirs != snapshot.num_rows:
        raise SystemExit(1)


def next_steps(broker: local_kafka.LocalBroker, config, events: list[dict], out: Path, kafka_dir: Path) -> None:
    """What to try next on the broker that keeps running, as commands to paste."""
    streamer = _streamer_command()
    env = []
    if broker.bootstrap != "127.0.0.1:9092":  # the configs' default
        env.append(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}")
    if out != Path("demo-output").resolve():
        env.append(f"MOR_STREAMER_DATA={shlex.quote(str(out))}")
    prefix = " ".join([*env, ""])
    own_dir = kafka_dir.resolve() != local_kafka.default_dir().resolve()
    dir_flag = f" --dir {shlex.quote(str(kafka_dir))}" if own_dir else ""
    order = dict(events[0], status="delivered", updated_at=max(e["updated_at"] for e in events) + 1000, deleted=False)
    table = _shown(Path(config.table.path))
    configs = _shown(DEMO_CONFIGS)
    print()
    print(f"next     Apache Kafka keeps running at {broker.bootstrap}, its data in {broker.directory}")
    print("  send an order change to it:")
    print(
        f"    echo {shlex.quote(json.dumps(order))} | {streamer} kafka produce {TOPIC} --key-field order_id{dir_flag}"
    )
    print("  take it into the table, and look:")
    print(f"    {prefix}{streamer} run {configs} --once")
    print(
        f'    {streamer} query {table} --sql "SELECT order_id, status, updated_at FROM t '
        f"WHERE order_id = '{order['order_id']}'\""
    )
    print('  a table of your own: README.md, "Your own table"')
    print(f"  stop the broker: {streamer} kafka stop{dir_flag}   (--delete-data also removes its data)")


def _streamer_command() -> str:
    """How to call `streamer` from here: by name when the PATH finds this one."""
    script = Path(sys.executable).parent / "streamer"
    if not script.exists() or shutil.which("streamer") == str(script):
        return "streamer"
    return _shown(script)


def _shown(path: Path) -> str:
    """A path as short as it stays right from the working directory."""
    path = path.resolve()
    try:
        return shlex.quote(str(path.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(path))


if __name__ == "__main__":
    sys.exit(main())
