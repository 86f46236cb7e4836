"""The Kafka stream source, format "kafka-arrow" (`streamer.kafka.datasource` and the options, planning and
reader modules it uses).

Unit tests check the pure parts (rate limiting, range splitting, options, redaction); the e2e
tests run a real broker process (shared `kafka_bootstrap` fixture) and a real local[2] Spark
session (shared `spark` fixture) and read through Structured Streaming.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from streamer.config.choices import SourceFormat
from streamer.config.secrets import redact_text
from streamer.errors import KafkaDataLossError, KafkaSourceError, KafkaSourceTimeoutError
from streamer.kafka import reader as kafka_reader
from streamer.kafka.datasource import KafkaArrowDataSource, KafkaStreamReader, ReadAllAvailable, register_kafka_source
from streamer.kafka.options import PREFETCH_KBYTES, SourceOptions, new_client
from streamer.kafka.planning import offsets_from_json, offsets_to_json, rate_limit, split_ranges
from streamer.kafka.reader import read_partition, read_ranges
from streamer.kafka.schema import ARROW_SCHEMA, KAFKA_SCHEMA, OFFSET_RANGES_SCHEMA
from tests.support import kafka_broker

#: Both readers of the source (`streamer.kafka.consumer`): the tests of what a range read must
#: handle (gaps, data loss, timeouts, consumer reuse) run on each.
READERS = pytest.mark.parametrize("reader", ["native", "python"])

# ----------------------------------------------------------------------------------------------
# unit
# ----------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_source_registers_under_the_name_the_config_offers():
    assert KafkaArrowDataSource.name() == SourceFormat.KAFKA_ARROW.value


@pytest.mark.unit
def test_rate_limit_is_proportional_to_lag_like_spark():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    until = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 5}
    end = rate_limit(110, start, until, lambda tps: {})
    # lags 1000 and 100 (total 1100): 100 and 10 records; the partition without lag stays put
    assert end == {("t", 0): 100, ("t", 1): 110, ("t", 2): 5}
    # a tiny share is rounded up so no partition with lag starves
    end = rate_limit(10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 10_000, ("t", 1): 1}, lambda tps: {})
    assert end == {("t", 0): 9, ("t", 1): 1}
    # never past the latest offset; no limit effect when everything fits
    assert rate_limit(10**9, start, until, lambda tps: {}) == until
    # new partitions (absent from start) are measured from their earliest offset
    asked = []

    def earliest(tps):
        asked.extend(tps)
        return dict.fromkeys(tps, 50)

    end = rate_limit(20, {("t", 0): 0}, {("t", 0): 100, ("u", 0): 150}, earliest)
    assert asked == [("u", 0)]
    assert end == {("t", 0): 10, ("u", 0): 60}
    assert sum(end[tp] - b for tp, b in {("t", 0): 0, ("u", 0): 50}.items()) <= 20


@pytest.mark.unit
def test_split_ranges_like_spark_offset_range_calculator():
    r = [(("t", 0), 0, 100), (("t", 1), 10, 10), (("t", 2), 0, 10)]
    assert split_ranges(r, None, None) == [(("t", 0), 0, 100), (("t", 2), 0, 10)]
    out = split_ranges(r, 4, None)
    assert [x for x in out if x[0] == ("t", 2)] == [(("t", 2), 0, 10)]
    t0 = [x for x in out if x[0] == ("t", 0)]
    assert len(t0) == 4 and t0[0][1] == 0 and t0[-1][2] == 100
    assert all(a[2] == b[1] for a, b in itertools.pairwise(t0))
    out = split_ranges(r, None, 30)
    assert [(s, e) for tp, s, e in out if tp == ("t", 0)] == [(0, 25), (25, 50), (50, 75), (75, 100)]


@pytest.mark.unit
def test_offsets_json_is_spark_shaped_and_deterministic():
    m = {("b", 10): 5, ("a", 2): 7, ("b", 9): 1}
    j = offsets_to_json(m)
    assert json.dumps(j) == '{"a": {"2": 7}, "b": {"9": 1, "10": 5}}'
    assert offsets_from_json(j) == m
    assert offsets_from_json(json.dumps(j)) == m


@pytest.mark.unit
def test_options_validation():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a, b,a"}
    o = SourceOptions.parse(base)
    assert o.subscribe == ["a", "b"] and o.fail_on_data_loss and o.starting_offsets == "latest"
    assert o.isolation_level == "read_uncommitted"
    with pytest.raises(KafkaSourceError, match=r"kafka\.bootstrap\.servers"):
        SourceOptions.parse({"subscribe": "a"})
    with pytest.raises(KafkaSourceError, match="exactly one"):
        SourceOptions.parse({**base, "subscribePattern": "a.*"})
    with pytest.raises(KafkaSourceError, match="startingOffsets"):
        SourceOptions.parse({**base, "startingOffsets": "somewhere"})
    with pytest.raises(KafkaSourceError, match="not subscribed"):
        SourceOptions.parse({**base, "startingOffsets": '{"c": {"0": 1}}'})
    with pytest.raises(KafkaSourceError, match="maxOffsetsPerTrigger"):
        SourceOptions.parse({**base, "maxOffsetsPerTrigger": "0"})
    with pytest.raises(KafkaSourceError, match=r"auto\.offset\.reset"):
        SourceOptions.parse({**base, "kafka.auto.offset.reset": "earliest"})
    o = SourceOptions.parse(
        {
            **base,
            "startingOffsets": '{"a": {"0": 23, "1": -2}, "b": {"0": -1}}',
            "MaxOffsetsPerTrigger": "10",
            "failOnDataLoss": "false",
        }
    )
    assert o.starting_offsets == {("a", 0): 23, ("a", 1): -2, ("b", 0): -1}
    assert o.max_offsets_per_trigger == 10 and not o.fail_on_data_loss
    p = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribePattern": "orders-.*"})
    assert p.topic_is_wanted("orders-eu") and not p.topic_is_wanted("xorders-eu")
    assert not p.topic_is_wanted("orders")
    a = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"x": [1, 0]}'})
    assert a.assign == [("x", 0), ("x", 1)]


@pytest.mark.unit
def test_a_range_smaller_than_the_default_prefetch_prefetches_less():
    """Once a worker knows a topic's record size, a range it expects to be smaller than the
    default prefetch gets a consumer that fetches little past its end; an explicit option wins."""
    pool = kafka_reader._ConsumerPool()
    opts = SourceOptions.parse({"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"})
    short = pool.SHORT_RANGE_PREFETCH_KBYTES
    assert pool.prefetch_kbytes("t", 1_000) == PREFETCH_KBYTES  # the record size is not known yet
    pool.saw_records("t", 220.0)
    pool.saw_records("t", 0.0)  # a read of nothing teaches nothing
    assert pool.prefetch_kbytes("t", 50_000) == short  # 11 MB
    assert pool.prefetch_kbytes("t", 100_000) == PREFETCH_KBYTES  # 22 MB
    assert pool.prefetch_kbytes("other", 10) == PREFETCH_KBYTES
    assert opts.consumer_config(short)["queued.max.messages.kbytes"] == short
    fetch = "max.partition.fetch.bytes"
    assert (opts.consumer_config()[fetch], opts.consumer_config(short)[fetch]) == (4 << 20, 1 << 20)
    explicit = SourceOptions.parse(
        {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t", "kafka.queued.max.messages.kbytes": "4096"}
    )
    assert explicit.consumer_config(short)["queued.max.messages.kbytes"] == "4096"
    assert explicit.consumer_config(short)[fetch] == 1 << 20
    fetch_set = SourceOptions.parse(
        {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t", "kafka.fetch.message.max.bytes": "65536"}
    )
    assert (
        fetch not in fetch_set.consumer_config() and fetch_set.consumer_config()["fetch.message.max.bytes"] == "65536"
    )


@pytest.mark.unit
def test_the_consumer_pool_serves_threads_at_once_each_a_consumer_of_its_own(monkeypatch):
    """The driver reads a batch's ranges on several threads: none gets a consumer another holds,
    and consumers gone stale are closed once, however many threads find them."""
    pool = kafka_reader._ConsumerPool()
    monkeypatch.setattr(pool, "IDLE_SECONDS", 0.0)  # every idle consumer is stale at the next acquire
    opts = SourceOptions.parse({"kafka.bootstrap.servers": "localhost:9", "subscribe": "t"})
    held: set[int] = set()
    guard = threading.Lock()

    def borrow(_: int) -> None:
        for _ in range(50):
            consumer = pool.acquire(opts, PREFETCH_KBYTES)
            with guard:
                assert id(consumer) not in held
                held.add(id(consumer))
            with guard:
                held.discard(id(consumer))
            pool.release(opts, consumer, True, PREFETCH_KBYTES)

    with ThreadPoolExecutor(8) as threads:
        list(threads.map(borrow, range(8)))  # a thread's failure is raised here
    assert sum(len(idle) for idle in pool._idle.values()) <= pool.MAX_IDLE


@pytest.mark.unit
def test_secrets_are_translated_and_never_shown():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="pa55-w0rd";'
    opts = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "a",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.key.password": "k3y-pass",
    }
    o = SourceOptions.parse(opts)
    assert o.kafka_params["sasl.username"] == "svc"
    assert o.kafka_params["sasl.password"] == "pa55-w0rd"
    assert "sasl.jaas.config" not in o.kafka_params
    shown = repr(o) + str(o) + repr(KafkaStreamReader(o)) + repr(KafkaArrowDataSource(opts))
    for secret in ("pa55-w0rd", "k3y-pass", "ScramLoginModule"):
        assert secret not in shown
    assert "SASL_SSL" in shown
    assert redact_text("bad value pa55-w0rd for k3y-pass", o.raw_options) == "bad value *** for ***"
    with pytest.raises(KafkaSourceError) as e:  # librdkafka rejects a value: message redacted
        new_client("consumer", SourceOptions.parse({**opts, "kafka.sasl.mechanism": "BOGUS"}))
    assert "BOGUS" in str(e.value)
    for secret in ("pa55-w0rd", "k3y-pass", "ScramLoginModule"):
        assert secret not in str(e.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.unit
@READERS
def test_unreachable_broker_fails_with_clear_timeout(reader):
    o = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": f"127.0.0.1:{_closed_port()}",
            "subscribe": "nowhere",
            "reader": reader,
            "kafkaConsumer.pollTimeoutMs": "1500",
            "kafka.sasl.password": "zz-secret-zz",
        }
    )
    t0 = time.monotonic()
    with pytest.raises(KafkaSourceTimeoutError) as e:
        list(read_partition(o, "nowhere", 0, 0, 10))
    assert time.monotonic() - t0 < 15
    msg = str(e.value)
    assert "nowhere" in msg and "partition 0" in msg and "zz-secret-zz" not in msg


# ----------------------------------------------------------------------------------------------
# e2e: broker + Spark
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kspark(spark):
    register_kafka_source(spark)
    return spark


class Collector:
    """foreachBatch sink keeping every batch's rows (as plain tuples) on the driver."""

    def __init__(self):
        self.batches: list[tuple[int, list[tuple]]] = []

    def __call__(self, df, batch_id):
        rows = df.selectExpr(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "unix_millis(timestamp) AS ts",
            "timestampType",
            "headers",
        ).collect()
        self.batches.append(
            (
                batch_id,
                [
                    (
                        None if r.key is None else bytes(r.key),
                        None if r.value is None else bytes(r.value),
                        r.topic,
                        r.partition,
                        r.offset,
                        r.ts,
                        r.timestampType,
                        None
                        if r.headers is None
                        else [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers],
                    )
                    for r in rows
                ],
            )
        )

    @property
    def rows(self):
        return [r for _, rs in self.batches for r in rs]

    @property
    def sizes(self):
        return [len(rs) for _, rs in self.batches]


