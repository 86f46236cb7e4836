"""Scenario `reader`: the Kafka reader alone (consume, no decode), on one core.

Messages of `VALUE_BYTES`-byte values (with `KEY_BYTES`-byte keys, uncompressed; `--reader-value-bytes`
for another size, such as the 1,900 bytes of a Debezium event with Connect's schemas) are produced
to a topic of one partition and to one of eight before anything is timed. Then each path reads
every message of a topic in a fresh process of its own, pinned to one core (`CORE`) with every
thread it starts (librdkafka's too), while the broker's JVM is pinned to the other cores:

- `native`: `streamer.kafka.reader.read_partition` with the source option `reader: native`, the
  extension built from `native/` (librdkafka's messages straight into Arrow buffers), partition
  after partition, as a task of the job reads its ranges (`read_ranges`);
- `python`: the same with `reader: python` (confluent-kafka's consumer, a chunk of messages at a
  time turned into Arrow arrays), the previous path;
- `confluent-kafka`: confluent-kafka's consume loop with the same librdkafka settings, every
  partition assigned at once, each message counted and nothing else (no Arrow): what a Python
  consumer of confluent-kafka reads at most, the `kafka-consume` ceiling of `ingest`.

The paths take turns, `REPEATS` times; a path's figure is its median run. CPU seconds are the
reading process's (every thread, from `getrusage`), split into the thread that calls the reader
and librdkafka's threads (`rdk:*`, from `/proc/self/task`); the broker's are its JVM's over the
same run. The issue's target: the native reader reads at least 1,000,000 messages/s of
`VALUE_BYTES`-byte values.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench import broker
from bench.measure import REPO, PathResult
from bench.report import Check, Section
from bench.workload import W1

VALUE_BYTES = 200
KEY_BYTES = 16
#: Messages per topic for W1's size: 5M at the full size (1M rows), 500,000 with `--quick`.
MESSAGES_PER_ROW = 5
PARTITION_COUNTS = (1, 8)
PATHS = ("native", "python", "confluent-kafka")
REPEATS = 3
CORE = 0
TARGET = 1_000_000
TIMEOUT_SECONDS = 900

LABELS = {
    "native": "native reader (read_partition)",
    "python": "python reader (read_partition)",
    "confluent-kafka": "confluent-kafka consume loop",
}


def notes(value_bytes: int) -> list[str]:
    return [
        f"each topic holds the same messages: {value_bytes}-byte values with {KEY_BYTES}-byte keys, no "
        "compression, produced before anything is timed (so the broker serves them from the page cache).",
        f"each read runs in a fresh process pinned to core {CORE} with all its threads (librdkafka's fetch "
        "threads included), the broker's JVM pinned to the other cores; seconds are the read's wall time from "
        "the first call to the last message (the consumer's creation and connection included).",
        "native and python: streamer.kafka.reader.read_partition with the source option reader (and "
        "includeHeaders false, as the job reads), the partitions of a topic one after the other as a task "
        "reads its ranges; records come out as Arrow record batches (key, value, topic, partition, offset, "
        "timestamp). confluent-kafka: Consumer.consume(10,000) with the same librdkafka settings, every "
        "partition assigned at once, each message counted and nothing else (the kafka-consume ceiling of "
        "ingest).",
        f"the paths take turns, {REPEATS} rounds; records/s is the median run's, 'p50 batch s' the median run's seconds.",
    ]


def scenario(w: W1, work: Path, messages: int | None = None, value_bytes: int = VALUE_BYTES) -> Section:
    """Every path over a topic of each partition count; `messages` per topic (default
    `MESSAGES_PER_ROW` times W1's initial rows) of `value_bytes` each."""
    messages = messages or MESSAGES_PER_ROW * w.initial_rows
    work.mkdir(parents=True)
    runs: dict[tuple[str, int], list[dict]] = {(path, count): [] for count in PARTITION_COUNTS for path in PATHS}
    details: dict = {"messages": messages, "value_bytes": value_bytes, "key_bytes": KEY_BYTES, "core": CORE}
    with broker.kafka(work) as bootstrap:
        ends = {}
        for count in PARTITION_COUNTS:
            ends[count] = produce(bootstrap, _topic(count), count, messages, value_bytes)
        details["produced"] = {count: sum(e) for count, e in ends.items()}
        with _broker_elsewhere() as jvm:
            details["broker_pinned"] = jvm is not None
            for round_ in range(REPEATS):
                for count in PARTITION_COUNTS:
                    for path in PATHS:
                        run = measure(path, bootstrap, _topic(count), ends[count], work / f"{path}-p{count}", jvm)
                        print(
                            f"  round {round_ + 1}: {path}, {count} partition(s): {run['messages']:,} in "
                            f"{run['seconds']:.2f}s, {run['messages'] / run['seconds']:,.0f} msg/s, "
                            f"CPU {run['cpu_seconds']:.2f}s",
                            flush=True,
                        )
                        runs[(path, count)].append(run)
    results = []
    for count in PARTITION_COUNTS:
        for path in PATHS:
            done = runs[(path, count)]
            median = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
            results.append(
                PathResult(
                    _name(path, count),
                    f"{LABELS[path]}, {count} partition{'s' if count > 1 else ''}",
                    median["messages"],
                    median["seconds"],
                    [r["seconds"] for r in done],
                    details={"runs": done, "median": median},
                )
            )
    section = Section(
        f"The Kafka reader alone on one core: {messages:,} messages of {value_bytes} bytes per topic, "
        f"read without decoding",
        _name("native", PARTITION_COUNTS[0]),
        results,
        notes(value_bytes),
        details,
    )
    section.tables = [cpu_table(section)]
    section.checks = targets(section) if value_bytes == VALUE_BYTES else []  # the target's size only
    return section


def _name(path: str, count: int) -> str:
    return f"{path}-p{count}"


def _topic(count: int) -> str:
    return f"reader-p{count}"


def targets(section: Section) -> list[Check]:
    checks = []
    for count in PARTITION_COUNTS:
        rate = section.result(_name("native", count)).records_per_second
        checks.append(
            Check(
                f"native reader, {count} partition{'s' if count > 1 else ''}",
                f"{rate:,.0f} msg/s",
                f">= {TARGET:,}",
                rate >= TARGET,
            )
        )
    return checks


def cpu_table(section: Section) -> str:
    """Each path's median run: throughput, and where its CPU went."""
    header = (
        f"{'path':<34}  {'parts':>5}  {'msg/s':>10}  {'best msg/s':>10}  {'MB/s':>6}  {'CPU s':>6}  "
        f"{'caller s':>8}  {'rdk s':>6}  {'CPU µs/msg':>10}  {'broker s':>8}  {'x python':>8}"
    )
    lines = [
        "median run of each path (CPU s: the reading process's, all threads; caller: the thread that calls the "
        "reader; rdk: librdkafka's threads; broker: its JVM's CPU over the same run)",
        header,
        "-" * len(header),
    ]
    message_bytes = section.details["value_bytes"] + KEY_BYTES
    for count in PARTITION_COUNTS:
        python = section.result(_name("python", count)).records_per_second
        for path in PATHS:
            r = section.result(_name(path, count))
            m = r.details["median"]
            best = max(run["messages"] / run["seconds"] for run in r.details["runs"])
            lines.append(
                f"{LABELS[path]:<34}  {count:>5}  {r.records_per_second:>10,.0f}  {best:>10,.0f}  "
                f"{r.records_per_second * message_bytes / 1e6:>6,.0f}  {m['cpu_seconds']:>6.2f}  "
                f"{m['threads'].get('caller', 0):>8.2f}  {m['threads'].get('librdkafka', 0):>6.2f}  "
                f"{m['cpu_seconds'] / m['messages'] * 1e6:>10.2f}  "
                f"{_num(m.get('broker_cpu_seconds')):>8}  {r.records_per_second / python:>8.2f}"
            )
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# -- the topics -----------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, messages: int, value_bytes: int) -> list[int]:
    """`messages` keyed messages of `value_bytes` into a new topic of `partitions`, round robin;
    returns each partition's end offset."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from streamer.sandbox.topics import create_topic

    create_topic(bootstrap, topic, partitions=partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": 1,
        }
    )
    failed: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failed.append(error)

    filler = b"x" * value_bytes
    started = time.monotonic()
    for i in range(messages):
        key = b"order-%010d" % i
        value = (b'{"order_id":"%s","n":%d,"pad":"' % (key, i) + filler)[: value_bytes - 2] + b'"}'
        while True:
            try:
                producer.produce(topic, value, key, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let the client send
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"{left} messages to {topic} not sent, {len(failed)} failed: {failed[:3]}")
    print(f"  produced {messages:,} messages to {topic} in {time.monotonic() - started:.1f}s", flush=True)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reader-ends"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


# -- one read, in a process of its own --------------------------------------------------------------


def measure(path: str, bootstrap: str, topic: str, ends: list[int], work: Path, jvm: psutil.Process | None) -> dict:
    """One read of `topic` by `path` in a fresh process pinned to `CORE`; its numbers, and the
    broker's CPU seconds meanwhile."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"run-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "bench.reader", path, bootstrap, topic, ",".join(map(str, ends)), str(out)]
    if shutil.which("taskset") and CORE in os.sched_getaffinity(0):
        argv = ["taskset", "-c", str(CORE), *argv]  # pinned from its start, every thread
    before = _cpu(jvm)
    load_average = os.getloadavg()  # the machine is shared: what else ran meanwhile
    done = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    after = _cpu(jvm)
    if done.returncode != 0:
        raise RuntimeError(f"reading {topic} with {path} exited {done.returncode}:\n{done.stderr[-3000:]}")
    run = json.loads(out.read_text())
    run["broker_cpu_seconds"] = None if before is None or after is None else after - before
    run["load_average"] = [load_average, os.getloadavg()]  # 1, 5 and 15 minutes, at its start and end
    return run


def _cpu(process: psutil.Process | None) -> float | None:
    if process is None:
        return None
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


@contextlib.contextmanager
def _broker_elsewhere():
    """The broker's JVM (when this process started it) pinned, every thread, to the cores but
    `CORE`, for the block; yields it, or None when there is no such JVM or only one core."""
    cores = os.sched_getaffinity(0)
    others = cores - {CORE}
    jvm = next((p for p in psutil.Process().children(recursive=True) if _is_java(p)), None)
    if jvm is None or not others or CORE not in cores:
        yield jvm
        return
    _pin(jvm.pid, others)
    try:
        yield jvm
    finally:
        _pin(jvm.pid, cores)


def _is_java(process: psutil.Process) -> bool:
    try:
        return process.name() == "java"
    except psutil.Error:
        return False


def _pin(pid: int, cores: set[int]) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cores)


