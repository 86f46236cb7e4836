"""How a writer shares its table with other writers: alone under the writer lease, or with
others under optimistic concurrency (`table.config.choices.Concurrency`).

Optimistic concurrency, as Hudi's: each pending write keeps a heartbeat (`table.storage.heartbeat`),
so only writes whose heartbeat stopped are rolled back as failed; each commit takes the table's
commit lock (`table.storage.commit_lock`), checks what completed or was planned since the write
began (`table.write.conflicts`) and completes through the lock's fence, or is refused with a
`WriteConflictError` and rolled back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

from table import failpoints
from table.errors import WriteConflictError, WriterConflictError
from table.storage.commit_lock import CommitLock
from table.storage.file_io import Storage
from table.storage.heartbeat import Heartbeats, heartbeat_expired
from table.storage.lease import WriterLease, read_holder
from table.storage.object_store_lock import ObjectStoreCommitLock
from table.timeline.commit_metadata import WriteStat
from table.timeline.timeline import Timeline
from table.write.conflicts import first_conflict, written_file_groups

#: How a commit's completed instant is created: the storage's exclusive create, or a fence's.
CreateFile = Callable[[str, bytes], None]


class WriterGuard(Protocol):
    #: Whether other writers may write the table meanwhile (their pending writes are normal).
    shares_table: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def check_held(self) -> None:
        """Raise unless this writer may still write (its lease, under a single writer)."""

    def is_failed(self, instant: str) -> bool:
        """Whether a deltacommit found pending when the writer opens is a failed write to roll back."""

    def began(self, instant: str) -> None: ...

    def ended(self, instant: str) -> None: ...

    def lost(self, instant: str) -> None:
        """Another writer began `instant` first: it was never this writer's."""

    def create_new(self, rel: str, data: bytes) -> None:
        """Create a new instant's file, refused (FileExistsError) when another writer made it."""

    def completing(self, began: Timeline, instant: str, stats: list[WriteStat]) -> AbstractContextManager[CreateFile]:
        """A context in which the commit may complete, and how it creates its completed instant."""

    def exclusive(self) -> AbstractContextManager[object]:
        """A context in which no other writer changes the timeline: rollbacks of failed writes,
        which two writers finding the same one must not both make."""


class SingleWriter:
    """The default: the writer lease; anything pending when the writer opens is a crashed write."""

    shares_table = False

    def __init__(self, storage: Storage, description: str, lease_ttl_seconds: float):
        self._storage = storage
        self._lease = WriterLease(storage, description, lease_ttl_seconds)

    def open(self) -> None:
        self._lease.acquire()

    def close(self) -> None:
        self._lease.release()

    def check_held(self) -> None:
        self._lease.check_held()

    def is_failed(self, instant: str) -> bool:
        """A single writer's own crashed writes keep no heartbeat; a pending write that keeps one
        is a live writer's under optimistic concurrency (a writer misconfigured beside this one),
        whose files must not be deleted under it."""
        return heartbeat_expired(self._storage, instant)

    def began(self, instant: str) -> None:
        pass

    def ended(self, instant: str) -> None:
        pass

    def lost(self, instant: str) -> None:
        pass

    def create_new(self, rel: str, data: bytes) -> None:
        self._storage.create(rel, data)

    @contextmanager
    def completing(self, began: Timeline, instant: str, stats: list[WriteStat]) -> Iterator[CreateFile]:
        self._lease.check_held()
        yield self._storage.create

    def exclusive(self) -> AbstractContextManager[object]:
        return nullcontext()  # the lease keeps every other writer out


class OptimisticWriters:
    """One of several writers of the table: heartbeats, the commit lock and the conflict check."""

    shares_table = True

    def __init__(
        self,
        storage: Storage,
        description: str,
        commit_lock: CommitLock | ObjectStoreCommitLock,
        heartbeats: Heartbeats,
        heartbeat_expiry_seconds: float,
    ):
        self._storage = storage
        self._lock = commit_lock
        self._heartbeats = heartbeats
        self._expiry = heartbeat_expiry_seconds

    def open(self) -> None:
        """Refused while a single writer holds the table (it checks no commit against ours), and
        where the file system lets a file be created twice."""
        self._lock.probe()
        holder = read_holder(self._storage)
        if holder is not None and holder.alive(time.time()):
            raise WriterConflictError(
                f"table {self._storage.base_uri} is being written by a single writer, {holder.description} "
                f"(host {holder.host}, pid {holder.pid}), which checks no other writer's commits: give every "
                "writer of the table optimistic concurrency (table.concurrency: optimistic_concurrency_control)"
            )

    def close(self) -> None:
        self._heartbeats.close()

    def check_held(self) -> None:
        pass

    def is_failed(self, instant: str) -> bool:
        return heartbeat_expired(self._storage, instant, self._expiry)

    def began(self, instant: str) -> None:
        self._heartbeats.start(instant)

    def ended(self, instant: str) -> None:
        self._heartbeats.stop(instant)

    def lost(self, instant: str) -> None:
        self._heartbeats.forget(instant)

    def create_new(self, rel: str, data: bytes) -> None:
        self._lock.create_new(rel, data)

    @contextmanager
    def completing(self, began: Timeline, instant: str, stats: list[WriteStat]) -> Iterator[CreateFile]:
        with self._lock.held() as fence:
            conflict = first_conflict(began, Timeline.load(self._storage), written_file_groups(stats), instant)
            if conflict is not None:
                raise WriteConflictError(instant, conflict.other.timestamp, conflict.other.action, conflict.file_groups)
            failpoints.reach("deltacommit.lock_held")
            yield fence.create

    def exclusive(self) -> AbstractContextManager[object]:
        return self._lock.held()