def _stream(spark, bootstrap, **options):
    reader = spark.readStream.format("kafka-arrow").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _run_available_now(spark, bootstrap, checkpoint, timeout=120, **options):
    sink = Collector()
    q = (
        _stream(spark, bootstrap, **options)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = q.awaitTermination(timeout)
        assert finished, f"query did not finish within {timeout}s"
    finally:
        q.stop()
    return sink


def _records(topic_partitions: int, n: int, tag: str = "r"):
    """n records over the partitions: varied keys/values/headers/timestamps."""
    base_ts = 1_700_000_000_000
    out = []
    for i in range(n):
        headers = None
        if i % 3 == 1:
            headers = [("h1", f"x{i}".encode()), ("empty", None)]
        elif i % 3 == 2:
            headers = [("only", b"")]
        key = None if i % 7 == 0 else f"{tag}-k{i}".encode()
        value = None if i % 11 == 5 else f'{{"i": {i}, "tag": "{tag}"}}'.encode()
        out.append((key, value, i % topic_partitions, headers, base_ts + i))
    return out


def _expected(topic, records, acks):
    return [(k, v, topic, p, off, ts, 0, h) for (k, v, _p, h, ts), (p, off) in zip(records, acks)]


def _sort(rows):
    return sorted(rows, key=lambda r: (r[2], r[3], r[4]))


@pytest.mark.e2e
def test_reads_every_record_exactly_once_with_all_columns(kspark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3, prefix="all")
    records = _records(3, 300)
    acks = kafka_broker.produce(kafka_bootstrap, topic, records)
    df = _stream(kspark, kafka_bootstrap, subscribe=topic, startingOffsets="earliest")
    assert df.schema == KAFKA_SCHEMA
    assert df.isStreaming
    sink = _run_available_now(kspark, kafka_bootstrap, tmp_path / "ck", subscribe=topic, startingOffsets="earliest")
    assert _sort(sink.rows) == _sort(_expected(topic, records, acks))
    assert len(sink.rows) == 300 and {r[3] for r in sink.rows} == {0, 1, 2}


@pytest.mark.e2e
def test_offset_ranges_read_back_every_record_once_with_the_same_columns(
    kspark, kafka_bootstrap, kafka_topic, tmp_path
):
    topic = kafka_topic(partitions=3, prefix="ranges")
    records = _records(3, 3_000)
    acks = kafka_broker.produce(kafka_bootstrap, topic, records)
    ranges: list[tuple] = []
    batches: list[pa.RecordBatch] = []
    options = {
        "subscribe": topic,
        "startingOffsets": "earliest",
        "offsetRanges": "true",
        "arrowBatchSize": "400",
        "maxOffsetsPerTrigger": "1200",
    }

    def read_all(df, batch_id):
        planned = df.toArrow()
        ranges.extend(zip(*(planned.column(name).to_pylist() for name in OFFSET_RANGES_SCHEMA.names)))
        opts = SourceOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, **options})
        for part in planned.to_batches():
            batches.extend(read_ranges(opts, part))

    df = _stream(kspark, kafka_bootstrap, **options)
    assert df.schema == OFFSET_RANGES_SCHEMA
    q = (
        df.writeStream.foreachBatch(read_all)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    rows = pa.Table.from_batches(batches)
    assert rows.schema == ARROW_SCHEMA
    got = [
        (
            r["key"],
            r["value"],
            r["topic"],
            r["partition"],
            r["offset"],
            int(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
            None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]],
        )
        for r in rows.to_pylist()
    ]
    assert _sort(got) == _sort(_expected(topic, records, acks))
    assert max(b.num_rows for b in batches) <= 400
    # one row per task: the ranges of a partition follow each other, and together cover the topic
    for partition in range(3):
        mine = sorted((a, b) for t, p, a, b in ranges if (t, p) == (topic, partition))
        assert mine[0][0] == 0 and all(b == a2 for (_, b), (a2, _) in itertools.pairwise(mine))
        assert mine[-1][1] == sum(1 for r in got if r[3] == partition)
    assert len(ranges) > 3  # the cap split the topic into several micro-batches


