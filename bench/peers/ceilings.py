"""Ceilings: what the machine does with the same data and no table semantics at all.

`kafka_consume` reads every message of the topic with confluent-kafka's consume loop and decodes
nothing: no path through confluent-kafka (the job's `python` reader) can read faster; the native
reader, which hands Python Arrow buffers instead of a message object per record, can, and the
`reader` scenario (`bench/reader.py`) measures the readers alone, side by side with this loop.
`parquet_write` writes the same Arrow batches as plain Parquet files: no upsert can write faster.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.measure import PathResult
from bench.peers import PeerInput, run_batches
from bench.workload import WorkloadFiles

TIMEOUT_SECONDS = 600


def kafka_consume(peer: PeerInput) -> PathResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": peer.bootstrap,
            "group.id": "bench-ceiling",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
        }
    )
    partitions = consumer.list_topics(peer.topic, timeout=10).topics[peer.topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(peer.topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(peer.topic, p, OFFSET_BEGINNING) for p in partitions])
    remaining, records = sum(ends.values()), 0
    started = time.monotonic()
    while remaining > records:
        if time.monotonic() - started > TIMEOUT_SECONDS:
            raise TimeoutError(f"read {records:,} of {remaining:,} messages in {TIMEOUT_SECONDS}s")
        for message in consumer.consume(10_000, timeout=0.1):
            if message.error() is None:
                records += 1
    seconds = time.monotonic() - started
    consumer.close()
    return PathResult("kafka-consume", "ceiling: confluent-kafka consume, no decode", records, seconds)


def parquet_write(peer: PeerInput) -> PathResult:
    directory = Path(peer.table)
    directory.mkdir(parents=True)
    written = []

    def write(table):
        written.append(directory / f"{len(written):04d}.parquet")
        pq.write_table(table, written[-1])

    return run_batches(
        "parquet-write", "ceiling: pyarrow parquet write", WorkloadFiles(peer.workload), write, write, lambda: None
    )
