"""Heartbeats of pending writes, where Apache Hudi keeps them: `.hoodie/.heartbeat/<instant>`,
an empty file its writer rewrites every `interval_seconds` while the write is in progress.

With several writers on a table a pending deltacommit may be another live writer's, so a writer
rolls back only those whose heartbeat stopped (Hudi's `hoodie.cleaner.policy.failed.writes=LAZY`):
the file is absent or older than `expiry_seconds`, judged by its file time as Hudi judges it
(Hudi's default: 60 s between beats, two missed beats tolerated, so 120 s). Hudi's writers judge
ours the same way.
"""

from __future__ import annotations

import logging
import threading
import time

from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR

log = logging.getLogger(__name__)

HEARTBEAT_DIR = f"{METADATA_DIR}/.heartbeat"
DEFAULT_INTERVAL_SECONDS = 15.0
DEFAULT_EXPIRY_SECONDS = 120.0


def heartbeat_path(instant: str) -> str:
    return f"{HEARTBEAT_DIR}/{instant}"


def heartbeat_expired(storage: Storage, instant: str, expiry_seconds: float = DEFAULT_EXPIRY_SECONDS) -> bool:
    """Whether the write at `instant` has stopped: no heartbeat, or none for `expiry_seconds`."""
    modified = storage.modified_ns(heartbeat_path(instant))
    return modified is None or time.time() - modified / 1e9 > expiry_seconds


class Heartbeats:
    """The heartbeats of one writer's pending instants, beaten from a daemon thread."""

    def __init__(self, storage: Storage, interval_seconds: float = DEFAULT_INTERVAL_SECONDS):
        self._storage = storage
        self._interval = interval_seconds
        self._instants: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, instant: str) -> None:
        """Beat for `instant` from now on; its first beat is written before this returns."""
        self._beat(instant)
        with self._lock:
            self._instants.add(instant)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="write-heartbeats", daemon=True)
                self._thread.start()

    def stop(self, instant: str) -> None:
        """The write at `instant` ended (completed or rolled back): its heartbeat goes."""
        with self._lock:
            self._instants.discard(instant)
        self._storage.delete(heartbeat_path(instant))

    def forget(self, instant: str) -> None:
        """Stop beating for `instant`, whose heartbeat is another writer's (it began the same
        instant first), leaving the file to it."""
        with self._lock:
            self._instants.discard(instant)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _beat(self, instant: str) -> None:
        self._storage.write_bytes(heartbeat_path(instant), b"")

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:  # held while beating: a heartbeat stopped meanwhile is not written again
                for instant in sorted(self._instants):
                    try:
                        self._beat(instant)
                    except OSError as e:
                        log.warning("heartbeat of %s %s not written: %s", self._storage.base_uri, instant, e)
