"""Kafka stream source for Spark Structured Streaming, written as a PySpark Python data source.

Spark's own ``kafka`` format needs the ``spark-sql-kafka-0-10`` jar, which is not always
available. This module reads Kafka with confluent-kafka (librdkafka) instead and hands Spark
Arrow record batches. Register it once per session and use it like Spark's Kafka source::

    from streamer.kafka.source import register_kafka_source
    register_kafka_source(spark)                     # short name: "kafka-arrow"
    df = (spark.readStream.format("kafka-arrow")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "100000")
          .load())

Output schema (the same as Spark's Kafka source with ``includeHeaders=true``)::

    key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>

Offsets are JSON objects shaped like Spark's: ``{"topic": {"partition": nextOffsetToRead}}``.

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
``arrowBatchSize`` (default 10000), ``arrowMaxBatchBytes`` (default 64 MiB)
    Rows / approximate key+value bytes per Arrow record batch handed to Spark.
``offsetRanges`` (default ``false``)
    ``true`` hands Spark the offset ranges it planned instead of their records, one row per
    task: ``topic string, partition int, from_offset long, until_offset long``. For a consumer
    that reads them in its own Python pass (``read_ranges``, in ``mapInArrow``), as the
    streamer's sink does: records then never cross into the JVM, and one process per task
    fetches, decodes and writes them. The options above still govern the read.
``kafka.*``
    Passed to librdkafka with the prefix removed (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.username``, ``kafka.sasl.password``,
    ``kafka.ssl.ca.location``, ``kafka.isolation.level``, ...). A Java
    ``kafka.sasl.jaas.config`` with ``username="..." password="..."`` (PLAIN / SCRAM login
    modules) is translated into ``sasl.username``/``sasl.password``. As in Spark,
    ``kafka.auto.offset.reset``, ``kafka.enable.auto.commit``, ``kafka.key.deserializer``,
    ``kafka.value.deserializer`` and ``kafka.interceptor.classes`` are rejected. The isolation
    level defaults to ``read_uncommitted`` like Spark (librdkafka's own default differs); set
    ``kafka.isolation.level=read_committed`` for transactional producers.

Values of options whose names contain password, secret, jaas or key are never logged and are
shown as ``***`` in every message and repr produced here.

Admission control: with PySpark >= 4.2 the engine calls ``latestOffset(start, limit)`` with the
:class:`ReadLimit` returned by ``getDefaultReadLimit()`` (``ReadMaxRows(maxOffsetsPerTrigger)``
when set, else ``ReadAllAvailable``) and with ``ReadAllAvailable`` for ``Trigger.Once``; the
reader implements ``SupportsTriggerAvailableNow`` so ``Trigger.AvailableNow`` reads up to the
offsets current at query start in rate-limited batches. With PySpark 4.0/4.1 (no admission
control) ``latestOffset()`` is called without arguments; the reader then rate-limits from the
last offsets it planned, best effort.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamer.client_logs import ClientLog, client_config, configure_worker_logging
from streamer.config.choices import SourceFormat

try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources.
    from pyspark.sql.streaming.datasource import (  # type: ignore[attr-defined]
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        pass

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


log = logging.getLogger(__name__)

SOURCE_NAME = SourceFormat.KAFKA_ARROW.value

EARLIEST = -2
LATEST = -1

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
KAFKA_SCHEMA_WITHOUT_HEADERS = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
KAFKA_SCHEMA = StructType(KAFKA_SCHEMA_WITHOUT_HEADERS.fields + [StructField("headers", HEADERS_TYPE)])
OFFSET_RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("from_offset", LongType()),
        StructField("until_offset", LongType()),
    ]
)

_ARROW_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_ARROW_HEADERS = pa.list_(pa.field("element", _ARROW_HEADER_STRUCT))
_ARROW_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA_WITHOUT_HEADERS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _ARROW_TS),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA = ARROW_SCHEMA_WITHOUT_HEADERS.append(pa.field("headers", _ARROW_HEADERS))
_ARROW_OFFSET_RANGES = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("from_offset", pa.int64()),
                                  ("until_offset", pa.int64())])

TopicPartitionKey = Tuple[str, int]
OffsetMap = Dict[TopicPartitionKey, int]


class KafkaSourceError(Exception):
    """Misconfiguration or failure of the Kafka source."""


class KafkaDataLossError(KafkaSourceError):
    """Offsets to be read are no longer available (and ``failOnDataLoss`` is true)."""


class KafkaSourceTimeoutError(KafkaSourceError):
    """The broker did not answer / the partition made no progress within the time limit."""


# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

_SECRET_NAME = re.compile(r"password|secret|jaas|key|token", re.IGNORECASE)


def is_secret_option(name: str) -> bool:
    """True for option names whose values must never be shown."""
    return bool(_SECRET_NAME.search(name))


def redact_options(options: Mapping[str, str]) -> Dict[str, str]:
    """A copy of ``options`` with secret values replaced by ``***``."""
    return {k: ("***" if is_secret_option(k) else v) for k, v in options.items()}


def redact_text(text: str, options: Mapping[str, str]) -> str:
    """``text`` with every secret option value (and the parts of a JAAS line) replaced."""
    secrets: List[str] = []
    for k, v in options.items():
        if is_secret_option(k) and v:
            secrets.append(str(v))
            if "jaas" in k.lower():
                secrets.extend(m.group(2) for m in _JAAS_ITEM.finditer(str(v)))
    for s in sorted(set(secrets), key=len, reverse=True):
        if len(s) >= 3:
            text = text.replace(s, "***")
    return text


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------

_JAAS_ITEM = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

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
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
    "heartbeat.interval.ms", "group.protocol.type", "group.protocol", "group.remote.assignor",
    "coordinator.query.interval.ms", "max.poll.interval.ms", "enable.auto.commit",
    "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
    "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes",
    "fetch.min.bytes", "fetch.error.backoff.ms", "offset.store.method", "isolation.level",
    "enable.partition.eof", "check.crcs", "allow.auto.create.topics", "auto.offset.reset",
}


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
            raise KafkaSourceError(
                f"option 'startingOffsets': topic {topic!r} must map partitions to offsets"
            )
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


def _parse_assign(value: str) -> List[TopicPartitionKey]:
    try:
        parsed = json.loads(value)
        tps = [(str(t), int(p)) for t, ps in parsed.items() for p in ps]
    except Exception:
        raise KafkaSourceError(
            f'option \'assign\' must be JSON like {{"topicA": [0, 1]}}, got {value!r}'
        ) from None
    if not tps:
        raise KafkaSourceError("option 'assign' names no partition")
    return sorted(set(tps))


def _translate_kafka_params(raw: Dict[str, str]) -> Dict[str, str]:
    """Java-client style ``kafka.*`` params -> librdkafka configuration."""
    out: Dict[str, str] = {}
    for k, v in raw.items():
        if k in _REJECTED_KAFKA_PARAMS:
            raise KafkaSourceError(
                f"Kafka option 'kafka.{k}' is not supported: {_REJECTED_KAFKA_PARAMS[k]}"
            )
        if k == "sasl.jaas.config":
            items = {m.group(1).lower(): m.group(2) for m in _JAAS_ITEM.finditer(v)}
            if "oauthbearer" in v.lower() or "username" not in items or "password" not in items:
                raise KafkaSourceError(
                    "option 'kafka.sasl.jaas.config' can only be translated for the PLAIN and "
                    "SCRAM login modules (username=\"...\" password=\"...\"); pass "
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
    kafka_params: Dict[str, str]  # librdkafka config, without bootstrap.servers
    raw_options: Dict[str, str] = field(repr=False)
    subscribe: Optional[List[str]] = None
    subscribe_pattern: Optional[str] = None
    assign: Optional[List[TopicPartitionKey]] = None
    starting_offsets: object = "latest"
    max_offsets_per_trigger: Optional[int] = None
    initial_batch_max_offsets: Optional[int] = None
    min_partitions: Optional[int] = None
    max_records_per_partition: Optional[int] = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    fetch_offset_timeout_ms: int = 30_000
    max_broker_outage_ms: Optional[int] = None
    group_id_prefix: str = "mor-streamer-kafka-source"
    include_headers: bool = True
    offset_ranges: bool = False
    arrow_batch_size: int = 10_000
    arrow_max_batch_bytes: int = 64 * 1024 * 1024

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
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        opts = {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}
        bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise KafkaSourceError("option 'kafka.bootstrap.servers' is required")
        raw_kafka = {
            k[len("kafka."):]: v
            for k, v in opts.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
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
                        f"option 'startingOffsets' names topic {topic!r}, which is not "
                        "subscribed / assigned"
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
            o.max_records_per_partition = _parse_int(
                "maxRecordsPerPartition", opts["maxrecordsperpartition"], 1
            )
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

    def consumer_config(self) -> Dict[str, str]:
        conf: Dict[str, object] = dict(self.kafka_params)
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("group.id", f"{self.group_id_prefix}-{uuid.uuid4()}")
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf["enable.partition.eof"] = True
        conf["auto.offset.reset"] = "error" if self.fail_on_data_loss else "earliest"
        conf.setdefault("allow.auto.create.topics", False)
        # A task reads one range and stops: what librdkafka fetches past the range's end is
        # parsed, then thrown away when the range is done. So prefetch less than librdkafka's default
        # 64 MiB (16 MiB, and at most its default 100,000 records), and fetch again 10 ms after the
        # queue drains below that, not after librdkafka's default second.
        conf.setdefault("queued.max.messages.kbytes", 16 * 1024)
        conf.setdefault("fetch.queue.backoff.ms", 10)
        # End-of-partition is only reported by a fetch at the end, which the broker holds up to
        # this long: keeps ranges that end with control records (transactions) quick.
        conf.setdefault("fetch.wait.max.ms", 100)
        return conf  # type: ignore[return-value]

    def admin_config(self) -> Dict[str, str]:
        conf = {k: v for k, v in self.kafka_params.items() if k not in _CONSUMER_ONLY_PARAMS}
        conf["bootstrap.servers"] = self.bootstrap_servers
        return conf


def _new_client(kind: str, opts: SourceOptions) -> Tuple[object, ClientLog]:
    """A Kafka admin client or consumer whose librdkafka logs and errors go to its `ClientLog`."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    try:
        if kind == "admin":
            conf, client_log = client_config(opts.admin_config(), f"admin client of {opts.bootstrap_servers}")
            return AdminClient(conf), client_log
        conf, client_log = client_config(opts.consumer_config(), f"consumer of {opts.bootstrap_servers}")
        return confluent_kafka.Consumer(conf), client_log
    except (confluent_kafka.KafkaException, ValueError, TypeError) as e:
        raise KafkaSourceError(
            f"cannot create the Kafka {kind} client: {opts.redact(str(e))} "
            f"(options: {redact_options(opts.raw_options)})"
        ) from None


