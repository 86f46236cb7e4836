"""The commit lock of optimistic concurrency on an object store, built on conditional writes
(`table.storage.conditional`): the same `.hoodie/lock` and `LockRecord` as on a local disk
(`table.storage.commit_lock`), taken and completed without rename or link, which object stores
lack.

- **Taking it** is one PUT with `If-None-Match: *`: of writers racing for it, the store lets one
  create it.
- **Releasing it** is one DELETE.
- **An expired lock** (past its expiry, or its holder's process gone from this host) is taken
  over by replacing it with `If-Match: <the etag read>`: of writers racing to take it over, one
  replaces it, the others find it changed and wait for the new holder. That needs the store to
  check and write in one step, as S3 does; S3Proxy's file-system backend, which the tests run,
  checks then writes (its `If-None-Match` is one step, a hard link).
- **Completing** (the fence): the completed instant is created with `If-None-Match: *`, and only
  while the holder has held the lock for less than half its expiry by its own clock; a holder
  past that does not complete, and releases nothing, as it may have been taken over.

So an uncontended commit costs the lock two requests, and the completion one conditional PUT in
place of a HEAD and a PUT.

What a local disk does and an object store cannot: a store conditions a write on the object
written only, so no completion can check the lock in the same request. The fence is the half
expiry instead. A holder stalled for longer than that between its clock check and its
completion PUT (a pause of over 30 s inside one function, with the default expiry of 60 s) is
the one case it does not exclude.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from table.errors import CommitLockError, InvalidRequestError
from table.storage.commit_lock import (
    DEFAULT_TTL_SECONDS,
    DEFAULT_WAIT_SECONDS,
    FENCES_DIR,
    LOCK_PATH,
    LockRecord,
)
from table.storage.conditional import ConditionalWrites, ObjectChangedError
from table.storage.file_io import Storage

log = logging.getLogger(__name__)

#: The part of its expiry within which a holder may still complete.
COMPLETING_WINDOW = 0.5


@dataclass(frozen=True)
class ObjectStoreFence:
    """Completes the holder's instant while the lock is surely still its own."""

    writes: ConditionalWrites
    taken_at: float  # time.monotonic() when the lock was taken
    ttl: float

    def create(self, rel: str, data: bytes) -> None:
        self.check()
        self.writes.create(rel, data)

    def check(self) -> None:
        held = time.monotonic() - self.taken_at
        if held > self.ttl * COMPLETING_WINDOW:
            raise CommitLockError(
                f"the commit lock of {self.writes.base_uri} was held {held:.0f}s, past half its expiry "
                f"({self.ttl:.0f}s): another writer may have taken it over; not completing"
            )


class ObjectStoreCommitLock:
    """Taken around a commit's conflict check and completion on an object store."""

    def __init__(
        self,
        storage: Storage,
        description: str,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ):
        self._storage = storage
        self._writes = ConditionalWrites(storage)
        self._description = description
        self._ttl = ttl_seconds
        self._wait = wait_seconds

    def probe(self) -> None:
        """Create one object twice with `If-None-Match: *`: a store that lets the second PUT through
        (or refuses the header) cannot hold the commit lock, and is refused by name."""
        probe = f"{FENCES_DIR}/probe-{uuid.uuid4().hex}"
        try:
            self._writes.create(probe, b"")
            try:
                self._writes.create(probe, b"")
            except FileExistsError:
                return
        except OSError as e:
            problem = f"it refused a conditional create ({e})"
        else:
            problem = "an object created twice with If-None-Match: * was created both times"
        finally:
            self._writes.delete(probe)
        raise InvalidRequestError(
            f"{self._storage.base_uri}: {problem}: this store does not honour conditional creation, which "
            "the commit lock of optimistic concurrency needs; keep one writer per table "
            "(table.concurrency: single_writer)"
        )

    def create_new(self, rel: str, data: bytes) -> None:
        """Create an object no other writer may create too: one conditional PUT."""
        self._writes.create(rel, data)

    @contextmanager
    def held(self) -> Iterator[ObjectStoreFence]:
        """The lock, held until the block ends; its fence completes the instant."""
        fence = ObjectStoreFence(self._writes, self._acquire(uuid.uuid4().hex), self._ttl)
        try:
            yield fence
        finally:
            try:
                fence.check()
            except CommitLockError:
                log.warning("left the commit lock of %s to expire: held past half its expiry", self._storage.base_uri)
            else:
                self._writes.delete(LOCK_PATH)

    def _acquire(self, token: str) -> float:
        """Take the lock; returns when (time.monotonic())."""
        deadline = time.monotonic() + self._wait
        pause = 0.005
        while True:
            record = LockRecord.ours(token, self._description, self._ttl)
            taken_at = time.monotonic()
            try:
                self._writes.create(LOCK_PATH, record.to_bytes())
                return taken_at
            except FileExistsError:
                pass
            held_by = self._take_over_if_expired(record)
            if held_by is None:
                return taken_at
            if time.monotonic() > deadline:
                raise CommitLockError(
                    f"the commit lock of {self._storage.base_uri} is held by {held_by}; waited {self._wait:.0f}s for it"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _take_over_if_expired(self, record: LockRecord) -> str | None:
        """Who holds the lock; None once it is ours, taken over from an expired holder."""
        try:
            data, etag, written = self._writes.read(LOCK_PATH)
        except FileNotFoundError:
            return "nobody: it was released meanwhile"
        held = LockRecord.from_bytes(data)
        if held is None:  # another lock provider's, or torn: judged by its age
            if time.time() - written <= self._ttl:
                return "another lock provider's writer"
        elif not held.expired():
            return held.holder()
        try:
            self._writes.replace(LOCK_PATH, record.to_bytes(), etag)
        except ObjectChangedError:
            return "a writer that took it over first"
        log.warning(
            "took over the commit lock of %s from %s, expired or gone",
            self._storage.base_uri,
            held.holder() if held else "another lock provider's writer",
        )
        return None
