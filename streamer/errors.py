"""Errors the streamer raises, each naming what was wrong and, where it can, what to change.

Every one is a `StreamerError`; each also keeps the built-in kind it is (a `ValueError` for a
bad setting, a `RuntimeError` for a failure to run), so callers that catch those still do.
"""


class StreamerError(Exception):
    """Base of the streamer's errors."""


# -- starting ------------------------------------------------------------------------------------


class ConfigError(StreamerError, ValueError):
    """Every problem found in one or more config files, one ``<file>: <key.path>: ...`` a line."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


class StartupError(StreamerError, RuntimeError):
    """A table job cannot start; the message names the config file and what to change."""


class ConfigValueError(StreamerError, ValueError):
    """A config value a validator refuses: pydantic reports the message at the value's key (inside
    a validator, raising a ValueError is how a value is refused)."""


class InvalidArgumentError(StreamerError, ValueError):
    """A command's option, or a call's argument, that cannot be used; the message names it."""


class ConnectorUnavailableError(StreamerError, RuntimeError):
    """Spark could not start with the connector it was asked to fetch; says what to do."""


# -- the sandbox: a local Apache Kafka for trying things out ----------------------------------------


class BrokerStartError(StreamerError, RuntimeError):
    """The local broker did not come up: what is missing (Java, Maven) and what to install, or
    the tail of its log."""


class MavenFetchError(StreamerError, RuntimeError):
    """Maven could not fetch an artifact set; the message names the artifact(s) and Maven's errors."""


class ServerNotRunningError(StreamerError, RuntimeError):
    """A server was asked for what only a running one has (its address, its process)."""


class TopicTimeoutError(StreamerError, TimeoutError):
    """A topic created or deleted did not reach that state on the broker in time."""


class ProduceError(StreamerError, RuntimeError):
    """Records a producer sent that the broker did not acknowledge; the message says how many and why."""


# -- Kafka ---------------------------------------------------------------------------------------


class BrokersUnreachableError(StreamerError, RuntimeError):
    """The brokers gave no answer in time: `brokers` names them, `cause` is librdkafka's last word
    on why (e.g. "Connect to ipv4#10.0.0.5:9092 failed: Connection refused")."""

    def __init__(self, brokers: str, cause: str):
        super().__init__(f"{brokers} unreachable ({cause})")
        self.brokers = brokers
        self.cause = cause


class KafkaSourceError(StreamerError):
    """Misconfiguration or failure of the Kafka source."""


class KafkaDataLossError(KafkaSourceError):
    """Offsets to be read are no longer available (and ``failOnDataLoss`` is true)."""


class KafkaSourceTimeoutError(KafkaSourceError):
    """The broker did not answer / the partition made no progress within the time limit."""


class KafkaAuthenticationError(KafkaSourceError):
    """The broker and this client do not trust each other: the broker refused the login (SASL),
    or this client does not trust the broker's TLS certificate. Waiting cannot help: a setting
    must change, and the message says which."""


# -- records and schemas -------------------------------------------------------------------------


class BadRecordError(StreamerError, RuntimeError):
    """A record could not be decoded and the table's policy is `fail`."""


class SchemaRegistryError(StreamerError, RuntimeError):
    """The registry could not answer the question; retrying later may succeed."""


class UnsupportedSchemaTypeError(StreamerError, ValueError):
    """The registry holds the schema, but it is not Avro (PROTOBUF, JSON): it cannot be read here."""

    def __init__(self, message: str, schema_type: str):
        super().__init__(message)
        self.schema_type = schema_type


class DecoderSettingsError(StreamerError, ValueError):
    """A decoder cannot be made from these settings (format, schemas, the fields the table needs)."""


class SchemaEvolutionError(StreamerError, RuntimeError):
    """Records of a writer schema that evolves the table's schema, which could not be applied."""


# -- writing -------------------------------------------------------------------------------------


class TableWriteError(StreamerError, RuntimeError):
    """The table's storage refused a write (full, read-only, no permission); the batch was not
    committed."""


class StopRequestedError(StreamerError, RuntimeError):
    """The application is stopping; the batch is abandoned before anything is written.

    Less a failure than a signal, but it must travel as an exception: the sink raises it from
    `foreachBatch` so that Spark does not record the batch (the next run replays it), and the
    application, which recognises it, reports no failure for it."""
