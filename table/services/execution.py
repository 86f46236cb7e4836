"""The steps every execution of a service plan takes (compaction, clustering), whatever the service.

A plan is requested on the timeline by the writer and executed by any process, one at a time:

- the executor lease, `.hoodie/.aux/<instant>.<action>.lease`, keeps a second executor out;
- the plan's instant goes from requested to inflight; found inflight already, it is the retry of
  a crashed execution, whose files (named by its markers) go first;
- one marker file names every file the plan writes, before the first of them is written;
- the plan's groups are written, a progress line every PROGRESS_INTERVAL_SECONDS on long plans;
- the instant completes while the lease is still held, then its markers go.

`PlanExecution` runs these steps; a service's subclass gives what is its own: what it reads from
the plan, how it writes each group, the completed instant's metadata, and its failpoints.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from table.errors import TimelineStateError
from table.storage.layout import AUX_DIR
from table.storage.lease import WriterLease, acquire_executor_lease
from table.storage.markers import MarkedFile, begin_markers, delete_marked_files, delete_markers, write_markers
from table.timeline.commit_metadata import CommitMetadata, WriteStat
from table.timeline.timeline import Instant, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable

PROGRESS_INTERVAL_SECONDS = 10.0


class PlanExecution(ABC):
    """One execution of the pending plan at `instant`: `run()` takes it to completion."""

    #: The service as leases and errors name it, e.g. "compaction".
    service: ClassVar[str]
    #: The plan's action on the timeline.
    action: ClassVar[str]
    #: Raised when another live executor holds the plan's lease.
    conflict: ClassVar[type[Exception]]

    def __init__(self, table: MorTable, instant: str):
        self.table = table
        self.instant = instant

    @classmethod
    def lease_path(cls, instant: str) -> str:
        return f"{AUX_DIR}/{instant}.{cls.action}.lease"

    def acquire_lease(self) -> WriterLease:
        """The plan's executor lease; raises `conflict` while another live executor holds it."""
        return acquire_executor_lease(
            self.table.storage, f"{self.service} {self.instant}", self.lease_path(self.instant), self.conflict
        )

    def run(self) -> list[WriteStat]:
        """Execute the plan; the write stats of the completed instant.

        Raises `conflict` when another live executor runs it, TimelineStateError when no plan of the
        service is pending at the instant.
        """
        lease = self.acquire_lease()
        try:
            return self._execute(lease)
        finally:
            lease.release()

    def _execute(self, lease: WriterLease) -> list[WriteStat]:
        storage = self.table.storage
        timeline = self.table.timeline()
        requested = Instant(self.instant, self.action, "requested")
        if timeline.contains(requested):
            timeline.transition_to_inflight(requested)
        elif timeline.contains(requested.inflight()):
            delete_marked_files(storage, self.instant)  # what a crashed attempt wrote, complete or not
            delete_markers(storage, self.instant)
        else:
            raise TimelineStateError(f"no pending {self.service} at {self.instant} in {self.table.base_uri}")
        self.read_plan(timeline)
        begin_markers(storage, self.instant)
        write_markers(storage, self.instant, 0, self.planned_files())
        stats: list[WriteStat] = []
        reported = time.monotonic()
        for groups_done, group_stats in enumerate(self.write_groups(), start=1):
            stats.extend(group_stats)
            if time.monotonic() - reported >= PROGRESS_INTERVAL_SECONDS:  # long plans say how far they are
                self.log_progress(groups_done, stats)
                reported = time.monotonic()
        metadata = self.completed_metadata(stats)
        self.on_files_written()
        lease.check_held()
        timeline.complete(requested.inflight(), metadata.to_json().encode())
        self.on_completed()
        delete_markers(storage, self.instant)
        return stats

    @abstractmethod
    def read_plan(self, timeline: Timeline) -> None:
        """Read the plan at the instant, and what writing it needs, as of `timeline`."""

    @abstractmethod
    def planned_files(self) -> list[MarkedFile]:
        """Every file the plan writes, as `write_groups` names them."""

    @abstractmethod
    def write_groups(self) -> Iterator[list[WriteStat]]:
        """Write the plan's groups, yielding each group's write stats once its files are written."""

    @abstractmethod
    def log_progress(self, groups_done: int, stats: list[WriteStat]) -> None:
        """Say how far a long execution is."""

    @abstractmethod
    def completed_metadata(self, stats: list[WriteStat]) -> CommitMetadata:
        """The metadata the completed instant holds."""

    # The failpoints are the service's own: tests/e2e/test_crash_matrix.py finds their names in the code.

    @abstractmethod
    def on_files_written(self) -> None:
        """Every file of the plan written, the instant not completed."""

    @abstractmethod
    def on_completed(self) -> None:
        """The instant completed, its markers not deleted yet."""
