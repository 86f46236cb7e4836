"""The test harness itself: the broker stores and serves what is produced, its high watermark
covers everything produced, and Spark runs on this venv."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from tests.support import kafka_broker


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0):
    """Every message of `topic` from the beginning, read with a plain confluent-kafka consumer."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"harness-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, at_eof = [], set()
        deadline = time.monotonic() + timeout
        while (len(got) < expected or len(at_eof) < partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_eof.discard(msg.partition())
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
        watermarks = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)
        }
        return got, watermarks
    finally:
        consumer.close()


@pytest.mark.e2e
def test_broker_stores_and_serves_every_record(kafka_bootstrap, kafka_topic):
    partitions, n = 3, 1000
    topic = kafka_topic(partitions=partitions, prefix="harness")
    records = [(f"key-{i:04d}".encode(), f"value-{i:04d}".encode(), None, [("seq", str(i).encode())]) for i in range(n)]
    # A few tombstones and null keys too: the helper and the broker must carry them as they are.
    records[10] = (b"key-0010", None, 1)
    records[11] = (None, b"value-0011-no-key", 2)

    placed = kafka_broker.produce(kafka_bootstrap, topic, records)

    assert len(placed) == n
    sent_by_partition = defaultdict(list)
    for rec, (p, offset) in zip(records, placed):
        sent_by_partition[p].append((offset, rec[0], rec[1], rec[3] if len(rec) > 3 else None))
    assert set(sent_by_partition) == set(range(partitions)), "1,000 keys should reach every partition"
    for p, rows in sent_by_partition.items():
        assert [row[0] for row in rows] == list(range(len(rows))), f"partition {p}: offsets not 0..n-1 in order"
    # The helper placed keyed records as the Java producer would; the explicit ones where told.
    assert placed[10][0] == 1 and placed[11][0] == 2
    for i in (0, 1, 2, 500, 999):
        assert placed[i][0] == kafka_broker.partition_for_key(records[i][0], partitions)

    got, watermarks = _consume_all(kafka_bootstrap, topic, partitions, n)

    assert len(got) == n, f"consumed {len(got)} of {n}"
    got_by_partition = defaultdict(list)
    for p, offset, key, value, headers in got:
        got_by_partition[p].append((offset, key, value, headers))
    for p in range(partitions):
        # every record once, in the order sent
        assert got_by_partition[p] == sent_by_partition[p], f"partition {p} differs"
        # the high watermark covers every record
        assert watermarks[p] == (0, len(sent_by_partition[p])), f"partition {p}: watermarks {watermarks[p]}"


@pytest.mark.e2e
def test_helper_partitions_keys_like_kafka(kafka_bootstrap, kafka_topic):
    """partition_for_key agrees with librdkafka's murmur2 partitioner (the Java default)."""
    from confluent_kafka import Producer

    topic = kafka_topic(partitions=5, prefix="murmur")
    keys = [f"k{i}".encode() for i in range(50)] + [b"", b"\x00\xff" * 7]
    delivered = {}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(
            topic,
            value=b"v",
            key=key,
            on_delivery=lambda err, msg, k=key: delivered.__setitem__(k, (err, msg.partition())),
        )
    assert producer.flush(30) == 0
    for key in keys:
        err, partition = delivered[key]
        assert err is None
        assert partition == kafka_broker.partition_for_key(key, 5), key


@pytest.mark.unit
def test_murmur2_matches_kafka_vectors():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert kafka_broker.murmur2(data) == expected, data


@pytest.mark.spark
def test_spark_session_runs_on_this_interpreter(spark):
    sc = spark.sparkContext
    assert sc.master == "local[2]"
    assert sc.defaultParallelism == 4
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"

    # A small job with a shuffle.
    df = spark.range(0, 1000).selectExpr("id % 7 AS k", "id")
    rows = {r["k"]: r["n"] for r in df.groupBy("k").count().withColumnRenamed("count", "n").collect()}
    assert rows == {k: len(range(k, 1000, 7)) for k in range(7)}

    # Python workers (RDD and Arrow UDF paths) run the driver's interpreter and venv.
    def where(_):
        import sys as s

        return (s.executable, s.prefix)

    seen = set(sc.parallelize(range(8), 4).map(where).collect())
    assert seen == {(sys.executable, sys.prefix)}

    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def executable(col: pd.Series) -> pd.Series:
        import sys as s

        return pd.Series([s.executable] * len(col))

    found = {r[0] for r in spark.range(0, 10, numPartitions=2).select(executable("id")).collect()}
    assert found == {sys.executable}
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


@pytest.mark.spark
def test_the_spark_jvm_maps_the_class_data_archive(spark):
    """The JVMs the tests start map Spark's classes from `harness.class_data`'s archive: a JVM
    that could not (another Java, other jars) would run, only slower."""
    archive = Path(re.findall(r"-XX:SharedArchiveFile=(\S+)", os.environ["SPARK_SUBMIT_OPTS"])[0])  # at collection
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(["jcmd", str(pid), "VM.info"], capture_output=True, text=True, timeout=60).stdout
    mapped = re.search(r"CDS archive\(s\) mapped at: .*size (\d+)", info)
    assert mapped is not None, info[:2000]
    assert int(mapped.group(1)) > archive.stat().st_size  # the JDK's own archive and ours


def _fetch_clients(cache: str) -> list[str]:
    from streamer.sandbox import jars as maven_jars

    jars = maven_jars.fetch("clients", "4.4.0", ["org.apache.kafka:kafka-clients:4.4.0"], cache=Path(cache))
    return [j.name for j in jars.jars]


def test_maven_fetch_gives_racing_processes_one_complete_jar_set(tmp_path):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        first, second = pool.map(_fetch_clients, [str(tmp_path)] * 2)

    assert first == second and "kafka-clients-4.4.0.jar" in first and "lz4-java-1.11.2.jar" in first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clients-4.4.0", "clients-4.4.0.lock"]  # no leftovers
    assert _fetch_clients(str(tmp_path)) == first  # found, not fetched again


def test_maven_fetch_names_the_artifact_maven_cannot_resolve(tmp_path):
    from streamer.sandbox import jars

    with pytest.raises(jars.MavenFetchError, match=r"mvn could not fetch org\.apache\.kafka:kafka-clients:0\.0\.404 "):
        jars.fetch(
            "missing", "1", ["org.apache.kafka:kafka-clients:0.0.404", "org.slf4j:slf4j-api:1.7.36"], cache=tmp_path
        )
    assert not (tmp_path / "missing-1").exists()


def test_maven_unpacks_an_archive_once_into_the_cache(tmp_path):
    from streamer.sandbox import jars

    home = jars.unpacked("slf4j", "1.7.36", "org.slf4j:slf4j-api:1.7.36:jar", cache=tmp_path)

    assert home == tmp_path / "slf4j-1.7.36" and (home / "org" / "slf4j" / "Logger.class").is_file()
    (home / "org" / "slf4j" / "Logger.class").unlink()
    assert jars.unpacked("slf4j", "1.7.36", "org.slf4j:slf4j-api:1.7.36:jar", cache=tmp_path) == home
    assert not (home / "org" / "slf4j" / "Logger.class").exists(), "found in the cache, not unpacked again"
    with pytest.raises(jars.MavenFetchError, match=r"mvn could not fetch org\.slf4j:slf4j-api:0\.0\.404:jar "):
        jars.unpacked("missing", "1", "org.slf4j:slf4j-api:0.0.404:jar", cache=tmp_path)
    assert not (tmp_path / "missing-1").exists()
