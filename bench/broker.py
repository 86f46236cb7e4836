"""The bench's Kafka broker: the one `KAFKA_BOOTSTRAP_SERVERS` names, else Apache Kafka itself,
started from its Maven Central jars (`streamer.sandbox.kafka_broker`), as the tests do."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from streamer.sandbox.kafka_broker import KAFKA_VERSION, KafkaBroker


@contextlib.contextmanager
def kafka(work: Path) -> Iterator[str]:
    """The broker's bootstrap servers, for the duration of the block."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        print(f"  Kafka: {external} (KAFKA_BOOTSTRAP_SERVERS)", flush=True)
        yield external
        return
    with KafkaBroker(work / "kafka") as broker:
        print(f"  Kafka: Apache Kafka {KAFKA_VERSION} at {broker.bootstrap} (up in {broker.startup_seconds:.1f}s)",
              flush=True)
        yield broker.bootstrap