@pytest.mark.e2e
def test_max_offsets_per_trigger_and_restart_from_checkpoint(kspark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3, prefix="rate")
    # skewed partitions: 1200 / 500 / 100 records
    records = [(f"k{i}".encode(), f"v{i}".encode(), 0 if i < 1200 else (1 if i < 1700 else 2)) for i in range(1800)]
    acks = kafka_broker.produce(kafka_bootstrap, topic, records)
    ck = tmp_path / "ck"
    sink = _run_available_now(
        kspark, kafka_bootstrap, ck, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=500
    )
    sizes = [s for s in sink.sizes if s]
    assert len(sizes) >= 4, sink.sizes
    assert max(sizes) <= 500, sink.sizes
    got = [(r[3], r[4]) for r in sink.rows]
    assert len(got) == len(set(got)) == 1800
    assert sorted(got) == sorted(acks)
    # the first batch splits the limit in proportion to each partition's lag, like Spark
    first = list(sink.batches[0][1])
    per_part = {p: sum(1 for r in first if r[3] == p) for p in range(3)}
    assert per_part == {0: 333, 1: 138, 2: 27}, per_part

    # restart with the same checkpoint: only what was produced since is read
    more = [(f"n{i}".encode(), f"w{i}".encode(), i % 3) for i in range(30)]
    acks2 = kafka_broker.produce(kafka_bootstrap, topic, more)
    sink2 = _run_available_now(
        kspark, kafka_bootstrap, ck, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=500
    )
    assert sorted((r[3], r[4]) for r in sink2.rows) == sorted(acks2)
    assert sorted(r[1] for r in sink2.rows) == sorted(v for _, v, _ in more)
    # and a third run with nothing new reads nothing
    sink3 = _run_available_now(kspark, kafka_bootstrap, ck, subscribe=topic, startingOffsets="earliest")
    assert sink3.rows == []


