"""The active timeline in `.hoodie/`: instants, their states and the atomic transitions between them.

Table version 6 uses timeline layout version 1: every state of an instant is its own file, and
a transition creates the next file without removing the previous one:

    <ts>.deltacommit.requested -> <ts>.deltacommit.inflight -> <ts>.deltacommit
    <ts>.commit.requested      -> <ts>.inflight             -> <ts>.commit
    <ts>.compaction.requested  -> <ts>.compaction.inflight  -> <ts>.commit
    <ts>.replacecommit.requested, .clean.requested, .rollback.requested: likewise

An instant is read at its latest state (Hudi's TimelineLayoutV1 keeps the highest state per
timestamp and action, a compaction counting as a commit). Completing is one atomic creation of
the completed file, so a reader sees an instant either pending or completed, never half done;
readers use only completed instants. Instant times are UTC `yyyyMMddHHmmssSSS`, strictly
increasing.

Archival (`table.services.archive`) moves the oldest completed instants off this timeline, so
an instant older than the first completed write still here, and not pending here, counts as
completed (Hudi's `containsOrBeforeTimelineStarts`): see `CompletedInstants`.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from table.errors import FormatError, PathExistsError, TimelineStateError
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR, instant_file_path


class Action(StrEnum):
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    COMPACTION = "compaction"
    REPLACE_COMMIT = "replacecommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"


class State(StrEnum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"


_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}
# Completed actions that change the data a reader sees.
WRITE_ACTIONS = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)
_TIMESTAMP = re.compile(r"\d{17}|\d{14}")


@dataclass(frozen=True, init=False)
class Instant:
    """One action at one instant time, in one state. Strings are accepted for action and state."""

    timestamp: str
    action: Action
    state: State

    def __init__(self, timestamp: str, action: Action | str, state: State | str) -> None:
        object.__setattr__(self, "timestamp", timestamp)
        object.__setattr__(self, "action", Action(action))
        object.__setattr__(self, "state", State(state))
        if not _TIMESTAMP.fullmatch(self.timestamp):
            raise FormatError(f"invalid instant time: {self.timestamp!r}")
        if self.action is Action.COMPACTION and self.state is State.COMPLETED:
            raise FormatError("a completed compaction is a commit instant")

    @property
    def file_name(self) -> str:
        if self.state is State.COMPLETED:
            return f"{self.timestamp}.{self.action}"
        if self.action is Action.COMMIT and self.state is State.INFLIGHT:
            return f"{self.timestamp}.inflight"
        return f"{self.timestamp}.{self.action}.{self.state}"

    @property
    def key(self) -> tuple[str, Action]:
        """Identity across states: a compaction and the commit it completes as are one instant."""
        return self.timestamp, Action.COMMIT if self.action is Action.COMPACTION else self.action

    def requested(self) -> Instant:
        return replace(self, state=State.REQUESTED)

    def inflight(self) -> Instant:
        return replace(self, state=State.INFLIGHT)

    def completed(self) -> Instant:
        action = Action.COMMIT if self.action is Action.COMPACTION else self.action
        return Instant(self.timestamp, action, State.COMPLETED)

    @classmethod
    def from_file_name(cls, name: str) -> Instant | None:
        """The instant a timeline file stands for; None for any other file."""
        parts = name.split(".")
        try:
            if len(parts) == 2 and parts[1] == "inflight":
                return cls(parts[0], Action.COMMIT, State.INFLIGHT)
            if len(parts) == 2:
                return cls(parts[0], Action(parts[1]), State.COMPLETED)
            if len(parts) == 3 and parts[2] != State.COMPLETED:
                return cls(parts[0], Action(parts[1]), State(parts[2]))
        except ValueError:
            return None
        return None


def format_instant_time(moment: datetime) -> str:
    t = moment.astimezone(UTC)
    return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"


def parse_instant_time(timestamp: str) -> datetime:
    base = datetime.strptime(timestamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return base + timedelta(milliseconds=int(timestamp[14:] or 0))


class InstantTimeGenerator:
    """Strictly increasing instant times: the clock's millisecond, or one past the last one.

    Two calls in one millisecond, a clock stepped back, or a timeline written by a faster clock
    all yield a time after everything seen. Thread-safe.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None):
        self._clock = clock or (lambda: datetime.now(UTC))
        self._last: str | None = None
        self._lock = threading.Lock()

    def next(self, after: str | None = None) -> str:
        """A new instant time greater than `after` and than any this generator returned."""
        with self._lock:
            floors = [t.ljust(17, "0") for t in (self._last, after) if t]
            candidate = format_instant_time(self._clock())
            if floors and candidate <= max(floors):
                candidate = format_instant_time(parse_instant_time(max(floors)) + timedelta(milliseconds=1))
            self._last = candidate
            return candidate


