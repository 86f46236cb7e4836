"""A writer of the table: it holds the lease (or, under optimistic concurrency, shares the table
with other writers: `table.write.concurrency`), rolls back what a crashed writer left inflight,
and begins each deltacommit with the routing of its records."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from table import failpoints
from table.config.choices import Concurrency, LogBlockFormat
from table.errors import (
    CommitLockError,
    InvalidBatchError,
    PathExistsError,
    SchemaEvolutionError,
    WriteConflictError,
    WriterNotOpenError,
)
from table.file_group.fs_view import FileSlice, FileSystemView
from table.file_group.layout_stats import LayoutStats
from table.file_group.view_cache import FileSystemViewCache, SyncResult
from table.index import consistent_hashing as ring
from table.keys import KeyGenerator
from table.plans.pending import pending_clustering_plans, pending_compaction_file_groups
from table.schema import avro_schema_json, evolve
from table.storage import commit_lock
from table.storage.commit_lock import require_atomic_storage
from table.storage.file_io import Storage
from table.storage.heartbeat import DEFAULT_EXPIRY_SECONDS, DEFAULT_INTERVAL_SECONDS, Heartbeats
from table.storage.lease import DEFAULT_TTL_SECONDS
from table.storage.markers import begin_markers, delete_marked_files, delete_markers
from table.storage.object_store_lock import ObjectStoreCommitLock
from table.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from table.timeline.rollback import rollback, rollback_pending_writes
from table.timeline.timeline import Instant, Timeline
from table.units import MIB
from table.write.concurrency import OptimisticWriters, SingleWriter, WriterGuard
from table.write.delta_commit import DeltaCommit
from table.write.file_group_writer import CommitContext
from table.write.metadata_table import MetadataTableGuard
from table.write.prepare import BatchSpec, prepare_batch
from table.write.routing import FileGroupTarget, Routing

if TYPE_CHECKING:
    from table.mor_table import MorTable


log = logging.getLogger(__name__)

#: Instant times tried when beginning a deltacommit: writers beginning in the same millisecond
#: pick the same one, and all but one of them pick again.
INSTANT_TIME_ATTEMPTS = 5


@dataclass(frozen=True)
class WriteOptions:
    """How a writer writes: bucket count of new partitions, delete marker, log block format.

    Like Hudi's write config, these are not stored in the table: the bucket layout of a
    partition lives in its hashing metadata once created.
    """

    initial_buckets: int = 4
    delete_field: str | None = None
    log_block_format: LogBlockFormat = LogBlockFormat.AUTO
    lease_ttl_seconds: float = DEFAULT_TTL_SECONDS
    #: Alone under the writer lease, or one of several writers (`table.write.concurrency`).
    concurrency: Concurrency = Concurrency.SINGLE_WRITER
    #: Under optimistic concurrency: how long the commit lock is held at most before another
    #: writer may take it over (fencing this one out), and how long a commit waits for it.
    commit_lock_ttl_seconds: float = commit_lock.DEFAULT_TTL_SECONDS
    commit_lock_wait_seconds: float = commit_lock.DEFAULT_WAIT_SECONDS
    #: Under optimistic concurrency: a pending write's heartbeat period, and after how long without
    #: one another writer may roll it back as failed (Hudi's default: 2 missed beats of 60 s).
    heartbeat_interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    heartbeat_expiry_seconds: float = DEFAULT_EXPIRY_SECONDS
    #: The packed rows a Spark write task holds at once; given more (a large backlog's batch), it
    #: keeps them on its local disk and writes its file groups in parts of about this much.
    task_memory_bytes: int = 128 * MIB


class TableWriter:
    """A writer of the table: one deltacommit per `upsert` call."""

    def __init__(self, table: MorTable, options: WriteOptions, description: str):
        self.table = table
        self.options = options
        self.key_generator = KeyGenerator.from_config(table.config)
        self._guard = _guard(table.storage, options, description)
        self._open = False
        self._files = FileSystemViewCache(table.storage)
        self._rings = _Rings(table.storage)
        self._routers: dict[str, ring.Router] = {}  # the last commit's, each reused while its ring stays
        self._schema: tuple[str | None, pa.Schema] | None = None  # (the latest write, the table's schema then)
        self.last_commit: CommitMetadata | None = None  # what the latest `complete` committed
        self.last_layout: LayoutStats | None = None  # the buckets' latest slices after it

    def __enter__(self) -> TableWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> TableWriter:
        self._guard.open()
        try:
            self._roll_back_failed_writes(Timeline.load(self.table.storage))
            self._metadata_table = MetadataTableGuard(self.table)
            self._metadata_table.check()
        except BaseException:
            with contextlib.suppress(OSError):  # the fault that failed the rollback may fail this too
                self._guard.close()
            raise
        self._open = True
        return self

    def close(self) -> None:
        if self._open:
            self._guard.close()
            self._open = False

    @property
    def batch_spec(self) -> BatchSpec:
        c = self.table.config
        return BatchSpec(
            record_key_fields=tuple(c.record_key_fields),
            partition_fields=tuple(c.partition_fields),
            ordering_field=c.ordering_field,
            hive_style_partitioning=c.hive_style_partitioning,
            url_encode_partitions=c.url_encode_partitioning,
            delete_field=self.options.delete_field,
        )

    def check_schema(self, incoming: pa.Schema) -> pa.Schema:
        """The data schema of the commit: the table's, evolved by the batch's new columns and
        widened types (see `table.schema.evolve`); refuses a batch that drops or retypes a column."""
        columns = pa.schema([f for f in incoming if f.name != self.options.delete_field])
        try:
            return evolve(self.table_schema(Timeline.load(self.table.storage)), columns)
        except SchemaEvolutionError as e:
            raise InvalidBatchError(f"the batch does not fit the table: {e}") from None

    def table_schema(self, timeline: Timeline) -> pa.Schema:
        """The table's columns as of `timeline` (`MorTable.schema`), read once per latest write:
        a big commit's metadata is costly to read and parse at every batch."""
        last = timeline.last_completed_write()
        key = last.timestamp if last else None
        if self._schema is None or self._schema[0] != key:
            self._schema = (key, self.table.schema(timeline))
        return self._schema[1]

    def check_held(self) -> None:
        """Raise unless this writer is open and still holds the lease: what only the writer may
        do (commit, schedule a plan) starts with this."""
        self._require_open()
        self._guard.check_held()

    def begin(self) -> tuple[str, Timeline]:
        """Start a deltacommit: a new instant, requested then inflight."""
        self.check_held()
        timeline = Timeline.load(self.table.storage)
        # another writer's failed write (its heartbeat stopped) would hold up compactions and
        # resizes until the next writer opens: rolled back here, as Hudi's writers do
        if self._guard.shares_table and self._roll_back_failed_writes(timeline):
            timeline = Timeline.load(self.table.storage)
        self._metadata_table.check(timeline)
        for attempt in range(1, INSTANT_TIME_ATTEMPTS + 1):
            instant = Instant(timeline.new_instant_time(), "deltacommit", "requested")
            self._guard.began(instant.timestamp)
            try:
                timeline.create_requested(instant, create=self._guard.create_new)
                break
            except PathExistsError:  # another writer began in the same millisecond
                self._guard.lost(instant.timestamp)
                if attempt == INSTANT_TIME_ATTEMPTS:
                    raise
                timeline = Timeline.load(self.table.storage)
        failpoints.reach("deltacommit.requested")
        timeline.transition_to_inflight(instant)
        begin_markers(self.table.storage, instant.timestamp)
        failpoints.reach("deltacommit.inflight")
        return instant.timestamp, timeline

    def remember_ring(self, metadata: ring.HashingMetadata) -> None:
        """A partition this writer created: its ring, so the next commits need not load it."""
        self._rings.add(metadata)

    def commit_context(self, instant: str, data_schema: pa.Schema) -> CommitContext:
        return CommitContext(
            storage=self.table.storage,
            instant=instant,
            table_name=self.table.name,
            data_schema=data_schema,
            ordering_field=self.table.config.ordering_field,
            log_block_format=self.options.log_block_format,
            task_memory_bytes=self.options.task_memory_bytes,
        )

    def begin_delta_commit(self, data_schema: pa.Schema) -> DeltaCommit:
        """Start a deltacommit and work out where each of its records goes."""
        spec = self.batch_spec  # refuses a table this engine cannot write before an instant exists
        instant, timeline = self.begin()
        routing, layout = self._routing(timeline, spec)
        return DeltaCommit(self, instant, timeline, data_schema, routing, layout)

    def file_system_view(self, timeline: Timeline, include_replaced: bool = False) -> FileSystemView:
        """The table's file groups as of `timeline`, from the writer's view (listed at its first
        commit, then kept in step with the timeline: see `table.file_group.view_cache`), and
        each partition's ring followed likewise."""
        synced = self._files.sync(timeline)
        self._rings.follow(timeline, synced)
        return self._files.view(timeline, include_replaced)

    @property
    def file_system_view_listings(self) -> int:
        """How often the writer's view listed the table whole: once at its first commit, and
        again after each instant made outside this process or a rollback."""
        return self._files.listings

    def rings(self, timeline: Timeline) -> dict[str, ring.HashingMetadata]:
        """The latest committed ring of every partition as of `timeline`, from the writer's cache."""
        self._rings.follow(timeline, self._files.sync(timeline))
        return self._rings.current()

    def _routing(self, timeline: Timeline, spec: BatchSpec) -> tuple[Routing, LayoutStats]:
        """Each partition's ring and each bucket's file group target, as of `timeline`.

        A group in a pending compaction plan gets its logs in a new slice at the compaction's
        instant, whose base file (not there yet) is the compaction's output. While a resize of a
        partition is pending at r, its children are targets too: their logs start slices at r,
        whose base files are the resize's output (dual writes; see `table.services.clustering.planner`).
        """
        view = self.file_system_view(timeline)
        rings = self._rings.current()
        routers: dict[str, ring.Router] = {}
        targets: dict[str, FileGroupTarget] = {}
        buckets: dict[str, dict[str, FileSlice | None]] = {}  # the rings' groups' latest slices
        compacting = pending_compaction_file_groups(timeline)
        resizing = {
            p: (plan.instant, children)
            for plan in pending_clustering_plans(timeline)
            for p, children in plan.children_by_partition().items()
        }
        for partition, stored in rings.items():
            groups = view.file_groups(partition)
            metadata = stored
            if partition in resizing:
                resize_instant, children = resizing[partition]
                metadata = stored.with_children(children)
                for child in children:
                    if child.file_id_prefix:
                        group = groups.get(child.file_id)
                        targets[child.file_id] = FileGroupTarget(
                            partition_path=partition,
                            file_id=child.file_id,
                            base_instant=resize_instant,
                            base_file_name="",
                            log_version=group.next_log_version(resize_instant) if group else 1,
                        )
            routers[partition] = self._router(metadata)
            latest_slices = buckets[partition] = {}
            for node in metadata.nodes:
                file_id = ring.file_id_for(node)
                group = groups.get(file_id)
                latest = latest_slices[file_id] = group.latest_slice() if group else None
                if (partition, file_id) in compacting:
                    base, base_file_name = compacting[(partition, file_id)], ""
                elif latest:  # a slice of log files only (as Hudi starts a bucket's group) has no base file name
                    base = latest.base_instant
                    base_file_name = latest.base_file.name.format() if latest.base_file else ""
                else:
                    base, base_file_name = None, None
                targets[file_id] = FileGroupTarget(
                    partition_path=partition,
                    file_id=file_id,
                    base_instant=base,
                    base_file_name=base_file_name,
                    log_version=group.next_log_version(base) if (group and base) else 1,
                )
        self._routers = dict(routers)
        return (
            Routing(spec, self.key_generator, routers, targets, self.options.initial_buckets),
            LayoutStats.of_slices(buckets),
        )

    def _router(self, metadata: ring.HashingMetadata) -> ring.Router:
        """The partition's router, built again only when its ring changed: a ring changes with a
        resize, and sorting every ring's nodes again each commit costs a batch over many
        partitions more than its routing does."""
        router = self._routers.get(metadata.partition_path)
        if router is None or router.metadata is not metadata:
            router = ring.Router(metadata, index_key_fields=tuple(self.table.config.record_key_fields))
        return router

    def complete(
        self,
        instant: str,
        timeline: Timeline,
        stats: list[WriteStat],
        data_schema: pa.Schema,
        extra_metadata: dict[str, str] | None,
    ) -> None:
        """Complete the deltacommit: one atomic file creation makes the batch visible. Under
        optimistic concurrency a conflict (WriteConflictError), or the commit lock not had or
        lost (CommitLockError), rolls it back instead."""
        extra = {SCHEMA_KEY: avro_schema_json(data_schema, self.table.name, with_meta_fields=False)}
        extra.update(extra_metadata or {})
        metadata = CommitMetadata.for_write(stats, extra, operation_type="UPSERT")
        self._delete_unreported_files(instant, stats)
        failpoints.reach("deltacommit.files_written")
        try:
            with self._guard.completing(timeline, instant, stats) as create:
                content = metadata.to_json().encode()
                completed = timeline.complete(Instant(instant, "deltacommit", "inflight"), content, create)
        except (WriteConflictError, CommitLockError):  # never completed: nothing of it may stay
            self.abandon(instant)
            raise
        except BaseException:
            self.left_pending(instant)
            raise
        self._guard.ended(instant)
        self._files.committed(completed, metadata)
        self._schema = (instant, data_schema)
        self.last_commit = metadata
        failpoints.reach("deltacommit.completed")
        delete_markers(self.table.storage, instant)

    def left_pending(self, instant: str) -> None:
        """This writer gives up its pending deltacommit without rolling it back (`DeltaCommit.left_pending`)."""
        self._guard.ended(instant)

    def abandon(self, instant: str) -> None:
        """Roll back this writer's pending deltacommit: nothing of it ever became visible."""
        storage = self.table.storage
        try:
            with self._guard.exclusive():
                rollback(storage, Timeline.load(storage), Instant(instant, "deltacommit", "inflight"))
        finally:
            self._guard.ended(instant)  # not rolled back (the lock not had): another writer will

    def _roll_back_failed_writes(self, timeline: Timeline) -> bool:
        """Roll back the failed writes pending on the timeline, and finish interrupted rollbacks,
        in the guard's exclusive section, taken only when there is one; True if there was."""
        failed = timeline.pending("rollback") or any(
            self._guard.is_failed(i.timestamp) for i in timeline.pending("deltacommit")
        )
        if not failed:
            return False
        storage = self.table.storage
        with self._guard.exclusive():
            return bool(rollback_pending_writes(storage, Timeline.load(storage), self._guard.is_failed))

    def _delete_unreported_files(self, instant: str, stats: list[WriteStat]) -> None:
        """Delete the files this instant marked that no write stat reports, before it completes
        (Hudi's marker reconciliation): what a failed or duplicate task attempt wrote, whole or
        cut off, must not be listed by readers under a completed instant."""
        for path in delete_marked_files(
            self.table.storage, instant, keep={s.path for s in stats if s.path is not None}
        ):
            log.warning("%s: deleted %s, written by a task attempt that did not report it", instant, path)

    def commit_empty(self, extra_metadata: dict[str, str] | None = None) -> str:
        """A deltacommit without data, recording progress (a caller's checkpoint) for a batch
        that had nothing to write."""
        instant, timeline = self.begin()
        self.complete(instant, timeline, [], self.table_schema(timeline), extra_metadata)
        return instant

    def upsert(self, records: pa.Table, extra_metadata: dict[str, str] | None = None) -> str:
        """Upsert a pyarrow Table in this process as one deltacommit; returns its instant."""
        self._require_open()
        data_schema = self.check_schema(records.schema)
        prepared = prepare_batch(records, self.batch_spec, self.key_generator)
        commit = self.begin_delta_commit(data_schema)
        with commit.writing():
            stats = commit.write(prepared)
        return commit.complete(stats, extra_metadata)

    def _require_open(self) -> None:
        if not self._open:
            raise WriterNotOpenError("the writer is not open: use it as a context manager or call open()")


