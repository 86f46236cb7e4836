"""The options of the ``kafka-arrow`` source: parsed, validated, and turned into librdkafka
client configurations, with secret values never shown.

Options (all strings, case-insensitive names, as Spark options):

``kafka.bootstrap.servers`` (required)
    Broker list.
``subscribe`` | ``subscribePattern`` | ``assign`` (exactly one)
    Comma list of topics; a Java-style regex matched against whole topic names (topics whose
    names start with ``__`` are internal and never matched); or JSON ``{"topic": [0, 1]}``.
    With ``subscribe``/``subscribePattern`` the topic list is refreshed at every trigger, so new
    topics and partitions are picked up; they are read from their earliest offset.
``startingOffsets`` (default ``latest``)
    ``earliest``, ``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` (-2 = earliest,
    -1 = latest). Partitions of subscribed topics absent from the JSON start at earliest (so
    offsets saved by a sink keep working after partitions were added). Naming a partition that
    does not exist is an error (a warning with ``failOnDataLoss=false``). Only used when the
    query has no checkpoint yet.
``maxOffsetsPerTrigger``
    Upper bound of records per micro-batch, split across partitions in proportion to their lag
    exactly as Spark's Kafka source does (partitions with lag never get 0). Also applies to
    ``Trigger.AvailableNow`` (several batches), not to ``Trigger.Once``.
``initialBatchMaxOffsets``
    The most records the first micro-batch of a query without a checkpoint reads, when more
    than ``maxOffsetsPerTrigger``: a backlog loaded in one batch (the streamer's initial load).
``minPartitions`` / ``maxRecordsPerPartition``
    Split large offset ranges into several Spark tasks (Spark's algorithm).
``failOnDataLoss`` (default ``true``)
    When offsets to read are no longer available (below the partition's earliest offset, a
    partition or topic is gone, or a partition's end offset went below the offset already
    reached, e.g. a topic was recreated or ``startingOffsets`` points past the end), fail with
    :class:`KafkaDataLossError` naming topic, partition, the offset wanted and the offsets the
    broker holds. With ``false`` log a warning and continue from the earliest available offset
    (Spark's own source continues from the new end offset of a partition that went backwards,
    which skips what a recreated topic holds).
``kafkaConsumer.pollTimeoutMs`` (default 120000)
    How long a task waits without any progress (broker unreachable, partition stuck) before it
    fails with :class:`KafkaSourceTimeoutError`.
``fetchOffset.numRetries`` (default 3), ``fetchOffset.retryIntervalMs`` (default 1000),
``fetchOffset.timeoutMs`` (default 30000)
    Driver-side metadata and offset queries: per-attempt timeout and retries.
``maxBrokerOutageMs`` (not set by default)
    How long the query rides out brokers that do not answer (down, unreachable, hung), instead
    of the two limits above: driver-side queries are retried with a pause growing from
    ``fetchOffset.retryIntervalMs`` to 10 s, each retry logged with its cause, until the
    brokers have not answered for this long; tasks wait this long without progress. Then the
    query fails with :class:`KafkaSourceTimeoutError` naming the brokers.
``groupIdPrefix`` (default ``mor-streamer-kafka-source``)
    Prefix of the unique consumer group id used by each task (nothing is ever committed to
    the group). ``kafka.group.id`` overrides it.
``includeHeaders`` (default ``true``)
    ``false`` drops the ``headers`` column (Spark's schema without headers).
``reader`` (default ``auto``)
    What reads the records in the tasks: ``native``, the extension built from ``native/`` by
    ``make`` (librdkafka straight into Arrow buffers), or ``python``, confluent-kafka's
    consumer. ``auto`` takes the native reader when it is installed.
``arrowBatchSize`` (default 10000), ``arrowMaxBatchBytes`` (default 64 MiB)
    Rows / approximate key+value bytes per Arrow record batch handed to Spark.
``offsetRanges`` (default ``false``)
    ``true`` hands Spark the offset ranges it planned instead of their records, one row per
    task: ``topic string, partition int, from_offset long, until_offset long``. For a consumer
    that reads them in its own Python pass (``read_ranges``, in ``mapInArrow``), as the
    streamer's sink does: records then never cross into the JVM, and one process per task
    fetches, decodes and writes them. The options above still govern the read.
``offsetRangesInOneTask`` (default ``false``)
    With ``offsetRanges``: every range in one task's rows, for a consumer that reads the plan on
    the driver (the streamer's shared query, which hands each table its own ranges): a batch over
    a thousand topics is then one small task, not a thousand.
``kafka.*``
    Passed to librdkafka with the prefix removed (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.username``, ``kafka.sasl.password``,
    ``kafka.ssl.ca.location``, ``kafka.isolation.level``, ...). A Java
    ``kafka.sasl.jaas.config`` with ``username="..." password="..."`` (PLAIN / SCRAM login
    modules) is translated into ``sasl.username``/``sasl.password``. A Java truststore
    (``kafka.ssl.truststore.*``, for Spark's own ``kafka`` format) is left out: librdkafka trusts
    the certificate authority of ``kafka.ssl.ca.location``, a PEM file. As in Spark,
    ``kafka.auto.offset.reset``, ``kafka.enable.auto.commit``, ``kafka.key.deserializer``,
    ``kafka.value.deserializer`` and ``kafka.interceptor.classes`` are rejected. The isolation
    level defaults to ``read_uncommitted`` like Spark (librdkafka's own default differs); set
    ``kafka.isolation.level=read_committed`` for transactional producers.

Values of options whose names contain password, secret, jaas or key are never logged and are
shown as ``***`` in every message and repr produced here.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, overload

from streamer.config.secrets import JAAS_ITEM, redact_options, redact_text
from streamer.errors import KafkaSourceError
from streamer.logs.clients import ClientLog, client_config

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

#: Values of the option ``reader``.
READERS = ("auto", "native", "python")

#: ``startingOffsets`` values of a partition: its earliest and its latest offset.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]
OffsetMap = dict[TopicPartitionKey, int]


def describe_partition(tp: TopicPartitionKey) -> str:
    """A partition as messages name it: "topic 'orders' partition 3"."""
    return f"topic '{tp[0]}' partition {tp[1]}"


_REJECTED_KAFKA_PARAMS = {
    "auto.offset.reset": "use the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source never commits offsets to Kafka",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "Java interceptors do not exist in librdkafka",
}


# librdkafka properties that only a consumer accepts; they are not passed to the admin client
# used on the driver (librdkafka would warn about each of them).
_CONSUMER_ONLY_PARAMS = {
    "group.id",
    "group.instance.id",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.protocol.type",
    "group.protocol",
    "group.remote.assignor",
    "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.error.backoff.ms",
    "offset.store.method",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "allow.auto.create.topics",
    "auto.offset.reset",
}


#: What a range reader's consumer fetches ahead of it at most, by default.
PREFETCH_KBYTES = 16 * 1024
#: librdkafka's own most bytes of a partition in one fetch; its two names.
PARTITION_FETCH_BYTES = 1024 * 1024
_FETCH_SIZE_PARAMS = {"max.partition.fetch.bytes", "fetch.message.max.bytes"}


def _parse_bool(name: str, value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise KafkaSourceError(f"option '{name}' must be true or false, got {value!r}")


def _parse_int(name: str, value: str, minimum: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise KafkaSourceError(f"option '{name}' must be an integer, got {value!r}") from None
    if n < minimum:
        raise KafkaSourceError(f"option '{name}' must be >= {minimum}, got {n}")
    return n


def _parse_starting_offsets(value: str):
    """``"earliest"`` | ``"latest"`` | ``{(topic, partition): offset}`` (-2/-1 allowed)."""
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    try:
        parsed = json.loads(v)
    except json.JSONDecodeError:
        raise KafkaSourceError(
            "option 'startingOffsets' must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {value!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise KafkaSourceError(f"option 'startingOffsets': expected a JSON object, got {value!r}")
    out: OffsetMap = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise KafkaSourceError(f"option 'startingOffsets': topic {topic!r} must map partitions to offsets")
        for p, off in parts.items():
            try:
                pn = int(p)
            except (TypeError, ValueError):
                raise KafkaSourceError(
                    f"option 'startingOffsets': partition {p!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise KafkaSourceError(
                    f"option 'startingOffsets': offset {off!r} of {topic}-{pn} must be an integer "
                    ">= 0, or -2 (earliest) or -1 (latest)"
                )
            out[(topic, pn)] = off
    return out


def _parse_assign(value: str) -> list[TopicPartitionKey]:
    try:
        parsed = json.loads(value)
        tps = [(str(t), int(p)) for t, ps in parsed.items() for p in ps]
    except Exception:  # noqa: BLE001 - any shape that is not topic -> partitions
        raise KafkaSourceError(f"option 'assign' must be JSON like {{\"topicA\": [0, 1]}}, got {value!r}") from None
    if not tps:
        raise KafkaSourceError("option 'assign' names no partition")
    return sorted(set(tps))


#: A Java client's trust settings, which librdkafka has no use for (nor name).
_JAVA_TRUSTSTORE_PARAMS = {"ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type"}


def _translate_kafka_params(raw: dict[str, str]) -> dict[str, str]:
    """Java-client style ``kafka.*`` params -> librdkafka configuration."""
    out: dict[str, str] = {}
    for k, v in raw.items():
        if k in _REJECTED_KAFKA_PARAMS:
            raise KafkaSourceError(f"Kafka option 'kafka.{k}' is not supported: {_REJECTED_KAFKA_PARAMS[k]}")
        if k in _JAVA_TRUSTSTORE_PARAMS:
            continue
        if k == "sasl.jaas.config":
            items = {m.group(1).lower(): m.group(2) for m in JAAS_ITEM.finditer(v)}
            if "oauthbearer" in v.lower() or "username" not in items or "password" not in items:
                raise KafkaSourceError(
                    "option 'kafka.sasl.jaas.config' can only be translated for the PLAIN and "
                    'SCRAM login modules (username="..." password="..."); pass '
                    "'kafka.sasl.username' and 'kafka.sasl.password' (or librdkafka's own "
                    "sasl.* options) instead"
                )
            out.setdefault("sasl.username", items["username"])
            out.setdefault("sasl.password", items["password"])
            continue
        out[k] = v
    return out


@dataclass
class SourceOptions:
    """Parsed and validated source options. Picklable; secrets never appear in its repr."""

    bootstrap_servers: str
    kafka_params: dict[str, str]  # librdkafka config, without bootstrap.servers
    raw_options: dict[str, str] = field(repr=False)
    subscribe: list[str] | None = None
    subscribe_pattern: str | None = None
    assign: list[TopicPartitionKey] | None = None
    starting_offsets: object = "latest"
    max_offsets_per_trigger: int | None = None
    initial_batch_max_offsets: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    fetch_offset_timeout_ms: int = 30_000
    max_broker_outage_ms: int | None = None
    group_id_prefix: str = "mor-streamer-kafka-source"
    include_headers: bool = True
    offset_ranges: bool = False
    offset_ranges_in_one_task: bool = False
    arrow_batch_size: int = 10_000
    arrow_max_batch_bytes: int = 64 * 1024 * 1024
    reader: str = "auto"

    def __repr__(self) -> str:
        return f"SourceOptions({redact_options(self.raw_options)})"

    __str__ = __repr__

    @property
    def task_timeout_ms(self) -> int:
        """How long a task waits without progress before it fails."""
        return self.max_broker_outage_ms or self.poll_timeout_ms

    @property
    def task_timeout_option(self) -> str:
        return "maxBrokerOutageMs" if self.max_broker_outage_ms else "kafkaConsumer.pollTimeoutMs"

    @property
    def isolation_level(self) -> str:
        return self.kafka_params.get("isolation.level", "read_uncommitted")

    def redact(self, text: str) -> str:
        return redact_text(text, self.raw_options)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}
        bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise KafkaSourceError("option 'kafka.bootstrap.servers' is required")
        raw_kafka = {
            k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        kafka_params = _translate_kafka_params(raw_kafka)
        kafka_params.setdefault("isolation.level", "read_uncommitted")

        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
        if len(strategies) != 1:
            raise KafkaSourceError(
                "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                f"set (got {len(strategies)})"
            )
        o = cls(bootstrap_servers=bootstrap, kafka_params=kafka_params, raw_options=opts)
        if "subscribe" in strategies:
            topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not topics:
                raise KafkaSourceError("option 'subscribe' names no topic")
            o.subscribe = sorted(set(topics))
        elif "subscribepattern" in strategies:
            try:
                re.compile(opts["subscribepattern"])
            except re.error as e:
                raise KafkaSourceError(f"option 'subscribePattern' is not a valid regex: {e}") from None
            o.subscribe_pattern = opts["subscribepattern"]
        else:
            o.assign = _parse_assign(opts["assign"])

        if "startingoffsets" in opts:
            o.starting_offsets = _parse_starting_offsets(opts["startingoffsets"])
        if isinstance(o.starting_offsets, dict):
            for topic, _ in o.starting_offsets:
                if not o.topic_is_wanted(topic):
                    raise KafkaSourceError(
                        f"option 'startingOffsets' names topic {topic!r}, which is not subscribed / assigned"
                    )
        if "endingoffsets" in opts:
            raise KafkaSourceError("option 'endingOffsets' is for batch queries only")
        if "minoffsetspertrigger" in opts or "maxtriggerdelay" in opts:
            raise KafkaSourceError(
                "options 'minOffsetsPerTrigger' / 'maxTriggerDelay' are not supported by this source"
            )
        if "maxoffsetspertrigger" in opts:
            o.max_offsets_per_trigger = _parse_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"], 1)
        if "initialbatchmaxoffsets" in opts:
            o.initial_batch_max_offsets = _parse_int("initialBatchMaxOffsets", opts["initialbatchmaxoffsets"], 1)
        if "minpartitions" in opts:
            o.min_partitions = _parse_int("minPartitions", opts["minpartitions"], 1)
        if "maxrecordsperpartition" in opts:
            o.max_records_per_partition = _parse_int("maxRecordsPerPartition", opts["maxrecordsperpartition"], 1)
        if "failondataloss" in opts:
            o.fail_on_data_loss = _parse_bool("failOnDataLoss", opts["failondataloss"])
        if "kafkaconsumer.polltimeoutms" in opts:
            o.poll_timeout_ms = _parse_int("kafkaConsumer.pollTimeoutMs", opts["kafkaconsumer.polltimeoutms"], 1)
        if "fetchoffset.numretries" in opts:
            o.fetch_offset_num_retries = _parse_int("fetchOffset.numRetries", opts["fetchoffset.numretries"], 0)
        if "fetchoffset.retryintervalms" in opts:
            o.fetch_offset_retry_interval_ms = _parse_int(
                "fetchOffset.retryIntervalMs", opts["fetchoffset.retryintervalms"], 0
            )
        if "fetchoffset.timeoutms" in opts:
            o.fetch_offset_timeout_ms = _parse_int("fetchOffset.timeoutMs", opts["fetchoffset.timeoutms"], 1)
        if "maxbrokeroutagems" in opts:
            o.max_broker_outage_ms = _parse_int("maxBrokerOutageMs", opts["maxbrokeroutagems"], 1)
        if opts.get("groupidprefix", "").strip():
            o.group_id_prefix = opts["groupidprefix"].strip()
        if "includeheaders" in opts:
            o.include_headers = _parse_bool("includeHeaders", opts["includeheaders"])
        if "offsetranges" in opts:
            o.offset_ranges = _parse_bool("offsetRanges", opts["offsetranges"])
        if "offsetrangesinonetask" in opts:
            o.offset_ranges_in_one_task = _parse_bool("offsetRangesInOneTask", opts["offsetrangesinonetask"])
        if "reader" in opts:
            o.reader = opts["reader"].strip().lower()
            if o.reader not in READERS:
                raise KafkaSourceError(f"option 'reader' must be one of {', '.join(READERS)} (got {opts['reader']!r})")
        if "arrowbatchsize" in opts:
            o.arrow_batch_size = _parse_int("arrowBatchSize", opts["arrowbatchsize"], 1)
        if "arrowmaxbatchbytes" in opts:
            o.arrow_max_batch_bytes = _parse_int("arrowMaxBatchBytes", opts["arrowmaxbatchbytes"], 1)
        return o

    # -- topic selection ---------------------------------------------------------------------

    def topic_is_wanted(self, topic: str) -> bool:
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign or [])

    # -- client configuration ----------------------------------------------------------------

    def consumer_config(self, prefetch_kbytes: int = PREFETCH_KBYTES) -> dict[str, object]:
        """A range reader's consumer, prefetching at most `prefetch_kbytes` (unless the options
        set `kafka.queued.max.messages.kbytes`)."""
        conf: dict[str, object] = dict(self.kafka_params)
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("group.id", f"{self.group_id_prefix}-{uuid.uuid4()}")
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf["enable.partition.eof"] = True
        conf["auto.offset.reset"] = "error" if self.fail_on_data_loss else "earliest"
        conf.setdefault("allow.auto.create.topics", False)
        # A task reads one range and stops: what librdkafka fetches past the range's end is
        # parsed, then thrown away when the range is done. So prefetch less than librdkafka's default
        # 64 MiB (at most its default 100,000 records), and fetch again 10 ms after the queue
        # drains below that, not after librdkafka's default second.
        conf.setdefault("queued.max.messages.kbytes", prefetch_kbytes)
        conf.setdefault("fetch.queue.backoff.ms", 10)
        # A fetch brings up to a quarter of the prefetch of its partition, not librdkafka's 1 MiB
        # whatever the prefetch: a broker's work and a consumer's go by fetch as well as by byte,
        # and a range of large records (Connect's JSON with its schemas) took four times the
        # fetches. A short range's prefetch keeps 1 MiB.
        if not _FETCH_SIZE_PARAMS & conf.keys():
            prefetch = int(str(conf["queued.max.messages.kbytes"])) * 1024
            conf["max.partition.fetch.bytes"] = max(PARTITION_FETCH_BYTES, prefetch // 4)
        # A fetch at a partition's end is held by the broker up to this long. End-of-partition is
        # only reported by such a fetch, and a pooled consumer's next range is fetched only
        # after the fetch in flight for its last one returns: short, so that ranges that end with
        # control records (transactions), and the range read after one that ended at its
        # partition's end, start within milliseconds.
        conf.setdefault("fetch.wait.max.ms", 10)
        return conf

    def admin_config(self) -> dict[str, str]:
        conf = {k: v for k, v in self.kafka_params.items() if k not in _CONSUMER_ONLY_PARAMS}
        conf["bootstrap.servers"] = self.bootstrap_servers
        return conf


@overload
def new_client(kind: Literal["admin"], opts: SourceOptions) -> tuple[AdminClient, ClientLog]: ...
@overload
def new_client(
    kind: Literal["consumer"], opts: SourceOptions, prefetch_kbytes: int = ...
) -> tuple[Consumer, ClientLog]: ...
def new_client(
    kind: Literal["admin", "consumer"], opts: SourceOptions, prefetch_kbytes: int = PREFETCH_KBYTES
) -> tuple[AdminClient | Consumer, ClientLog]:
    """A Kafka admin client or consumer whose librdkafka logs and errors go to its `ClientLog`;
    a consumer prefetches at most `prefetch_kbytes` (`SourceOptions.consumer_config`)."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    try:
        if kind == "admin":
            conf, client_log = client_config(opts.admin_config(), f"admin client of {opts.bootstrap_servers}")
            return AdminClient(conf), client_log
        conf, client_log = client_config(opts.consumer_config(prefetch_kbytes), f"consumer of {opts.bootstrap_servers}")
        return confluent_kafka.Consumer(conf), client_log
    except (confluent_kafka.KafkaException, ValueError, TypeError) as e:
        raise KafkaSourceError(
            f"cannot create the Kafka {kind} client: {opts.redact(str(e))} "
            f"(options: {redact_options(opts.raw_options)})"
        ) from None