# One per process, as Hudi's HoodieInstantTimeGenerator: instants stay ordered across tables.
_PROCESS_GENERATOR = InstantTimeGenerator()


@dataclass(frozen=True)
class CompletedInstants:
    """The instant times a reader takes as completed, answered with `in`.

    Those completed on the active timeline, and any older than its first completed write that
    is not pending there: archival moved those off the timeline once they completed. Not
    iterable on purpose: the archived ones are not listed here. Picklable, for Spark tasks.
    """

    active: frozenset[str]
    pending: frozenset[str]
    timeline_start: str | None  # the first completed write on the active timeline
    up_to_time: str | None = None  # time travel: nothing after this counts

    def __contains__(self, timestamp: object) -> bool:
        if not isinstance(timestamp, str) or (self.up_to_time is not None and timestamp > self.up_to_time):
            return False
        if timestamp in self.active:
            return True
        return self.timeline_start is not None and timestamp < self.timeline_start and timestamp not in self.pending

    def up_to(self, timestamp: str) -> CompletedInstants:
        """Those at or before `timestamp`."""
        bound = timestamp if self.up_to_time is None else min(timestamp, self.up_to_time)
        return replace(self, up_to_time=bound)


class InstantJournal:
    """The instant states this process wrote, per table: what lets a writer's caches tell the
    instants its own process made, whose effects it can apply, from those of any other writer
    (Apache Hudi, an offline command), which send it back to storage.

    Bounded: a state that has fallen out of the window reads as another writer's, which only
    costs a fresh listing. Thread-safe: services execute plans beside the writer's thread."""

    def __init__(self, capacity_per_table: int = 4096):
        self._capacity = capacity_per_table
        self._tables: dict[str, OrderedDict[tuple[str, Action, State], None]] = {}
        self._lock = threading.Lock()

    def record(self, storage: Storage, instant: Instant) -> None:
        with self._lock:
            states = self._tables.setdefault(storage.base_uri, OrderedDict())
            states[(instant.timestamp, instant.action, instant.state)] = None
            while len(states) > self._capacity:
                states.popitem(last=False)

    def made_here(self, storage: Storage, instant: Instant) -> bool:
        with self._lock:
            return (instant.timestamp, instant.action, instant.state) in self._tables.get(storage.base_uri, ())


#: Every transition a `Timeline` of this process makes is recorded here.
JOURNAL = InstantJournal()


def instant_files(storage: Storage) -> list[Instant]:
    """Every file of the active timeline, as the instant state it stands for."""
    found = (Instant.from_file_name(e.name) for e in storage.list_dir(METADATA_DIR) if not e.is_dir)
    return [i for i in found if i is not None]


