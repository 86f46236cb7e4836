"""librdkafka's log lines and error events, through Python logging.

Left alone, librdkafka writes its log lines to stderr itself: while a broker is down it logs a
"Connection refused" line for each reconnect, many a second, on the driver and on every
executor. Each Kafka client the job makes is configured with `client_config` instead:

- librdkafka's log lines go to the `streamer.librdkafka` logger at DEBUG (`--log-level DEBUG`
  shows them). They are served by the client's poll or consume calls, on the thread making them.
- Its error events are kept as the client's latest `cause`, and its latest `refusal` (a failed
  login, an untrusted TLS certificate). The job reports an outage itself, one line per retry of
  its own naming the brokers and that cause (`streamer.kafka.admin.KafkaMetadata`), and a
  refusal in the one line it fails with (`streamer.kafka.refusals`).
- Other errors that are not about reaching a broker (fatal errors, ...) are logged at WARNING,
  once per client and message: librdkafka retries those too, and they need a person.

`configure_worker_logging` gives Spark's Python workers (where the source's clients run) the
driver's log format and level, so their lines reach the console as the driver's do.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from types import TracebackType

from streamer.logs.lines import LOG_FORMAT_ENV, LOG_LEVEL_ENV, formatter

LIBRDKAFKA = logging.getLogger("streamer.librdkafka")
log = logging.getLogger(__name__)


_worker_logging_configured = False


def connectivity_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(
        {
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._RESOLVE,
            KafkaError._TIMED_OUT,
            KafkaError._WAIT_COORD,
            KafkaError.NETWORK_EXCEPTION,
        }
    )


#: A broker's TLS alert that refuses this client's certificate, or its lack of one (mutual TLS):
#: librdkafka reports it as a transport error, like a broker that is down.
CERTIFICATE_REFUSED = re.compile(
    r"alert (?:bad certificate|certificate required|unknown ca|certificate (?:revoked|expired|unknown)"
    r"|unsupported certificate|access denied)"
)


def is_refusal(code: int, text: str) -> bool:
    """Whether an error event says that a broker refused this client's login or certificate, or
    that this client refused the broker's TLS certificate (older librdkafka releases call that a
    transport error)."""
    from confluent_kafka import KafkaError

    refusals = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
    return code in refusals or "certificate verify failed" in text or CERTIFICATE_REFUSED.search(text) is not None


class ClientLog:
    """The log lines and error events of one Kafka client (see the module's doc). Passed as the
    client's `logger`, with `on_error` as its `error_cb`."""

    def __init__(self, client: str):
        self.client = client
        # The latest error event, e.g. "host:port/bootstrap: Connect to ... failed: Connection refused".
        self.cause: str | None = None
        self.refusal: tuple[int, str] | None = None  # librdkafka's code and text
        self._reported: set[str] = set()

    def log(self, level: int, msg: str, *args, **kwargs) -> None:
        """confluent-kafka's call for each line: `logger.log(level, "%s [%s] %s", facility, client, text)`."""
        if LIBRDKAFKA.isEnabledFor(logging.DEBUG):
            LIBRDKAFKA.debug(msg, *args)

    def on_error(self, error) -> None:
        """confluent-kafka's `error_cb`."""
        self.on_error_event(error.code(), error.fatal(), error.str())

    def on_error_event(self, code: int, fatal: bool, text: str) -> None:
        """An error event of the client, by its librdkafka code."""
        self.cause = text
        refused = is_refusal(code, text)
        if refused:
            self.refusal = (code, text)
        if fatal or not (refused or code in connectivity_codes()):
            if text not in self._reported:
                self._reported.add(text)
                log.warning("Kafka %s: %s", self.client, text)
            return
        LIBRDKAFKA.debug("%s error: %s", self.client, text)


def client_config(conf: dict, client: str) -> tuple[dict, ClientLog]:
    """`conf` with librdkafka's logs and errors routed through `ClientLog`, and that log."""
    client_log = ClientLog(client)
    return {**conf, "logger": client_log, "error_cb": client_log.on_error}, client_log


ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]
#: What a Spark Python worker raises when Spark's JVM has closed its socket.
_JVM_GONE = (BrokenPipeError, ConnectionResetError, EOFError)


def _quiet_once_the_jvm_left(previous: ExceptHook) -> ExceptHook:
    """An excepthook that prints nothing for `_JVM_GONE`: a worker whose JVM stopped (a job
    ending, with or without an error it has told itself) fails to tell it so, and would print a
    traceback of PySpark's own, cut off where the JVM then killed it."""

    def hook(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        if not issubclass(kind, _JVM_GONE):
            previous(kind, value, traceback)

    return hook


def configure_worker_logging() -> None:
    """In a Spark Python worker, the driver's log format (`MOR_STREAMER_LOG_FORMAT`) on stderr at
    the driver's level (`MOR_STREAMER_LOG_LEVEL`, WARNING when unset), once per process, and no
    traceback at its exit once Spark's JVM has gone. Nothing happens in a process whose logging
    is set up already (the driver's, a test's)."""
    global _worker_logging_configured
    if _worker_logging_configured:
        return
    _worker_logging_configured = True
    if logging.getLogger().handlers or logging.getLogger("streamer").handlers:
        return
    sys.excepthook = _quiet_once_the_jvm_left(sys.excepthook)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(os.environ.get(LOG_FORMAT_ENV, "text")))
    ours = logging.getLogger("streamer")
    ours.addHandler(handler)
    ours.setLevel(os.environ.get(LOG_LEVEL_ENV, "WARNING"))
    ours.propagate = False