@pytest.mark.e2e
def test_starting_offsets_latest_and_json(kspark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3, prefix="start")
    first = [(f"a{i}".encode(), f"a{i}".encode(), i % 3) for i in range(30)]
    kafka_broker.produce(kafka_bootstrap, topic, first)

    # latest: the query starts at the end; what is produced afterwards is read on restart
    ck = tmp_path / "latest"
    sink = _run_available_now(kspark, kafka_bootstrap, ck, subscribe=topic, startingOffsets="latest")
    assert sink.rows == []
    later = [(f"b{i}".encode(), f"b{i}".encode(), i % 3) for i in range(12)]
    kafka_broker.produce(kafka_bootstrap, topic, later)
    sink = _run_available_now(kspark, kafka_bootstrap, ck, subscribe=topic, startingOffsets="latest")
    assert sorted(r[1] for r in sink.rows) == sorted(v for _, v, _ in later)

    # JSON: partition 0 from offset 5, partition 1 from earliest (-2), partition 2 from latest (-1)
    # (and minPartitions splits the two ranges into several tasks without losing a record)
    start = json.dumps({topic: {"0": 5, "1": -2, "2": -1}})
    sink = _run_available_now(
        kspark, kafka_bootstrap, tmp_path / "json", subscribe=topic, startingOffsets=start, minPartitions=5
    )
    got = sorted((r[3], r[4]) for r in sink.rows)
    assert got == [(0, o) for o in range(5, 14)] + [(1, o) for o in range(14)]