# --------------------------------------------------------------------------------------------
# Offsets JSON
# --------------------------------------------------------------------------------------------


def offsets_to_json(offsets: OffsetMap) -> Dict[str, Dict[str, int]]:
    """``{(topic, p): off}`` -> Spark-shaped, deterministically ordered dict."""
    out: Dict[str, Dict[str, int]] = {}
    for (topic, p) in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def offsets_from_json(obj: Optional[Mapping]) -> OffsetMap:
    if not obj:
        return {}
    if isinstance(obj, str):
        obj = json.loads(obj)
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def _fmt_tp(tp: TopicPartitionKey) -> str:
    return f"topic '{tp[0]}' partition {tp[1]}"


def _fmt_held(earliest: int, end: int) -> str:
    """What a partition holds, for data-loss messages."""
    if earliest >= end:
        return f"no records (its end offset is {end})"
    return f"offsets {earliest} to {end - 1}"


# --------------------------------------------------------------------------------------------
# Rate limiting and range splitting (Spark's algorithms)
# --------------------------------------------------------------------------------------------


def rate_limit(
    limit: int,
    start: OffsetMap,
    until: OffsetMap,
    earliest_of_new: Callable[[List[TopicPartitionKey]], OffsetMap],
) -> OffsetMap:
    """Spark's KafkaMicroBatchStream.rateLimit: share ``limit`` records across partitions in
    proportion to their lag; a partition with lag never gets 0 (prorates below 1 round up)."""
    new = [tp for tp in until if tp not in start]
    from_new = earliest_of_new(new) if new else {}
    sizes: Dict[TopicPartitionKey, int] = {}
    for tp, end in until.items():
        begin = start.get(tp, from_new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: OffsetMap = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, from_new.get(tp))
        prorate = limit * (sizes[tp] / total)
        n = int(-(-prorate // 1)) if prorate < 1 else int(prorate // 1)
        out[tp] = min(end, begin + n)
    return out


def split_ranges(
    ranges: Sequence[Tuple[TopicPartitionKey, int, int]],
    min_partitions: Optional[int],
    max_records_per_partition: Optional[int],
) -> List[Tuple[TopicPartitionKey, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: split ranges into more tasks when asked."""
    ranges = [r for r in ranges if r[2] > r[1]]

    def divide(r, parts):
        tp, s, e = r
        remaining, out = e - s, []
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            out.append((tp, s, min(s + this, e)))
            s = min(s + this, e)
        return [x for x in out if x[2] > x[1]]

    if max_records_per_partition:
        ranges = [
            piece
            for r in ranges
            for piece in divide(r, max(1, -(-(r[2] - r[1]) // max_records_per_partition)))
        ]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(e - s for _, s, e in ranges)
        ranges = [
            piece
            for r in ranges
            for piece in divide(r, max(int((r[2] - r[1]) / total * min_partitions + 0.5), 1))
        ]
    return ranges


# --------------------------------------------------------------------------------------------
# Driver side: metadata and offsets
# --------------------------------------------------------------------------------------------


#: The longest pause between two attempts of a driver-side query under ``maxBrokerOutageMs``.
_MAX_RETRY_PAUSE_S = 10.0
#: How long the first attempt of a driver-side query under ``maxBrokerOutageMs`` waits for an
#: answer; each later one twice as long, up to ``fetchOffset.timeoutMs``.
_FIRST_ATTEMPT_S = 5.0


class _Metadata:
    """Topic discovery and offset queries on the driver (one AdminClient, created lazily)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._admin = None
        self._admin_log: Optional[ClientLog] = None

    @property
    def admin(self):
        if self._admin is None:
            self._admin, self._admin_log = _new_client("admin", self.opts)
        return self._admin

    def close(self) -> None:
        self._admin = self._admin_log = None

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
                self._admin.poll(0)  # serves the client's log lines and error events, which wait for it
                self._admin_log.cause = None  # the errors before this answer are over
                return answer
            except KafkaSourceError:  # configuration errors, data loss: not worth retrying
                raise
            except Exception as e:  # KafkaException, timeouts
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
                log.warning("Kafka %s to %s failed (attempt %d, %.0fs without an answer); retrying in "
                            "%.1fs: %s", what, o.bootstrap_servers, attempt, waited, pause, cause)
                time.sleep(pause)
                if outage_s is not None:
                    pause = min(2 * pause, _MAX_RETRY_PAUSE_S)

    def discover(self) -> Tuple[List[TopicPartitionKey], set]:
        """Partitions to read now, and the topics whose metadata was unusable this time."""
        o = self.opts

        def fetch(timeout: float):
            return self.admin.list_topics(timeout=timeout)

        md = self._retrying("metadata request", fetch)
        uncertain = set()
        tps: List[TopicPartitionKey] = []
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
        iso = (IsolationLevel.READ_COMMITTED if o.isolation_level.lower() == "read_committed"
               else IsolationLevel.READ_UNCOMMITTED)
        what = "earliest" if spec == EARLIEST else "latest"

        def fetch(timeout: float):
            req = {TopicPartition(t, p): (OffsetSpec.earliest() if spec == EARLIEST else OffsetSpec.latest())
                   for t, p in tps}
            futures = self.admin.list_offsets(
                req, isolation_level=iso, request_timeout=timeout
            )
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
    md = _Metadata(opts)
    try:
        return md.earliest(tps)
    finally:
        md.close()


def _unknown_topic_code():
    from confluent_kafka import KafkaError

    return KafkaError.UNKNOWN_TOPIC_OR_PART


# --------------------------------------------------------------------------------------------
# Executor side: reading one offset range into Arrow
# --------------------------------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


class _BatchBuilder:
    """Accumulates confluent-kafka messages and emits Arrow record batches. Each chunk of
    messages becomes Arrow arrays at once, through the messages' C accessors (no Python frame
    per message): a record costs about a microsecond here."""

    def __init__(self, topic: str, partition: int, include_headers: bool):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS
        self._seen_rows = 0
        self._seen_bytes = 0
        self.avg_bytes = 0.0
        self._reset()

    def _reset(self):
        self.chunks: list = []  # (keys, values, offsets, timestamp pairs) per chunk of messages
        self.headers: list = []
        self.rows = 0
        self.bytes = 0

    def add(self, msgs: list, offsets: list) -> None:
        from confluent_kafka import Message

        n = len(msgs)
        values = pa.array(list(map(Message.value, msgs)), pa.binary())
        keys = pa.array(list(map(Message.key, msgs)), pa.binary())
        stamps = np.fromiter(itertools.chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n)
        self.chunks.append((keys, values, offsets, stamps.reshape(n, 2)))
        if self.include_headers:
            self.headers += map(Message.headers, msgs)
        data = values.buffers()[2]
        added = data.size if data is not None else 0
        self.rows += n
        self.bytes += added
        self._seen_rows += n
        self._seen_bytes += added
        self.avg_bytes = self._seen_bytes / self._seen_rows

    def flush(self) -> pa.RecordBatch:
        n = self.rows
        keys, values, offsets, stamps = zip(*self.chunks)
        stamps = np.concatenate(stamps)
        # confluent-kafka: 0 not available, 1 create time, 2 log-append time;
        # Spark / Java client: -1, 0, 1.
        cols = [
            pa.concat_arrays(keys),
            pa.concat_arrays(values),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(list(itertools.chain.from_iterable(offsets)), pa.int64()),
            pa.array(stamps[:, 1] * 1000).cast(_ARROW_TS),
            pa.array((stamps[:, 0] - 1).astype(np.int32)),
        ]
        if self.include_headers:
            cols.append(_headers_array(self.headers))
        batch = pa.RecordBatch.from_arrays(cols, schema=self.schema)
        self._reset()
        return batch


def _headers_array(headers: list) -> pa.Array:
    """Spark semantics: null when a record has no headers, else a list of (key, value)."""
    if not any(headers):
        return pa.nulls(len(headers), _ARROW_HEADERS)
    offsets = [0]
    hkeys: list = []
    hvals: list = []
    mask = []
    pos = 0
    for h in headers:
        if h:
            for k, v in h:
                hkeys.append(k)
                hvals.append(v)
            pos += len(h)
            mask.append(False)
        else:
            mask.append(True)
        offsets.append(pos)
    values = pa.StructArray.from_arrays(
        [pa.array(hkeys, pa.string()), pa.array(hvals, pa.binary())],
        fields=list(_ARROW_HEADER_STRUCT),
    )
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), values, type=_ARROW_HEADERS, mask=pa.array(mask, pa.bool_())
    )


def _data_loss(opts: SourceOptions, message: str) -> None:
    """Raise (failOnDataLoss=true) or log a warning."""
    if opts.fail_on_data_loss:
        raise KafkaDataLossError(
            message + " Some data may have been lost because it is not available in Kafka any "
            "more (aged out by retention, or the topic was deleted or recreated) or the offsets "
            "are wrong. If you want the query to continue in such cases, set the source option "
            "'failOnDataLoss' to 'false' (source.fail_on_data_loss: false in a table config)."
        )
    log.warning("%s Continuing because failOnDataLoss is false.", message)


def _start_after_retention(opts: SourceOptions, topic: str, partition: int, start: int, end: int,
                           low: int) -> int:
    """The offset to start reading [start, end) at when the partition now begins at ``low``."""
    if start >= low:
        return start
    _data_loss(
        opts,
        f"Cannot read offsets [{start}, {min(low, end)}) of {_fmt_tp((topic, partition))}: "
        f"the earliest available offset is {low}.",
    )
    return low


def read_partition(
    opts: SourceOptions, topic: str, partition: int, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """Read offsets [start, end) of one topic-partition as Arrow record batches.

    Stops when the record at ``end - 1`` (or any later one) was seen, when the consumer reports
    end-of-partition at or after ``end`` or when its position reaches ``end``: offset gaps
    (compaction, transaction markers, aborted records) never make it wait. Fails with
    :class:`KafkaSourceTimeoutError` after ``maxBrokerOutageMs`` (else ``kafkaConsumer.pollTimeoutMs``)
    without progress.
    """
    if end <= start:
        return
    import confluent_kafka as ck
    from confluent_kafka import KafkaError, TopicPartition

    timeout_s = opts.task_timeout_ms / 1000.0
    where = f"{_fmt_tp((topic, partition))} (offsets [{start}, {end}))"
    consumer = _CONSUMERS.acquire(opts)
    reusable = False
    try:
        # 1. Where does the partition start now? (data-loss check)
        deadline = time.monotonic() + timeout_s
        last_err: Optional[BaseException] = None
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition),
                    timeout=max(0.1, min(10.0, deadline - time.monotonic())),
                    cached=False,
                )
                break
            except ck.KafkaException as e:
                last_err = e
                err = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    _data_loss(opts, f"Cannot read {where}: the partition does not exist any more.")
                    return
                if isinstance(err, KafkaError) and err.code() == KafkaError._UNKNOWN_PARTITION:
                    # A pooled consumer's metadata predates partitions added to the topic since:
                    # a metadata request teaches it the new ones.
                    try:
                        md = consumer.list_topics(topic, timeout=max(0.1, min(10.0, deadline - time.monotonic())))
                        known = md.topics.get(topic)
                        if known is not None and known.error is None and partition not in known.partitions:
                            _data_loss(opts, f"Cannot read {where}: the partition does not exist any more.")
                            return
                    except ck.KafkaException:
                        pass
                if time.monotonic() >= deadline:
                    raise KafkaSourceTimeoutError(
                        f"Timed out after {opts.task_timeout_ms} ms querying the offsets of {where} "
                        f"from {opts.bootstrap_servers}: {opts.redact(str(last_err))} "
                        f"(option {opts.task_timeout_option})"
                    ) from None
                time.sleep(0.2)
        start = _start_after_retention(opts, topic, partition, start, end, low)
        if start >= end:
            return

        # 2. Consume.
        consumer.assign([TopicPartition(topic, partition, start)])
        builder = _BatchBuilder(topic, partition, opts.include_headers)
        batch_size = opts.arrow_batch_size
        max_bytes = opts.arrow_max_batch_bytes
        next_offset = start
        eof_at = -1
        deadline = time.monotonic() + timeout_s
        last_problem = ""
        done = False
        while not done:
            want = min(batch_size - builder.rows, end - next_offset, 100_000)
            if builder.avg_bytes:  # large records: keep the batch near arrowMaxBatchBytes
                want = min(want, int((max_bytes - builder.bytes) / builder.avg_bytes))
            else:  # record size not known yet: a small first chunk
                want = min(want, 100)
            want = max(1, want)
            msgs = consumer.consume(num_messages=want, timeout=0.1)
            now = time.monotonic()
            if msgs:
                errs = [m for m in msgs if m.error() is not None]
                if errs:
                    msgs = [m for m in msgs if m.error() is None]
                    for m in errs:
                        e = m.error()
                        code = e.code()
                        if code == KafkaError._PARTITION_EOF:
                            eof_at = m.offset()
                            if eof_at >= end:
                                done = True
                            deadline = now + timeout_s
                        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            _data_loss(opts, f"Cannot read {where} from offset {next_offset}: "
                                             f"offset out of range ({e.str()}).")
                            done = True  # failOnDataLoss=false resets to earliest: stop here
                        elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                      KafkaError._UNKNOWN_TOPIC):
                            _data_loss(opts, f"Cannot read {where}: the partition does not exist any more.")
                            done = True
                        elif e.fatal():
                            raise KafkaSourceError(f"fatal Kafka error reading {where}: {opts.redact(e.str())}")
                        else:
                            last_problem = opts.redact(e.str())
                if msgs:
                    offsets = list(map(ck.Message.offset, msgs))
                    if offsets[0] < next_offset:  # never hand out a record twice / from before start
                        k = bisect.bisect_left(offsets, next_offset)
                        msgs, offsets = msgs[k:], offsets[k:]
                if msgs:
                    if offsets[-1] >= end:
                        k = bisect.bisect_left(offsets, end)
                        msgs, offsets = msgs[:k], offsets[:k]
                        done = True
                    if msgs:
                        builder.add(msgs, offsets)
                        next_offset = offsets[-1] + 1
                        if next_offset >= end:
                            done = True
                    deadline = now + timeout_s
            if not done and not msgs:
                # Gaps: the position may have passed `end` without a record at end - 1.
                try:
                    pos = consumer.position([TopicPartition(topic, partition)])[0].offset
                    if pos >= end:
                        done = True
                except ck.KafkaException:
                    pass
                if not done and now >= deadline:
                    detail = f"; last error: {last_problem}" if last_problem else ""
                    eof = f"; broker reports the partition ends at {eof_at}" if eof_at >= 0 else ""
                    raise KafkaSourceTimeoutError(
                        f"Timed out after {opts.task_timeout_ms} ms without progress reading {where} "
                        f"from {opts.bootstrap_servers}: next offset {next_offset}{eof}{detail}. "
                        f"Is the broker reachable? (option {opts.task_timeout_option})"
                    )
            if builder.rows and (builder.rows >= batch_size or builder.bytes >= max_bytes or done):
                yield builder.flush()
        reusable = True
    finally:
        _CONSUMERS.release(opts, consumer, reusable)


