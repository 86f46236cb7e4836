"""The commit lock of optimistic concurrency: one writer at a time checks for conflicts and
completes its instant, whatever writes the table.

The lock is the file Apache Hudi's `FileSystemBasedLockProvider` uses by default,
`.hoodie/lock`, taken by an exclusive create and released by deleting it, so a Hudi writer
configured with that provider and our writers exclude each other. Ours holds a `LockRecord` (who,
its fencing token, until when); Hudi's holds its own text and expires by the file's time after
`hoodie.write.lock.filesystem.expire` minutes, which `foreign_expiry_seconds` stands for here.

A lock whose holder's process is gone from this host (killed while holding it) is taken over at
once; one held from another host, after its expiry.

Fencing: each holder also makes `.hoodie/.aux/commit-fences/<token>/`, and completes its instant
through a file staged in that directory (`Storage.create_via`: written there, then hard-linked
into the timeline). A writer that finds the lock expired moves the lock file aside, moves the
fence directory of the holder it names away, then deletes the lock file. So a holder that stalled past its expiry (a long GC pause, SIGSTOP)
and then resumes cannot complete: its staged file has nowhere to be written, or its link has
nothing to link. Its commit either completed before its successor took over, which then sees it,
or not at all.

Local file systems: an object store has neither the atomic rename nor the link this needs; there
`table.storage.object_store_lock` takes the same lock with conditional writes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass

from table.errors import CommitLockError, InvalidRequestError
from table.storage.conditional import ConditionalWrites
from table.storage.file_io import Storage
from table.storage.layout import AUX_DIR, METADATA_DIR
from table.storage.lease import process_gone, process_start_time

log = logging.getLogger(__name__)

LOCK_PATH = f"{METADATA_DIR}/lock"
FENCES_DIR = f"{AUX_DIR}/commit-fences"
DEFAULT_TTL_SECONDS = 60.0
DEFAULT_WAIT_SECONDS = 120.0
#: Hudi's lock file carries no expiry of its own: it is judged by its file time after this long.
DEFAULT_FOREIGN_EXPIRY_SECONDS = 60.0


@dataclass(frozen=True)
class LockRecord:
    token: str
    description: str
    host: str
    pid: int
    expires_at: float  # seconds since the epoch
    process_start: str | None = None

    @classmethod
    def ours(cls, token: str, description: str, ttl_seconds: float) -> LockRecord:
        """The record of this process holding the lock for `ttl_seconds` from now."""
        pid = os.getpid()
        return cls(token, description, socket.gethostname(), pid, time.time() + ttl_seconds, process_start_time(pid))

    def expired(self) -> bool:
        """Past its expiry, or its holder's process is gone from this host (a writer killed while
        holding it: its lock is taken over at once, not after the expiry)."""
        return time.time() > self.expires_at or process_gone(self.host, self.pid, self.process_start)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def from_bytes(data: bytes) -> LockRecord | None:
        """Ours, or None: another lock provider's text (Hudi's LockInfo), or a torn write."""
        try:
            return LockRecord(**json.loads(data))
        except (ValueError, TypeError):
            return None

    def holder(self) -> str:
        return f"{self.description} (host {self.host}, pid {self.pid})"


@dataclass(frozen=True)
class Fence:
    """The holder's proof that it still holds the lock, checked in the step that completes."""

    storage: Storage
    token: str

    def create(self, rel: str, data: bytes) -> None:
        """Create `rel` (a completed instant) unless this holder has been fenced out."""
        staged = f"{FENCES_DIR}/{self.token}/{rel.rsplit('/', 1)[-1]}"
        try:
            self.storage.create_via(staged, rel, data)
        except FileNotFoundError:
            raise CommitLockError(
                f"the commit lock of {self.storage.base_uri} was taken over after it expired; {rel} was not written"
            ) from None


def require_atomic_storage(storage: Storage) -> None:
    """Optimistic concurrency needs a lock the storage itself guarantees: an exclusive create and
    an atomic rename on a local disk, conditional writes on an S3-compatible store
    (`table.storage.object_store_lock`). Refuse where there is neither."""
    if storage.is_local:
        return
    if storage.base_uri.startswith(("s3://", "s3a://")):
        ConditionalWrites(storage)  # refuses by name without the client that sends the conditions
        return
    raise InvalidRequestError(
        f"{storage.base_uri}: several writers on one table (optimistic concurrency) need a commit lock the "
        "storage guarantees, which this engine takes on local file systems and S3-compatible stores only; "
        "keep one writer per table here (the default)"
    )