class Timeline:
    """The active timeline of one table as last loaded, plus the transitions made through it.

    Readers call `Timeline.load` and use the completed instants. The (single) writer also moves
    instants forward through this object; each transition is one create-if-absent of a file.
    """

    def __init__(
        self,
        storage: Storage,
        instants: Iterable[Instant] = (),
        generator: InstantTimeGenerator | None = None,
    ):
        self.storage = storage
        self._generator = generator or _PROCESS_GENERATOR
        self._latest: dict[tuple[str, Action], Instant] = {}
        for instant in instants:
            current = self._latest.get(instant.key)
            if current is None or _RANK[instant.state] > _RANK[current.state]:
                self._latest[instant.key] = instant

    @classmethod
    def load(cls, storage: Storage, generator: InstantTimeGenerator | None = None) -> Timeline:
        """List `.hoodie/`; files that are not timeline instants are ignored."""
        return cls(storage, instant_files(storage), generator)

    # -- queries -------------------------------------------------------------------------------

    @property
    def instants(self) -> list[Instant]:
        """Every instant at its latest state, by instant time."""
        return sorted(self._latest.values(), key=lambda i: (i.timestamp, i.action))

    def _select(self, states: tuple[State, ...], actions: tuple[str, ...]) -> list[Instant]:
        wanted = {Action(a) for a in actions}
        return [i for i in self.instants if i.state in states and (not wanted or i.action in wanted)]

    def completed(self, *actions: str) -> list[Instant]:
        """Completed instants, of the given actions if any are named."""
        return self._select((State.COMPLETED,), actions)

    def pending(self, *actions: str) -> list[Instant]:
        """Requested and inflight instants, of the given actions if any are named."""
        return self._select((State.REQUESTED, State.INFLIGHT), actions)

    def completed_writes(self) -> list[Instant]:
        """Completed commits, deltacommits and replacecommits: what readers build the table from."""
        return self.completed(*WRITE_ACTIONS)

    def last_completed_write(self) -> Instant | None:
        writes = self.completed_writes()
        return writes[-1] if writes else None

    def completed_timestamps(self) -> CompletedInstants:
        """Which instant times are completed, archived ones included: what readers filter base
        files and log blocks by."""
        writes = self.completed_writes()
        return CompletedInstants(
            active=frozenset(i.timestamp for i in self.completed()),
            pending=frozenset(i.timestamp for i in self.pending()),
            timeline_start=writes[0].timestamp if writes else None,
        )

    def in_range(self, start: str | None, end: str | None, *actions: str) -> list[Instant]:
        """Completed instants with start < time <= end (None leaves that side open)."""
        return [
            i
            for i in self.completed(*actions)
            if (start is None or i.timestamp > start) and (end is None or i.timestamp <= end)
        ]

    def is_completed(self, timestamp: str) -> bool:
        return timestamp in self.completed_timestamps()

    def contains(self, instant: Instant) -> bool:
        """Whether this exact instant (time, action, state) is the instant's latest state."""
        return self._latest.get(instant.key) == instant

    def last_instant_time(self) -> str | None:
        return max((t for t, _ in self._latest), default=None)

    def read_content(self, instant: Instant) -> bytes:
        """The file of the instant in that state: a plan, commit metadata, or empty."""
        return self.storage.read_bytes(instant_file_path(instant.file_name))

    # -- transitions ---------------------------------------------------------------------------

    def new_instant_time(self) -> str:
        """An instant time after every instant on this timeline and every one handed out before."""
        return self._generator.next(self.last_instant_time())

    def _state_of(self, instant: Instant) -> State | None:
        current = self._latest.get(instant.key)
        return current.state if current else None

    def _create(self, instant: Instant, content: bytes, create: Callable[[str, bytes], None] | None = None) -> Instant:
        (create or self.storage.create)(instant_file_path(instant.file_name), content)
        self._latest[instant.key] = instant
        JOURNAL.record(self.storage, instant)
        return instant

    def create_requested(
        self, instant: Instant, content: bytes = b"", create: Callable[[str, bytes], None] | None = None
    ) -> Instant:
        """Put a new instant on the timeline (a plan for table services, empty for writes).
        `create` makes the file instead of the storage's exclusive create (an object store's
        conditional one, where writers race for instant times)."""
        if any(t == instant.timestamp for t, _ in self._latest):
            raise TimelineStateError(f"instant time {instant.timestamp} is already on the timeline")
        return self._create(instant.requested(), content, create)

    def transition_to_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        state = self._state_of(instant)
        if state is not State.REQUESTED:
            raise TimelineStateError(f"{instant.timestamp} {instant.action} is {state or 'absent'}, not requested")
        return self._create(instant.inflight(), content)

    def complete(self, instant: Instant, content: bytes, create: Callable[[str, bytes], None] | None = None) -> Instant:
        """Complete an inflight instant: one atomic file creation, which everything a reader needs
        must precede. PathExistsError (a FileExistsError) if it is already complete. `create`
        makes the file instead of the storage's exclusive create (a commit lock's fence)."""
        state = self._state_of(instant)
        if state is State.COMPLETED:
            raise PathExistsError(instant_file_path(instant.completed().file_name))
        if state is not State.INFLIGHT:
            raise TimelineStateError(f"{instant.timestamp} {instant.action} is {state or 'absent'}, not inflight")
        return self._create(instant.completed(), content, create)

    def delete_pending(self, instant: Instant, *, keep_requested: bool = False) -> None:
        """Remove a pending instant (rollback of a failed write), inflight file first.

        With `keep_requested` only the inflight state goes: a compaction or clustering plan
        stays on the timeline to be executed again.
        """
        if self._state_of(instant) is State.COMPLETED:
            raise TimelineStateError(f"{instant.timestamp} {instant.action} is completed; it is never deleted")
        self.storage.delete(instant_file_path(instant.inflight().file_name))
        if keep_requested:
            if instant.key in self._latest:
                self._latest[instant.key] = instant.requested()
            return
        self.storage.delete(instant_file_path(instant.requested().file_name))
        self._latest.pop(instant.key, None)
