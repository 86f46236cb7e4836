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

import os
import threading
from dataclasses import dataclass, field
from typing import Callable

from streamer.embedded_broker import (  # noqa: F401  (re-exports)
    BrokerStartError,
    EmbeddedBroker,
    create_topic,
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