def probe_exclusive_create(storage: Storage) -> None:
    """Create one file twice where the lock lives: a file system that lets the second creation
    through (some network file systems) cannot hold the commit lock, and is refused by name."""
    probe = f"{FENCES_DIR}/probe-{uuid.uuid4().hex}"
    storage.create(probe, b"")
    try:
        storage.create(probe, b"")
    except FileExistsError:
        return
    finally:
        storage.delete(probe)
    raise InvalidRequestError(
        f"{storage.base_uri}: a file created twice there was created both times: this file system does not "
        "honour exclusive creation, which the commit lock of optimistic concurrency needs; keep one writer per "
        "table (table.concurrency: single_writer)"
    )


class CommitLock:
    """Taken around a commit's conflict check and completion; see the module's doc."""

    def __init__(
        self,
        storage: Storage,
        description: str,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        foreign_expiry_seconds: float = DEFAULT_FOREIGN_EXPIRY_SECONDS,
    ):
        if not storage.is_local:
            raise InvalidRequestError(f"{storage.base_uri}: this commit lock is for local file systems")
        self._storage = storage
        self._description = description
        self._ttl = ttl_seconds
        self._wait = wait_seconds
        self._foreign_expiry = foreign_expiry_seconds

    def probe(self) -> None:
        probe_exclusive_create(self._storage)

    def create_new(self, rel: str, data: bytes) -> None:
        """Create a file no other writer may create too: the file system's exclusive create."""
        self._storage.create(rel, data)

    @contextmanager
    def held(self) -> Iterator[Fence]:
        """The lock, held until the block ends; its `Fence` completes the instant."""
        token = uuid.uuid4().hex
        self._acquire(token)
        try:
            yield Fence(self._storage, token)
        finally:
            self._release(token)

    def _acquire(self, token: str) -> None:
        deadline = time.monotonic() + self._wait
        pause = 0.005
        fence = f"{FENCES_DIR}/{token}"
        while True:
            self._storage.makedirs(fence)
            record = LockRecord.ours(token, self._description, self._ttl)
            try:
                self._storage.create(LOCK_PATH, record.to_bytes())
                return
            except FileExistsError:
                self._storage.delete_dir(fence)
            held_by = self._break_if_expired()
            if held_by is None:
                continue
            if time.monotonic() > deadline:
                raise CommitLockError(
                    f"the commit lock of {self._storage.base_uri} is held by {held_by}; waited {self._wait:.0f}s for it"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _break_if_expired(self) -> str | None:
        """Who holds the lock, or None once it is free (an expired holder fenced out and removed)."""
        try:
            data = self._storage.read_bytes(LOCK_PATH)
        except FileNotFoundError:
            return None
        record = LockRecord.from_bytes(data)
        if record is not None:
            if not record.expired():
                return record.holder()
        else:
            modified = self._storage.modified_ns(LOCK_PATH)
            if modified is None:
                return None
            if time.time() - modified / 1e9 <= self._foreign_expiry:
                return "another lock provider's writer (Apache Hudi's FileSystemBasedLockProvider)"
        # Expired: fence out the holder, then take its lock file away. Moved aside, not deleted, so
        # that a lock taken in between by someone else is fenced out too, never left unfenced.
        aside = f"{LOCK_PATH}.expired-{uuid.uuid4().hex}"
        try:
            self._storage.rename(LOCK_PATH, aside)
        except FileNotFoundError:
            return None
        moved = LockRecord.from_bytes(self._storage.read_bytes(aside))
        if moved is not None:
            with suppress(FileNotFoundError):
                self._storage.rename(f"{FENCES_DIR}/{moved.token}", f"{FENCES_DIR}/{moved.token}.fenced")
            log.warning(
                "took over the commit lock of %s from %s, expired or gone", self._storage.base_uri, moved.holder()
            )
        self._storage.delete(aside)
        if moved is not None:
            self._storage.delete_dir(f"{FENCES_DIR}/{moved.token}.fenced")
        return None

    def _release(self, token: str) -> None:
        with suppress(FileNotFoundError):
            record = LockRecord.from_bytes(self._storage.read_bytes(LOCK_PATH))
            if record is not None and record.token == token:
                self._storage.delete(LOCK_PATH)
        self._storage.delete_dir(f"{FENCES_DIR}/{token}")
