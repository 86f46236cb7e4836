"""Which Kafka broker the tests talk to, and helpers to feed it.

Order of choice (see DESIGN.md, "Testing and measuring"):

1. `KAFKA_BOOTSTRAP_SERVERS` set: that broker (e.g. the Apache Kafka of docker/compose.yaml).
2. Otherwise Apache Kafka itself, started from its Maven Central jars
   (`streamer.sandbox.kafka_broker`; the jars are fetched with `mvn` into the clone's `.cache/` on
   first use), once for the session.

The helpers that feed a broker (`create_topic`, `produce`, ...) live in `streamer.sandbox` because
the demo, `streamer kafka` and the benchmarks use them too; they are re-exported here so tests
import everything Kafka from one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streamer.errors import BrokerStartError  # noqa: F401  (re-export)
from streamer.sandbox.kafka_broker import KAFKA_VERSION, KafkaBroker
from streamer.sandbox.ports import free_port  # noqa: F401  (re-export)
from streamer.sandbox.topics import (  # noqa: F401  (re-exports)
    create_topic,
    murmur2,
    partition_for_key,
    produce,
    wait_for_broker,
)


@dataclass
class TestBroker:
    """A running broker for a test session."""

    __test__ = False  # not a test class, despite the name

    kind: str  # "external" | "kafka"
    bootstrap: str
    description: str
    pid: int | None = None
    log_path: str | None = None
    _stop: Callable[[], None] = field(default=lambda: None, repr=False)

    def stop(self) -> None:
        self._stop()


def start_kafka(work_dir: Path) -> TestBroker:
    broker = KafkaBroker(work_dir).start()
    return TestBroker(
        kind="kafka",
        bootstrap=broker.bootstrap,
        description=f"Apache Kafka {KAFKA_VERSION} pid {broker.pid} at {broker.bootstrap} "
        f"(up in {broker.startup_seconds:.1f}s, log {broker.log_path})",
        pid=broker.pid,
        log_path=broker.log_path,
        _stop=broker.close,
    )


def start_test_broker(work_dir: Path) -> TestBroker:
    """Start (or point at) the broker for a test session, per the order in the module doc."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        wait_for_broker(external, timeout=30.0)
        return TestBroker(kind="external", bootstrap=external, description=f"external broker {external}")
    return start_kafka(work_dir)
