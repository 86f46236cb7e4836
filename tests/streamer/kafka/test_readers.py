"""The two readers behind `streamer.kafka.consumer`: the native extension and confluent-kafka's
consumer hand over the same records as the same Arrow batches, and the option ``reader`` picks
between them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

from streamer.errors import KafkaSourceError
from streamer.kafka.consumer import describe_reader, native_available, reader_kind
from streamer.kafka.options import SourceOptions
from streamer.kafka.reader import read_partition
from tests.support import kafka_broker


def _options(bootstrap: str, topic: str, **options: str) -> SourceOptions:
    return SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options})


@pytest.mark.unit
def test_the_native_reader_is_built_by_make():
    """`make test` builds the extension (native/); the suite's readers are both real."""
    assert native_available()
    assert describe_reader().startswith("native reader (librdkafka ")
    assert reader_kind(SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})) == "native"


@pytest.mark.unit
def test_reader_option_names_the_reader_and_refuses_others():
    python = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "reader": "Python"})
    assert reader_kind(python) == "python"
    assert describe_reader("python").startswith("python reader (confluent-kafka ")
    with pytest.raises(KafkaSourceError, match="option 'reader' must be one of auto, native, python"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "reader": "java"})


@pytest.mark.e2e
@pytest.mark.parametrize("include_headers", ["true", "false"])
def test_both_readers_hand_over_identical_batches(kafka_bootstrap, kafka_topic, include_headers):
    """Null keys, tombstones, empty values, headers (none, several, null-valued, non-ASCII),
    create-time timestamps and batch boundaries: the same columns, value for value."""
    topic = kafka_topic(partitions=1, prefix="readers")
    records = []
    for i in range(2_500):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else (b"" if i % 13 == 0 else f"value {i} ".encode() * (i % 5))
        headers = None if i % 3 else [("trace", f"t{i}".encode()), ("empty", None), ("ü-name", b"\x00\xff")]
        records.append((key, value, 0, headers, 1_700_000_000_000 + i))
    kafka_broker.produce(kafka_bootstrap, topic, records)

    def read(reader: str, start: int, end: int) -> list[pa.RecordBatch]:
        opts = _options(kafka_bootstrap, topic, reader=reader, includeHeaders=include_headers, arrowBatchSize="700")
        return list(read_partition(opts, topic, 0, start, end))

    for start, end in [(0, 2_500), (5, 6), (1_000, 2_200)]:
        native, python = read("native", start, end), read("python", start, end)
        assert [b.num_rows for b in native] == [b.num_rows for b in python]
        assert pa.Table.from_batches(native).equals(pa.Table.from_batches(python))
        table = pa.Table.from_batches(native)
        assert table.column("offset").to_pylist() == list(range(start, end))
        assert table.column("value").to_pylist() == [r[1] for r in records[start:end]]
        assert table.column("timestamp").cast(pa.int64()).to_pylist() == [r[4] * 1000 for r in records[start:end]]
        if include_headers == "true":
            expected = [None if r[3] is None else [{"key": k, "value": v} for k, v in r[3]] for r in records[start:end]]
            assert table.column("headers").to_pylist() == expected


@pytest.mark.e2e
def test_a_range_read_of_the_python_reader_rides_out_a_broker_restart(tmp_path):
    """A read that starts while its broker is down waits for it (within the task timeout), then
    reads every record of the range once. The native reader, the default, is proven so by
    tests/e2e/test_broker_faults.py's continuous job."""
    reader = "python"
    records = [(f"k{i}".encode(), f"v{i}".encode() * 10, 0) for i in range(5_000)]
    with kafka_broker.KafkaBroker(tmp_path / "kafka") as kafka:
        topic = kafka.create_topic("orders", partitions=1)
        kafka_broker.produce(kafka.bootstrap, topic, records)
        opts = _options(kafka.bootstrap, topic, reader=reader, maxBrokerOutageMs="60000", arrowBatchSize="1000")
        kafka.stop()
        values: list = []
        read = threading.Thread(
            target=lambda: values.extend(
                v for b in read_partition(opts, topic, 0, 0, len(records)) for v in b.column("value").to_pylist()
            )
        )
        read.start()
        time.sleep(3.0)
        kafka.start()  # from this thread: the broker dies with the thread that started it
        read.join(90)
    assert values == [r[1] for r in records]


@pytest.mark.unit
def test_without_the_extension_the_source_reads_with_the_python_reader_and_says_how_to_get_the_native_one():
    """A plain `pip install` on a machine without Rust: `auto` is the python reader, the line the
    job logs and `doctor` prints names the remedy, `reader: native` is refused by name, and JSON
    decodes through Arrow's reader alone."""
    script = """
import sys
sys.modules["mor_streamer_native"] = None  # as if the extension were not installed
from streamer.errors import KafkaSourceError
from streamer.kafka.consumer import describe_reader, reader_kind
from streamer.kafka.options import SourceOptions
base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
print(reader_kind(SourceOptions.parse(base)))
print(describe_reader())
try:
    reader_kind(SourceOptions.parse({**base, "reader": "native"}))
except KafkaSourceError as e:
    print(e)
import pyarrow as pa
from streamer.decode.json import JsonDecoder
decoder = JsonDecoder(pa.struct([("id", pa.int64())]))
print(decoder._native.available, decoder.decode(pa.array([b'{"id": 7}', b'{"id": "x"}']))[0].to_pylist()[0])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    kind, described, refused, decoded = done.stdout.splitlines()
    assert kind == "python"
    assert described.startswith("python reader (confluent-kafka ") and "`make native` builds it" in described
    assert refused.startswith("option 'reader' is 'native' but the native Kafka reader is not installed: `make native`")
    assert decoded == "False {'id': 7}"
