"""One writer per table: a lease file in `.hoodie/.aux/` kept alive by a heartbeat.

A second writer is refused while the lease is fresh, with the holder named in the error. A
crashed writer stops renewing, so its claim expires after `ttl_seconds` and the next writer
takes the table over (and rolls back what the crashed one left inflight).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from table.storage import Storage

LEASE_PATH = ".hoodie/.aux/writer.lease"
DEFAULT_TTL_SECONDS = 60.0


class WriterConflictError(RuntimeError):
    """Another live writer holds the table."""


@dataclass(frozen=True)
class LeaseHolder:
    owner_id: str
    description: str
    host: str
    pid: int
    renewed_at: float
    ttl_seconds: float

    def expired(self, now: float) -> bool:
        return now > self.renewed_at + self.ttl_seconds

    def process_gone(self) -> bool:
        """True when the holder ran on this host and its process no longer exists: a crashed
        writer's lease need not be waited out."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def from_bytes(data: bytes) -> "LeaseHolder":
        return LeaseHolder(**json.loads(data))


class WriterLease:
    """Holds the table's writer lease until released; renews it from a daemon thread."""

    def __init__(self, storage: Storage, description: str, ttl_seconds: float = DEFAULT_TTL_SECONDS):
        self._storage = storage
        self._ttl = ttl_seconds
        self._owner_id = uuid.uuid4().hex
        self._description = description
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _holder(self) -> LeaseHolder:
        return LeaseHolder(
            owner_id=self._owner_id,
            description=self._description,
            host=socket.gethostname(),
            pid=os.getpid(),
            renewed_at=time.time(),
            ttl_seconds=self._ttl,
        )

    def current_holder(self) -> LeaseHolder | None:
        try:
            return LeaseHolder.from_bytes(self._storage.read_bytes(LEASE_PATH))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return None  # a lease torn by a crash counts as no lease

    def acquire(self) -> "WriterLease":
        try:
            self._storage.create(LEASE_PATH, self._holder().to_bytes())
        except FileExistsError:
            holder = self.current_holder()
            if (holder is not None and holder.owner_id != self._owner_id and not holder.expired(time.time())
                    and not holder.process_gone()):
                raise WriterConflictError(
                    f"table {self._storage.base_uri} is being written by another writer: "
                    f"{holder.description} (host {holder.host}, pid {holder.pid}); its lease "
                    f"expires {holder.ttl_seconds:.0f}s after its last heartbeat"
                ) from None
            self._storage.write_bytes(LEASE_PATH, self._holder().to_bytes())
            if (self.current_holder() or holder).owner_id != self._owner_id:
                raise WriterConflictError(f"lost the race for the writer lease of {self._storage.base_uri}")
        self._thread = threading.Thread(target=self._heartbeat, name="writer-lease", daemon=True)
        self._thread.start()
        return self

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._ttl / 4):
            holder = self.current_holder()
            if holder is not None and holder.owner_id != self._owner_id:
                return  # taken over after we stalled past the TTL; the next check_held fails
            self._storage.write_bytes(LEASE_PATH, self._holder().to_bytes())

    def check_held(self) -> None:
        """Raise unless this writer still holds the lease (called before each commit)."""
        holder = self.current_holder()
        if holder is None or holder.owner_id != self._owner_id:
            raise WriterConflictError(f"writer lease of {self._storage.base_uri} was lost")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder = self.current_holder()
        if holder is not None and holder.owner_id == self._owner_id:
            self._storage.delete(LEASE_PATH)

    def __enter__(self) -> "WriterLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