def _thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds of each live thread of this process, by thread id, with its name."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return found


def read(path: str, bootstrap: str, topic: str, ends: list[int]) -> dict:
    """Read every message of `topic` (its partitions end at `ends`) by `path`; time and CPU."""
    from streamer.kafka.options import SourceOptions
    from streamer.kafka.reader import read_partition

    if path == "native":
        import mor_streamer_native  # noqa: F401  (imported before the clock starts, as a worker has it)
    expected = sum(ends)
    threads_before = _thread_cpu()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    if path == "confluent-kafka":
        messages, consumer = _consume(bootstrap, topic, ends)
    else:
        opts = SourceOptions.parse(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "reader": path, "includeHeaders": "false"}
        )
        messages, consumer = 0, None
        for partition, end in enumerate(ends):
            for batch in read_partition(opts, topic, partition, 0, end):
                messages += batch.num_rows
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    threads = {"caller": 0.0, "librdkafka": 0.0, "other": 0.0}
    for tid, (name, cpu) in _thread_cpu().items():  # the consumers are still open: their threads live
        role = "caller" if tid == os.getpid() else "librdkafka" if name.startswith("rdk:") else "other"
        threads[role] += cpu - threads_before.get(tid, (name, 0.0))[1]
    if consumer is not None:
        consumer.close()
    if messages != expected:
        raise RuntimeError(f"read {messages:,} messages of {topic}, expected {expected:,}")
    return {
        "path": path,
        "topic": topic,
        "partitions": len(ends),
        "messages": messages,
        "seconds": seconds,
        "cpu_seconds": (usage.ru_utime + usage.ru_stime) - (usage_before.ru_utime + usage_before.ru_stime),
        "user_seconds": usage.ru_utime - usage_before.ru_utime,
        "system_seconds": usage.ru_stime - usage_before.ru_stime,
        "threads": threads,
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def _consume(bootstrap: str, topic: str, ends: list[int]):
    """confluent-kafka's consume loop over every partition at once, with the readers' settings."""
    from confluent_kafka import Consumer, TopicPartition

    from streamer.kafka.options import SourceOptions

    opts = SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})  # the readers' settings
    consumer = Consumer(opts.consumer_config())
    consumer.assign([TopicPartition(topic, p, 0) for p in range(len(ends))])
    expected, messages = sum(ends), 0
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while messages < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {messages:,} of {expected:,} messages in {TIMEOUT_SECONDS}s")
        for message in consumer.consume(10_000, timeout=0.1):
            if message.error() is None:
                messages += 1
    return messages, consumer


def main(argv: list[str]) -> None:
    """`python -m bench.reader PATH BOOTSTRAP TOPIC END,END,... RESULT.json`, pinned to `CORE`."""
    path, bootstrap, topic, ends, out = argv
    if CORE in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {CORE})  # before any thread starts: they all inherit it
    result = read(path, bootstrap, topic, [int(e) for e in ends.split(",")])
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
