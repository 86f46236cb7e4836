"""Which Kafka broker the tests talk to, and helpers to feed it.

Order of choice (see DESIGN.md, "Testing and measuring"):

1. `KAFKA_BOOTSTRAP_SERVERS` set: that broker (e.g. the Apache Kafka of docker/compose.yaml).
2. A Docker engine answers: Apache Kafka in a container through testcontainers.
3. Otherwise: the embedded tansu broker (`streamer.embedded_broker.EmbeddedBroker`).

`KAFKA_TEST_BROKER=embedded|container` forces 3 or 2 (when 1 is not set).

The broker-independent helpers (`create_topic`, `produce`, ...) live in
`streamer.embedded_broker` because the demo and the benchmarks use them too; they are re-exported
here so tests import everything Kafka from one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable

from streamer.embedded_broker import (  # noqa: F401  (re-exports)
    BrokerStartError,
    EmbeddedBroker,
    create_topic,
    free_port,
    murmur2,
    partition_for_key,
    produce,
    wait_for_broker,
)

KAFKA_CONTAINER_IMAGE = os.environ.get("KAFKA_TEST_IMAGE", "confluentinc/cp-kafka:7.6.0")


@dataclass
class TestBroker:
    """A running broker for a test session."""

    __test__ = False  # not a test class, despite the name

    kind: str  # "external" | "container" | "embedded"
    bootstrap: str
    description: str
    pid: int | None = None
    log_path: str | None = None
    _stop: Callable[[], None] = field(default=lambda: None, repr=False)

    def stop(self) -> None:
        self._stop()


def docker_engine_available(timeout: float = 3.0) -> bool:
    """True when a Docker engine answers a ping within `timeout` seconds. Never hangs: the check
    runs in a daemon thread that is abandoned if it overruns."""
    result: list[bool] = []

    def check() -> None:
        try:
            import docker

            host = None
            try:
                from testcontainers.core.docker_client import get_docker_host

                host = get_docker_host()
            except Exception:
                pass
            client = docker.DockerClient(base_url=host, timeout=timeout) if host else docker.from_env(timeout=timeout)
            try:
                result.append(bool(client.ping()))
            finally:
                client.close()
        except Exception:
            result.append(False)

    t = threading.Thread(target=check, name="docker-ping", daemon=True)
    t.start()
    t.join(timeout + 1.0)
    return bool(result and result[0])


def start_embedded(log_path: str | None = None) -> TestBroker:
    broker = EmbeddedBroker(log_path=log_path).start()
    return TestBroker(
        kind="embedded",
        bootstrap=broker.bootstrap,
        description=f"embedded tansu broker pid {broker.pid} at {broker.bootstrap} "
        f"(up in {broker.startup_seconds:.2f}s, log {broker.log_path})",
        pid=broker.pid,
        log_path=broker.log_path,
        _stop=broker.stop,
    )


def start_container(image: str = KAFKA_CONTAINER_IMAGE, timeout: float = 120.0) -> TestBroker:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # older testcontainers
        from testcontainers.kafka import KafkaContainer
    container = KafkaContainer(image).with_kraft()
    container.start(timeout=int(timeout))
    try:
        bootstrap = container.get_bootstrap_server()
        wait_for_broker(bootstrap, timeout=timeout)
    except BaseException:
        container.stop()
        raise
    return TestBroker(
        kind="container",
        bootstrap=bootstrap,
        description=f"Kafka container {image} at {bootstrap}",
        _stop=container.stop,
    )


def start_test_broker(log_path: str | None = None) -> TestBroker:
    """Start (or point at) the broker for a test session, per the order in the module doc."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        wait_for_broker(external, timeout=30.0)
        return TestBroker(kind="external", bootstrap=external, description=f"external broker {external}")
    forced = os.environ.get("KAFKA_TEST_BROKER", "").strip().lower()
    if forced not in ("", "auto", "embedded", "container"):
        raise ValueError(f"KAFKA_TEST_BROKER={forced!r}: use embedded, container or auto")
    if forced == "container" or (forced in ("", "auto") and docker_engine_available()):
        return start_container()
    return start_embedded(log_path)


class BrokerProxy:
    """A TCP forwarder in front of a broker, so a test can take the broker off the network without
    stopping it (tansu keeps topics in memory only: a restarted one has lost them).

    `cut()` closes the listening socket and every forwarded connection: clients see a broker that
    refuses connections. `restore()` listens again on the same port.
    """

    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.host = host
        self.target = (host, target_port)
        self.port = free_port(host)
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def restore(self) -> "BrokerProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="broker-proxy", daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            _close(listener)
        for conn in connections:
            _close(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed by cut()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    _close(upstream)
                    return
                self._connections.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.discard(source)
                self._connections.discard(sink)
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _AdvertisingBroker(EmbeddedBroker):
    """tansu listening on its own port but telling clients to connect to `advertised`."""

    def __init__(self, advertised: str, **kwargs):
        super().__init__(**kwargs)
        self.advertised = advertised

    @property
    def command(self) -> list[str]:
        command = super().command
        command[command.index("--advertised-listener-url") + 1] = f"tcp://{self.advertised}"
        return command


@dataclass
class ProxiedBroker:
    """An embedded broker that clients reach only through a `BrokerProxy` (`bootstrap`)."""

    proxy: BrokerProxy
    broker: EmbeddedBroker

    @property
    def bootstrap(self) -> str:
        return self.proxy.address

    def hang(self) -> None:
        """Freeze the broker process (SIGSTOP): connections stay open, nothing is answered."""
        os.kill(self.broker.pid, signal.SIGSTOP)

    def wake(self) -> None:
        os.kill(self.broker.pid, signal.SIGCONT)


@contextlib.contextmanager
def proxied_broker(log_path: str | None = None):
    """Yields a `ProxiedBroker` of its own for one test; `proxy.cut()`/`proxy.restore()` take it
    off the network and back, `hang()`/`wake()` freeze and thaw it."""
    broker_port = free_port()
    proxy = BrokerProxy(broker_port).restore()
    broker = _AdvertisingBroker(proxy.address, port=broker_port, log_path=log_path)
    try:
        broker.start()
        wait_for_broker(proxy.address)
        yield ProxiedBroker(proxy, broker)
    finally:
        proxy.cut()
        if broker.is_running():
            os.kill(broker.pid, signal.SIGCONT)
        broker.stop()
