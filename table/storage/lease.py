"""One writer per table: a lease file in `.hoodie/.aux/` kept alive by a heartbeat.

A second writer is refused while the lease is fresh, with the holder named in the error. A
crashed writer stops renewing, so its claim expires after `ttl_seconds` and the next writer
takes the table over (and rolls back what the crashed one left inflight). The same kind of
lease, at another path, lets one process at a time execute a table-service plan.

The lease is a file whose content says who holds it and when it was last renewed (never a file
time, which object stores do not let a writer set). On a local disk creating it is exclusive. On
an object store a PUT is not (pyarrow cannot send `If-None-Match`), so two writers starting
together could both create it, the later PUT winning: a writer that took the lease there reads
it back after `OBJECT_STORE_SETTLE_SECONDS` and gives up if another one's PUT replaced its own.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from table.errors import WriterConflictError
from table.storage.file_io import Storage
from table.storage.layout import AUX_DIR

log = logging.getLogger(__name__)

LEASE_PATH = f"{AUX_DIR}/writer.lease"
DEFAULT_TTL_SECONDS = 60.0
# Far longer than the HEAD-then-PUT of a lease creation takes: a rival's PUT lands before it.
OBJECT_STORE_SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class LeaseHolder:
    owner_id: str
    description: str
    host: str
    pid: int
    renewed_at: float
    ttl_seconds: float
    process_start: str | None = None

    def expired(self, now: float) -> bool:
        return now > self.renewed_at + self.ttl_seconds

    def process_gone(self) -> bool:
        return process_gone(self.host, self.pid, self.process_start)

    def alive(self, now: float) -> bool:
        """Still holding: renewed within its TTL, by a process that still runs."""
        return not self.expired(now) and not self.process_gone()

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def from_bytes(data: bytes) -> LeaseHolder:
        return LeaseHolder(**json.loads(data))


def process_gone(host: str, pid: int, process_start: str | None) -> bool:
    """True when a holder ran on this host and its process no longer exists (or its pid now
    belongs to another process, as after a container restart): a crashed writer's claim need
    not be waited out."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return process_start is not None and process_start_time(pid) != process_start


def read_holder(storage: Storage, path: str = LEASE_PATH) -> LeaseHolder | None:
    """Who holds the lease at `path` now, without taking it; None when nobody does (a lease torn
    by a crash counts as none)."""
    try:
        return LeaseHolder.from_bytes(storage.read_bytes(path))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None


def process_start_time(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class WriterLease:
    """Holds the table's writer lease until released; renews it from a daemon thread."""

    def __init__(
        self, storage: Storage, description: str, ttl_seconds: float = DEFAULT_TTL_SECONDS, path: str = LEASE_PATH
    ):
        self._storage = storage
        self._path = path
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
            process_start=process_start_time(os.getpid()),
        )

    def current_holder(self) -> LeaseHolder | None:
        return read_holder(self._storage, self._path)

    def acquire(self) -> WriterLease:
        try:
            self._storage.create(self._path, self._holder().to_bytes())
        except FileExistsError:
            holder = self.current_holder()
            if holder is not None and holder.owner_id != self._owner_id and holder.alive(time.time()):
                raise WriterConflictError(
                    f"table {self._storage.base_uri} is being written by another writer: "
                    f"{holder.description} (host {holder.host}, pid {holder.pid}); its lease "
                    f"expires {holder.ttl_seconds:.0f}s after its last heartbeat"
                ) from None
            self._storage.write_bytes(self._path, self._holder().to_bytes())
        if not self._storage.is_local:
            time.sleep(OBJECT_STORE_SETTLE_SECONDS)
        holder = self.current_holder()
        if holder is None or holder.owner_id != self._owner_id:
            raise WriterConflictError(
                f"lost the race for the writer lease of {self._storage.base_uri}"
                + (f" to {holder.description} (host {holder.host}, pid {holder.pid})" if holder else "")
            )
        self._thread = threading.Thread(target=self._heartbeat, name="writer-lease", daemon=True)
        self._thread.start()
        return self

    def _heartbeat(self) -> None:
        """Renew until released. A renewal the storage refuses (a full or read-only disk for a
        while) is tried again at the next beat: the lease lapses only if the fault outlasts the TTL."""
        while not self._stop.wait(self._ttl / 4):
            try:
                holder = self.current_holder()
                if holder is not None and holder.owner_id != self._owner_id:
                    return  # taken over after we stalled past the TTL; the next check_held fails
                self._storage.write_bytes(self._path, self._holder().to_bytes())
            except OSError as e:
                log.warning("writer lease of %s not renewed: %s", self._storage.base_uri, e)

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
            self._storage.delete(self._path)

    def __enter__(self) -> WriterLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_executor_lease(storage: Storage, plan: str, path: str, conflict: type[Exception]) -> WriterLease:
    """The lease that lets one process execute a service plan (`plan` names it, e.g.
    "compaction 2024..."); `conflict` is raised, naming the holder, while another live one has it."""
    lease = WriterLease(storage, f"executor of {plan}", path=path)
    try:
        return lease.acquire()
    except WriterConflictError:
        holder = lease.current_holder()
        by = f"{holder.description} (host {holder.host}, pid {holder.pid})" if holder else "another executor"
        raise conflict(f"{plan} of {storage.base_uri} is being executed by {by}") from None