@pytest.mark.e2e
def test_subscribe_pattern_picks_up_new_topics(kspark, kafka_bootstrap, kafka_topic, tmp_path):
    prefix = f"pat{uuid.uuid4().hex[:8]}"
    first = kafka_broker.create_topic(kafka_bootstrap, f"{prefix}-one", partitions=2)
    kafka_broker.produce(kafka_bootstrap, first, [(b"k", f"one{i}".encode(), i % 2) for i in range(10)])
    sink = Collector()
    q = (
        _stream(kspark, kafka_bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:

        def wait_for(n, timeout=60):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                assert q.exception() is None, q.exception()
                if len(sink.rows) >= n:
                    return
                time.sleep(0.2)
            raise AssertionError(f"got {len(sink.rows)} rows, expected {n}")

        wait_for(10)
        # a topic created after the query started, and a non-matching one
        second = kafka_broker.create_topic(kafka_bootstrap, f"{prefix}-two", partitions=3)
        other = kafka_broker.create_topic(kafka_bootstrap, f"x{prefix}-two", partitions=1)
        kafka_broker.produce(kafka_bootstrap, second, [(b"k", f"two{i}".encode(), i % 3) for i in range(9)])
        kafka_broker.produce(kafka_bootstrap, other, [(b"k", b"nope", 0)])
        wait_for(19)
        time.sleep(1.5)  # a few more triggers: nothing else may arrive
    finally:
        q.stop()
    values = sorted(r[1].decode() for r in sink.rows)
    assert values == sorted([f"one{i}" for i in range(10)] + [f"two{i}" for i in range(9)])
    assert {r[2] for r in sink.rows} == {first, second}


@pytest.mark.e2e
def test_offset_past_the_end_is_data_loss(kspark, kafka_bootstrap, kafka_topic, tmp_path):
    """A partition whose end is below the next offset to read (topic recreated, or a bogus
    starting offset) is data loss, as in Spark's Kafka source: fail naming the offsets, or warn
    and go on from the partition's earliest offset."""
    from pyspark.errors import StreamingQueryException

    topic = kafka_topic(partitions=2, prefix="loss")
    kafka_broker.produce(kafka_bootstrap, topic, [(b"k", f"v{i}".encode(), i % 2) for i in range(10)])
    start = json.dumps({topic: {"0": 1000, "1": 0}})
    q = (
        _stream(kspark, kafka_bootstrap, subscribe=topic, startingOffsets=start)
        .writeStream.foreachBatch(Collector())
        .option("checkpointLocation", str(tmp_path / "a"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as e:
        q.awaitTermination(120)
    msg = str(e.value)
    assert "KafkaDataLossError" in msg
    assert f"topic '{topic}' partition 0" in msg and "1000" in msg and "failOnDataLoss" in msg
    assert "the broker holds offsets 0 to 4" in msg

    sink = _run_available_now(
        kspark, kafka_bootstrap, tmp_path / "b", subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert sorted((r[3], r[4]) for r in sink.rows) == [(p, o) for p in (0, 1) for o in range(5)]
    # it went on from partition 0's earliest offset: only new records are read on the next run
    kafka_broker.produce(kafka_bootstrap, topic, [(b"k", b"after", 0)])
    sink = _run_available_now(
        kspark, kafka_bootstrap, tmp_path / "b", subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert [(r[1], r[3], r[4]) for r in sink.rows] == [(b"after", 0, 5)]


@pytest.mark.unit
def test_earliest_check_below_retention_is_data_loss():
    strict = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    with pytest.raises(KafkaDataLossError) as e:
        kafka_reader._start_after_retention(strict, "t", 3, 10, 50, 40)
    assert "topic 't' partition 3" in str(e.value) and "[10, 40)" in str(e.value)
    lenient = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"})
    assert kafka_reader._start_after_retention(lenient, "t", 3, 10, 50, 40) == 40
    assert kafka_reader._start_after_retention(strict, "t", 3, 45, 50, 40) == 45


@pytest.mark.e2e
@READERS
def test_a_range_that_begins_below_the_earliest_offset_is_data_loss_and_the_rest_is_read(
    kafka_bootstrap, kafka_topic, reader
):
    """The reader asks for the partition's earliest offset only when a read does not begin
    where it was asked to: records deleted below it still fail the read naming them, or are
    skipped with the rest read, and a range wholly deleted reads nothing."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = kafka_topic(partitions=1, prefix="deleted")
    kafka_broker.produce(kafka_bootstrap, topic, [(b"k", f"v{i}".encode(), 0) for i in range(20)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 12)])[TopicPartition(topic, 0, 12)].result(30)

    def read(start, end, **options):
        opts = SourceOptions.parse(
            {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic, "reader": reader, **options}
        )
        return [o for b in read_partition(opts, topic, 0, start, end) for o in b.column("offset").to_pylist()]

    with pytest.raises(KafkaDataLossError) as e:
        read(5, 16)
    assert f"Cannot read offsets [5, 12) of topic '{topic}' partition 0: the earliest available offset is 12" in str(
        e.value
    )
    assert read(5, 16, failOnDataLoss="false") == [12, 13, 14, 15]
    assert read(2, 8, failOnDataLoss="false") == []
    assert read(12, 16) == [12, 13, 14, 15]  # from the earliest offset: nothing to ask


@pytest.mark.e2e
@READERS
def test_ranges_read_through_consumers_of_either_prefetch_hold_exactly_their_records(
    kafka_bootstrap, kafka_topic, reader
):
    """A worker's first read of a topic uses the default prefetch; once the record size is
    known, short ranges use consumers of the small one. Either way, and with consumers reused
    from one range to the next, a range reads exactly its records."""
    topic = kafka_topic(partitions=1, prefix="prefetch")
    kafka_broker.produce(kafka_bootstrap, topic, [(None, f"v{i:05d}".encode() * 40, 0) for i in range(3_000)])
    opts = SourceOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic, "reader": reader})
    pool = kafka_reader._CONSUMERS
    expected = [f"v{i:05d}".encode() * 40 for i in range(3_000)]
    assert pool.prefetch_kbytes(topic, 3_000) == PREFETCH_KBYTES  # nothing of the topic read yet
    for start, end in [(0, 3_000), (100, 400), (400, 2_900), (2_900, 3_000), (0, 3_000), (5, 6)]:
        values = [v for b in read_partition(opts, topic, 0, start, end) for v in b.column("value").to_pylist()]
        assert values == expected[start:end]
        assert pool.prefetch_kbytes(topic, 3_000) == pool.SHORT_RANGE_PREFETCH_KBYTES


def _produce_transactions(bootstrap, topic):
    """committed c0..c4, aborted a0..a4, committed d0..d2: offsets have gaps (markers)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    for tag, n, commit in (("c", 5, True), ("a", 5, False), ("d", 3, True)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=f"{tag}{i}".encode(), partition=0)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


@pytest.mark.e2e
@READERS
def test_offset_gaps_never_hang(kspark, kafka_bootstrap, kafka_topic, tmp_path, reader):
    topic = kafka_topic(partitions=1, prefix="gaps")
    _produce_transactions(kafka_bootstrap, topic)
    options = {"kafka.isolation.level": "read_committed", "reader": reader}
    opts = SourceOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic, **options})
    stream_reader = KafkaStreamReader(opts)
    end = stream_reader.latestOffset(offsets_to_json({(topic, 0): 0}), ReadAllAvailable())[topic]["0"]
    stream_reader.stop()
    committed = [f"c{i}".encode() for i in range(5)] + [f"d{i}".encode() for i in range(3)]
    # Ranges that start, end or consist only of control records (and the aborted ones) end
    # promptly, each with exactly the committed records inside it.
    ranges = [(s, s + 1) for s in range(end)] + [(0, end), (s := end // 2, end), (0, s), (s - 1, s + 1)]
    by_offset = {}
    t0 = time.monotonic()
    for s, e in ranges:
        got = [
            (o, v)
            for b in read_partition(opts, topic, 0, s, e)
            for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist())
        ]
        assert all(s <= o < e for o, _ in got), (s, e, got)
        for o, v in got:
            assert by_offset.setdefault(o, v) == v
        if e == end and s == 0:
            assert [v for _, v in got] == committed
    assert time.monotonic() - t0 < 30
    assert [by_offset[o] for o in sorted(by_offset)] == committed

    # through Spark, in batches of at most 3 offsets
    sink = _run_available_now(
        kspark,
        kafka_bootstrap,
        tmp_path / "ck",
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=3,
        **options,
    )
    assert [r[1] for r in sorted(sink.rows, key=lambda r: r[4])] == committed
