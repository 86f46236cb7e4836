"""One deltacommit in progress, shared by the in-process upsert, the streamer's write in its
driver and the Spark write."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from table.errors import HashingMetadataError
from table.file_group.layout_stats import LayoutStats
from table.index import consistent_hashing as ring
from table.storage.layout import write_partition_metadata
from table.timeline.commit_metadata import WriteStat
from table.timeline.timeline import Timeline
from table.write.file_group_writer import WriteTask, shares_in_group_order, write_file_groups
from table.write.routing import Routing

if TYPE_CHECKING:
    from table.write.writer import TableWriter

#: Partitions a commit creates side by side.
PARTITION_THREADS = 16

#: The attempt ids of the tasks that write in this process, unique in it as Spark's are in an
#: application: each task's marker file and write token are its own (`WriteTask`).
_IN_PROCESS_ATTEMPTS = itertools.count()


class DeltaCommit:
    """One deltacommit in progress: begun on the timeline (requested, then inflight) with the
    routing of its records, then completed with the write stats of the files its tasks wrote,
    or abandoned. The in-process upsert and the Spark write both go through it."""

    def __init__(
        self,
        writer: TableWriter,
        instant: str,
        timeline: Timeline,
        data_schema: pa.Schema,
        routing: Routing,
        layout: LayoutStats,
    ):
        self.writer = writer
        self.layout = layout  # as the commit began
        self.instant = instant
        self.timeline = timeline
        self.data_schema = data_schema
        self.routing = routing
        self.context = writer.commit_context(instant, data_schema)

    def complete(self, stats: list[WriteStat], extra_metadata: dict[str, str] | None = None) -> str:
        """Record the rings of the partitions this commit created, then complete it atomically."""
        self._record_new_partitions(stats)
        self.writer.complete(self.instant, self.timeline, stats, self.data_schema, extra_metadata)
        self.writer.last_layout = self.layout.with_writes(stats)
        return self.instant

    def write(self, prepared: pa.Table, tasks: int = 1) -> list[WriteStat]:
        """Write prepared records (`Routing.prepare`: keyed, one per key) into the commit's file
        groups in this process: as `tasks` tasks side by side, each writing about as many rows
        of whole file groups. The stats of the files written."""
        routed = self.routing.route(prepared)
        if tasks <= 1:
            return write_file_groups(self.context, WriteTask(0, 0, next(_IN_PROCESS_ATTEMPTS)), self.routing, routed)
        shares = shares_in_group_order(routed, tasks)
        writers = [WriteTask(i, 0, next(_IN_PROCESS_ATTEMPTS)) for i in range(len(shares))]

        def write(task: WriteTask, share: np.ndarray) -> list[WriteStat]:
            """A task takes its own rows, on its own thread."""
            return write_file_groups(self.context, task, self.routing, routed.take(pa.array(share)))

        with ThreadPoolExecutor(len(shares), thread_name_prefix="write-task") as pool:
            futures = [pool.submit(write, task, share) for task, share in zip(writers, shares)]
            return [stat for future in futures for stat in future.result()]

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around the write of the commit's files: a write that fails leaves it pending
        (`left_pending`), whatever wrote them (Spark's tasks, the in-process writer)."""
        try:
            yield
        except BaseException:
            self.left_pending()
            raise

    def left_pending(self) -> None:
        """The write failed midway: its instant stays pending, for a later rollback to delete what
        its tasks wrote (some may still be writing while Spark cancels them); under optimistic
        concurrency its heartbeat stops, so that another writer may roll it back once it expires."""
        self.writer.left_pending(self.instant)

    def abandon(self) -> None:
        """Roll the commit back: delete what its tasks wrote; nothing of it ever became visible."""
        self.writer.abandon(self.instant)

    def _record_new_partitions(self, stats: list[WriteStat]) -> None:
        """The partition metadata and initial ring of each partition the commit created, the
        partitions side by side: an initial load creates hundreds, each a few durable files
        (requests to an object store) whose waits then overlap."""
        storage = self.writer.table.storage
        partitions = sorted(
            {s.partition_path for s in stats if s.partition_path is not None and self.routing.is_new(s.partition_path)}
        )

        def record(partition: str) -> ring.HashingMetadata:
            write_partition_metadata(storage, partition, self.instant)
            return ring.create_initial(storage, partition, self.routing.initial_buckets)

        with ThreadPoolExecutor(
            min(PARTITION_THREADS, max(1, len(partitions))), thread_name_prefix="partitions"
        ) as pool:
            created = list(pool.map(record, partitions))
        for partition, stored in zip(partitions, created):
            used = self.routing.router(partition).metadata
            if stored.nodes != used.nodes:
                raise HashingMetadataError(
                    f"partition '{partition}' was created with other buckets than this commit routed to "
                    f"({len(stored.nodes)} against {len(used.nodes)}); the commit is not completed"
                )
            self.writer.remember_ring(stored)
