"""Topic discovery and offset queries against the brokers, made on the driver with one admin
client and retried while the brokers do not answer (``fetchOffset.*``, ``maxBrokerOutageMs``);
not when they refuse the client (a failed login, an untrusted certificate: `refusals`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamer.errors import KafkaSourceError, KafkaSourceTimeoutError
from streamer.kafka.options import EARLIEST, LATEST, OffsetMap, SourceOptions, TopicPartitionKey, new_client
from streamer.kafka.refusals import refusal_error
from streamer.logs.clients import ClientLog

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)


#: The longest pause between two attempts of a driver-side query under ``maxBrokerOutageMs``.
_MAX_RETRY_PAUSE_S = 10.0
#: How long the first attempt of a driver-side query under ``maxBrokerOutageMs`` waits for an
#: answer; each later one twice as long, up to ``fetchOffset.timeoutMs``.
_FIRST_ATTEMPT_S = 5.0


class KafkaMetadata:
    """Topic discovery and offset queries on the driver (one AdminClient, created lazily)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._admin: AdminClient | None = None
        self._admin_log: ClientLog | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin, self._admin_log = new_client("admin", self.opts)
        return self._admin

    def close(self) -> None:
        self._admin = self._admin_log = None

    def _fail_if_refused(self) -> None:
        """Raise when the brokers refused the admin client (a failed login) or it refused them
        (an untrusted certificate): waiting cannot mend that."""
        if self._admin is not None:
            self._admin.poll(0)  # serves the client's queued log lines and error events
        if self._admin_log is not None and self._admin_log.refusal is not None:
            raise refusal_error(self.opts, *self._admin_log.refusal) from None

    def _latest_cause(self, failure: BaseException) -> str:
        """Why a request failed: the admin client's latest error event (which names the broker
        and, say, "Connection refused") when there is one, else the request's own error."""
        if self._admin is not None:
            self._admin.poll(0)  # serves the client's queued log lines and error events
        cause = self._admin_log.cause if self._admin_log is not None else None
        if self._admin_log is not None:
            self._admin_log.cause = None
        return self.opts.redact(cause or str(failure))

    def _retrying(self, what: str, fn):
        """``fn(timeout_s)``, retried while the brokers do not answer: ``fetchOffset.numRetries``
        times, or with ``maxBrokerOutageMs`` until they have not answered for that long."""
        o = self.opts
        outage_s = o.max_broker_outage_ms / 1000.0 if o.max_broker_outage_ms else None
        pause = o.fetch_offset_retry_interval_ms / 1000.0
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            timeout = o.fetch_offset_timeout_ms / 1000.0
            if outage_s is not None:  # early attempts are short: each failure is reported
                timeout = min(timeout, _FIRST_ATTEMPT_S * 2 ** (attempt - 1))
                timeout = max(0.5, min(timeout, started + outage_s - time.monotonic()))
            try:
                answer = fn(timeout)
                self.admin.poll(0)  # serves the client's log lines and error events, which wait for it
                if self._admin_log is not None:  # the errors before this answer are over
                    self._admin_log.cause = self._admin_log.refusal = None
                return answer
            except KafkaSourceError:  # configuration errors, data loss: not worth retrying
                raise
            except Exception as e:  # noqa: BLE001 - KafkaException, timeouts
                self._fail_if_refused()
                cause = self._latest_cause(e)
                waited = time.monotonic() - started
                if outage_s is None and attempt > o.fetch_offset_num_retries:
                    raise KafkaSourceTimeoutError(
                        f"Kafka {what} failed after {attempt} attempts against {o.bootstrap_servers}: {cause}"
                    ) from None
                if outage_s is not None and waited + pause >= outage_s:
                    raise KafkaSourceTimeoutError(
                        f"Kafka brokers {o.bootstrap_servers} did not answer a {what} for {waited:.0f}s "
                        f"(option maxBrokerOutageMs={o.max_broker_outage_ms}; "
                        f"source.max_broker_outage_seconds in a table config): {cause}"
                    ) from None
                log.warning(
                    "Kafka %s to %s failed (attempt %d, %.0fs without an answer); retrying in %.1fs: %s",
                    what,
                    o.bootstrap_servers,
                    attempt,
                    waited,
                    pause,
                    cause,
                )
                # The next attempt asks a new client: librdkafka answers from the leaders it has
                # cached, which a broker's return may have outdated (a fenced broker's partitions
                # have none for a moment), and refreshes them only every few minutes.
                self.close()
                time.sleep(pause)
                if outage_s is not None:
                    pause = min(2 * pause, _MAX_RETRY_PAUSE_S)

    def discover(self) -> tuple[list[TopicPartitionKey], set]:
        """Partitions to read now, and the topics whose metadata was unusable this time."""
        o = self.opts

        def fetch(timeout: float):
            return self.admin.list_topics(timeout=timeout)

        md = self._retrying("metadata request", fetch)
        uncertain = set()
        tps: list[TopicPartitionKey] = []
        for name, t in md.topics.items():
            if not o.topic_is_wanted(name):
                continue
            if t.error is not None:
                if t.error.code() != _unknown_topic_code():
                    uncertain.add(name)
                continue
            for pid in t.partitions:
                tps.append((name, int(pid)))
        if o.assign is not None:
            present = set(tps)
            tps = [tp for tp in o.assign if tp in present]
        return sorted(tps), uncertain

    def list_offsets(self, tps: Sequence[TopicPartitionKey], spec: int) -> OffsetMap:
        if not tps:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        o = self.opts
        iso = (
            IsolationLevel.READ_COMMITTED
            if o.isolation_level.lower() == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        what = "earliest" if spec == EARLIEST else "latest"

        def fetch(timeout: float):
            req = {
                TopicPartition(t, p): (OffsetSpec.earliest() if spec == EARLIEST else OffsetSpec.latest())
                for t, p in tps
            }
            futures = self.admin.list_offsets(req, isolation_level=iso, request_timeout=timeout)
            out: OffsetMap = {}
            for tp, fut in futures.items():
                out[(tp.topic, tp.partition)] = int(fut.result().offset)
            return out

        return self._retrying(f"{what}-offsets request for {len(tps)} partition(s)", fetch)

    def earliest(self, tps):
        return self.list_offsets(list(tps), EARLIEST)

    def latest(self, tps):
        return self.list_offsets(list(tps), LATEST)


def earliest_offsets(opts: SourceOptions, tps: Sequence[TopicPartitionKey]) -> OffsetMap:
    """The earliest offset Kafka holds of each partition, retried as the source's own queries."""
    md = KafkaMetadata(opts)
    try:
        return md.earliest(tps)
    finally:
        md.close()


def _unknown_topic_code():
    from confluent_kafka import KafkaError

    return KafkaError.UNKNOWN_TOPIC_OR_PART