def read_ranges(opts: SourceOptions, ranges: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """The records of rows of ``OFFSET_RANGES_SCHEMA``, as Arrow record batches."""
    for topic, partition, start, end in zip(*(ranges.column(name).to_pylist() for name in OFFSET_RANGES_SCHEMA.names)):
        yield from read_partition(opts, topic, partition, start, end)


class _ConsumerPool:
    """Consumers kept by an executor's Python worker between tasks, per client configuration.

    A task reads one offset range and hands its consumer back; the next task with the same
    options takes it and assigns its own range. Connecting, authenticating and fetching
    metadata again for every micro-batch would cost more than reading a small batch. A
    consumer that saw an error is closed instead; idle ones are closed after `IDLE_SECONDS`.
    """

    IDLE_SECONDS = 120.0
    MAX_IDLE = 4

    def __init__(self):
        self._idle: Dict[tuple, List[Tuple[float, object]]] = {}

    @staticmethod
    def _key(opts: SourceOptions) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in opts.consumer_config().items() if k != "group.id"))

    def acquire(self, opts: SourceOptions):
        self._close_stale()
        idle = self._idle.get(self._key(opts))
        if idle:
            return idle.pop()[1]
        return _new_client("consumer", opts)[0]

    def release(self, opts: SourceOptions, consumer, reusable: bool) -> None:
        idle = self._idle.setdefault(self._key(opts), [])
        if reusable and len(idle) < self.MAX_IDLE:
            try:
                consumer.unassign()  # stop prefetching what nobody will read
                idle.append((time.monotonic(), consumer))
                return
            except Exception:
                pass
        _close_quietly(consumer)

    def _close_stale(self) -> None:
        cutoff = time.monotonic() - self.IDLE_SECONDS
        for idle in self._idle.values():
            for entry in [e for e in idle if e[0] < cutoff]:
                idle.remove(entry)
                _close_quietly(entry[1])


