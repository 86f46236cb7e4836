"""The local broker of `streamer kafka start|stop|status` and of the demo: one Apache Kafka node
that outlives the command that started it, with its data in a known directory until told to
delete it.

The directory (`default_dir()`, or `--dir`) holds the broker's settings, its data, its log
(`server.log`) and `broker.json`, which names the running process and its bootstrap address, so
that any later command finds it. The broker listens on 127.0.0.1:9092, Kafka's usual port, when
that is free, else on a free port it keeps from then on; topics a producer writes to are created
on first use, and records are kept whatever their age.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from streamer.errors import BrokerStartError
from streamer.sandbox.kafka_broker import KAFKA_VERSION, KafkaBroker
from streamer.sandbox.topics import wait_for_broker

HOST = "127.0.0.1"
USUAL_PORT = 9092
STATE_FILE = "broker.json"
STOP_SECONDS = 30.0


def default_dir() -> Path:
    """`~/.local/state/mor-streamer/kafka` (`$XDG_STATE_HOME/mor-streamer/kafka` when set)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "mor-streamer" / "kafka"


@dataclass(frozen=True)
class LocalBroker:
    """A local broker that was started: where it listens, its process and its directory."""

    bootstrap: str
    pid: int
    directory: str
    version: str = KAFKA_VERSION

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "server.log"


def running(directory: Path) -> LocalBroker | None:
    """The broker started in `directory`, if its process still runs."""
    try:
        broker = LocalBroker(**json.loads((directory / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return broker if _is_broker_process(broker.pid, directory) else None


def start(directory: Path, port: int | None = None, timeout: float = 120.0) -> tuple[LocalBroker, bool]:
    """The broker of `directory`, started unless it runs already (then the second value is
    False). `port` applies to a new directory only: None takes 9092 when free, 0 any free port."""
    directory = directory.resolve()
    found = running(directory)
    if found is not None:
        return found, False
    broker = KafkaBroker(
        directory, host=HOST, port=port or None, startup_timeout=timeout, die_with_parent=False, auto_create_topics=True
    )
    if not broker.has_data:
        if port is None and _is_free(USUAL_PORT):
            broker.port = USUAL_PORT
        elif broker.port is not None and not _is_free(broker.port):
            raise BrokerStartError(
                f"port {broker.port} on {HOST} is in use: choose another with --port, or --port 0 for any free port"
            )
    broker.start()
    started = LocalBroker(broker.bootstrap, broker.running_pid(), str(directory))
    (directory / STATE_FILE).write_text(json.dumps(asdict(started)) + "\n")
    broker.detach()
    return started, True


def stop(directory: Path, delete_data: bool = False) -> LocalBroker | None:
    """Stop the broker of `directory` (SIGTERM: a controlled shutdown; SIGKILL after 30 s), and
    with `delete_data` remove the directory. Returns the broker that was running, if any."""
    directory = directory.resolve()
    found = running(directory)
    if found is not None:
        _terminate(found.pid, directory)
    (directory / STATE_FILE).unlink(missing_ok=True)
    if delete_data and directory.exists():
        if not (directory / "server.properties").is_file():
            raise BrokerStartError(f"{directory} does not hold a local broker's data; not deleting it")
        shutil.rmtree(directory)
    return found


def answers(broker: LocalBroker, timeout: float = 5.0) -> bool:
    """Whether the broker answers a metadata request within `timeout` seconds."""
    try:
        wait_for_broker(broker.bootstrap, timeout)
        return True
    except BrokerStartError:
        return False


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _is_broker_process(pid: int, directory: Path) -> bool:
    """Whether `pid` is a live Kafka server of `directory` (not a process that reused the pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    zombie = status.rsplit(")", 1)[-1].split()[0] == "Z"
    return not zombie and b"kafka.Kafka" in command and str(directory / "server.properties").encode() in command


def _terminate(pid: int, directory: Path) -> None:
    for sig, wait in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _is_broker_process(pid, directory):
                return
            time.sleep(0.1)
    raise BrokerStartError(f"the broker (pid {pid}) did not stop")