def _guard(storage: Storage, options: WriteOptions, description: str) -> WriterGuard:
    if options.concurrency == Concurrency.SINGLE_WRITER:
        return SingleWriter(storage, description, options.lease_ttl_seconds)
    require_atomic_storage(storage)
    lock_type = commit_lock.CommitLock if storage.is_local else ObjectStoreCommitLock
    lock = lock_type(storage, description, options.commit_lock_ttl_seconds, options.commit_lock_wait_seconds)
    heartbeats = Heartbeats(storage, options.heartbeat_interval_seconds)
    return OptimisticWriters(storage, description, lock, heartbeats, options.heartbeat_expiry_seconds)


class _Rings:
    """The latest committed ring of every partition, as the writer's timeline sees them.

    Only a resize changes a ring, and a resize is a replacecommit: the rings are loaded once,
    and then only those of the partitions a completed replacecommit of this process names are
    loaded again; when the file-system view lists the table again (another writer's instant,
    a rollback), so are all the rings. New partitions are added by the commits that create them."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self._rings: dict[str, ring.HashingMetadata] | None = None

    def follow(self, timeline: Timeline, synced: SyncResult) -> None:
        if self._rings is None or synced.relisted:
            self._rings = {}
            self._load(timeline, ring.partitions(self._storage), self._rings)
        elif synced.replaced_partitions:
            self._load(timeline, sorted(synced.replaced_partitions), self._rings)

    def _load(self, timeline: Timeline, partitions: list[str], rings: dict[str, ring.HashingMetadata]) -> None:
        """Load the latest committed ring of each of `partitions` into `rings` again."""
        instants = timeline.completed_timestamps()
        pending = set(instants.pending)
        for partition in partitions:
            metadata = ring.load_latest(self._storage, partition, instants.active, pending_instants=pending)
            if metadata is not None:
                rings[partition] = metadata
            else:
                rings.pop(partition, None)

    def current(self) -> dict[str, ring.HashingMetadata]:
        return dict(self._rings or {})

    def add(self, metadata: ring.HashingMetadata) -> None:
        if self._rings is not None:
            self._rings[metadata.partition_path] = metadata