def _close_quietly(consumer) -> None:
    try:
        consumer.close()
    except Exception:  # pragma: no cover
        pass


_CONSUMERS = _ConsumerPool()


# --------------------------------------------------------------------------------------------
# Spark data source
# --------------------------------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch stream reader. Offsets: ``{"topic": {"partition": nextOffsetToRead}}``."""

    def __init__(self, opts: SourceOptions):
        configure_worker_logging()  # made in a Python process of Spark's, not the driver's
        self.opts = opts
        self._md: Optional[_Metadata] = None
        self._available_now_target: Optional[OffsetMap] = None
        self._latest_seen: Optional[OffsetMap] = None
        self._last_planned_end: Optional[OffsetMap] = None
        self._initial: Optional[OffsetMap] = None
        self._first_batch_max: Optional[int] = None  # a query's first batch may read more
        self._first_batch_planned = False

    def __getstate__(self):
        # Sent to executors for read(): no client handles, no driver state.
        return {"opts": self.opts}

    def __setstate__(self, state):
        self.__init__(state["opts"])

    def __repr__(self) -> str:
        return f"KafkaStreamReader({self.opts!r})"

    @property
    def md(self) -> _Metadata:
        if self._md is None:
            self._md = _Metadata(self.opts)
        return self._md

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        tps, _ = self.md.discover()
        spec = self.opts.starting_offsets
        if spec == "earliest":
            offsets = self.md.earliest(tps)
        elif spec == "latest":
            offsets = self.md.latest(tps)
        else:
            assert isinstance(spec, dict)
            present = set(tps)
            missing = sorted(tp for tp in spec if tp not in present)
            if missing:
                _data_loss(
                    self.opts,
                    "option 'startingOffsets' names partitions that do not exist: "
                    + ", ".join(_fmt_tp(tp) for tp in missing) + ".",
                )
            want_earliest = [tp for tp in tps if spec.get(tp, EARLIEST) == EARLIEST]
            want_latest = [tp for tp in tps if spec.get(tp) == LATEST]
            offsets = {tp: spec[tp] for tp in tps if spec.get(tp, EARLIEST) >= 0}
            offsets.update(self.md.earliest(want_earliest))
            offsets.update(self.md.latest(want_latest))
        self._initial = offsets
        if not self._first_batch_planned:  # Spark may ask for the initial offsets again later
            self._first_batch_max = self.opts.initial_batch_max_offsets
        log.info("Kafka source initial offsets: %s", offsets_to_json(offsets))
        return offsets_to_json(offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        tps, _ = self.md.discover()
        self._available_now_target = self.md.latest(tps)
        log.info("Trigger.AvailableNow: reading up to %s", offsets_to_json(self._available_now_target))

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _fetch_latest(self, start: OffsetMap) -> OffsetMap:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        tps, uncertain = self.md.discover()
        latest = self.md.latest(tps)
        for tp, off in start.items():  # metadata hiccup: carry the start offset over
            if tp[0] in uncertain and tp not in latest:
                latest[tp] = off
        return latest

    def latestOffset(self, start: Optional[dict] = None, limit: Optional[ReadLimit] = None) -> dict:
        if start is None:  # PySpark < 4.2: no start, no read limit
            start_map = self._last_planned_end or self._initial or {}
            limit = self.getDefaultReadLimit() if start_map else ReadAllAvailable()
        else:
            start_map = offsets_from_json(start)
        latest = self._fetch_latest(start_map)

        gone = sorted(tp for tp in start_map if tp not in latest)
        if gone:
            _data_loss(self.opts, "Partitions are gone: " + ", ".join(
                f"{_fmt_tp(tp)} (the offset to read next is {start_map[tp]})" for tp in gone)
                + " (the topic was deleted or is no longer assigned).")
        backwards = sorted(tp for tp, off in start_map.items() if tp in latest and latest[tp] < off)
        if backwards and self._available_now_target is None:
            # A new leader may briefly report an older end offset: ask once more before failing.
            time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
            latest.update(self.md.latest(backwards))
            backwards = [tp for tp in backwards if latest[tp] < start_map[tp]]
        if backwards:
            earliest = self.md.earliest(backwards)
            _data_loss(
                self.opts,
                "; ".join(
                    f"{_fmt_tp(tp)}: the offset to read next is {start_map[tp]} but the broker holds "
                    f"{_fmt_held(earliest[tp], latest[tp])} (the topic was recreated or the partition "
                    "truncated)"
                    for tp in backwards
                ) + ".",
            )
            start_map = {**start_map, **earliest}  # tolerated: `partitions` reads from the earliest

        self._latest_seen = latest
        if isinstance(limit, ReadMaxRows):
            most = int(limit.max_rows)
            if self._first_batch_max is not None:
                most = max(most, self._first_batch_max)
            end = rate_limit(most, start_map, latest, self.md.earliest)
            if end != start_map:
                self._first_batch_max = None
                self._first_batch_planned = True
        else:
            end = latest
        return offsets_to_json(end)

    def reportLatestOffset(self) -> Optional[dict]:
        return offsets_to_json(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s = offsets_from_json(start)
        e = offsets_from_json(end)
        self._last_planned_end = e
        new = [tp for tp in e if tp not in s]
        if new:
            s.update(self.md.earliest(new))
        went_back = [tp for tp in e if e[tp] < s[tp]]  # only planned when failOnDataLoss=false
        restart = self.md.earliest(went_back) if went_back else {}
        ranges = []
        for tp in sorted(e):
            if tp in restart:
                log.warning("%s went back from offset %d to %d (data loss tolerated by "
                            "failOnDataLoss=false): reading it from its earliest offset %d",
                            _fmt_tp(tp), s[tp], e[tp], restart[tp])
                if e[tp] > restart[tp]:
                    ranges.append((tp, restart[tp], e[tp]))
            elif e[tp] > s[tp]:
                ranges.append((tp, s[tp], e[tp]))
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [KafkaInputPartition(tp[0], tp[1], a, b) for tp, a, b in ranges]

    def read(self, partition: KafkaInputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if self.opts.offset_ranges:
            return iter([pa.RecordBatch.from_pydict(
                {"topic": [partition.topic], "partition": [partition.partition], "from_offset": [partition.start],
                 "until_offset": [partition.end]}, schema=_ARROW_OFFSET_RANGES)])
        configure_worker_logging()
        return read_partition(self.opts, partition.topic, partition.partition, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint (and the sink's table commits); nothing to do.
        pass

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None


class KafkaArrowDataSource(DataSource):
    """``spark.readStream.format("kafka-arrow")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _opts(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def schema(self) -> StructType:
        opts = self._opts()
        if opts.offset_ranges:
            return OFFSET_RANGES_SCHEMA
        return KAFKA_SCHEMA if opts.include_headers else KAFKA_SCHEMA_WITHOUT_HEADERS

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self._opts())

    def __repr__(self) -> str:
        return f"KafkaArrowDataSource({redact_options(dict(self.options))})"


def register_kafka_source(spark) -> str:
    """Register the source with ``spark`` and return its format name (``kafka-arrow``)."""
    spark.dataSource.register(KafkaArrowDataSource)
    return SOURCE_NAME


__all__ = [
    "SOURCE_NAME",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITHOUT_HEADERS",
    "ARROW_SCHEMA",
    "OFFSET_RANGES_SCHEMA",
    "read_ranges",
    "KafkaArrowDataSource",
    "KafkaStreamReader",
    "KafkaInputPartition",
    "SourceOptions",
    "KafkaSourceError",
    "KafkaDataLossError",
    "KafkaSourceTimeoutError",
    "register_kafka_source",
    "earliest_offsets",
    "read_partition",
    "rate_limit",
    "split_ranges",
    "offsets_to_json",
    "offsets_from_json",
    "redact_options",
    "redact_text",
]
