"""The table's single writer: it holds the lease, rolls back what a crashed writer left inflight,
and begins each deltacommit with the routing of its records."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from table import failpoints
from table.config.choices import LogBlockFormat
from table.errors import InvalidBatchError, SchemaEvolutionError, WriterNotOpenError
from table.file_group.layout_stats import LayoutStats
from table.index import consistent_hashing as ring
from table.keys import KeyGenerator
from table.schema import PARTITION_PATH, avro_schema_json, evolve
from table.plans.clustering import pending_clustering_plans
from table.plans.compaction import pending_compaction_file_groups
from table.services.rollback import rollback_pending_writes
from table.storage.file_io import Storage
from table.storage.lease import DEFAULT_TTL_SECONDS, WriterLease
from table.storage.markers import delete_markers, marked_files
from table.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from table.timeline.timeline import Action, Instant, Timeline
from table.write.delta_commit import DeltaCommit
from table.write.file_group_writer import CommitContext, write_file_group
from table.write.metadata_table import MetadataTableGuard
from table.write.prepare import BatchSpec, prepare_batch
from table.write.routing import FileGroupTarget, Routing, file_group_slices

if TYPE_CHECKING:
    from table.mor_table import MorTable


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteOptions:
    """How a writer writes: bucket count of new partitions, delete marker, log block format.

    Like Hudi's write config, these are not stored in the table: the bucket layout of a
    partition lives in its hashing metadata once created.
    """

    initial_buckets: int = 4
    delete_field: str | None = None
    log_block_format: LogBlockFormat = LogBlockFormat.PARQUET
    lease_ttl_seconds: float = DEFAULT_TTL_SECONDS


class TableWriter:
    """The table's single writer: one deltacommit per `upsert` call."""

    def __init__(self, table: MorTable, options: WriteOptions, description: str):
        self.table = table
        self.options = options
        self.key_generator = KeyGenerator.from_config(table.config)
        self._lease = WriterLease(table.storage, description, options.lease_ttl_seconds)
        self._open = False
        self._rings = _Rings(table.storage)
        self.last_commit: CommitMetadata | None = None  # what the latest `complete` committed
        self.last_layout: LayoutStats | None = None  # the buckets' latest slices after it

    def __enter__(self) -> "TableWriter":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "TableWriter":
        self._lease.acquire()
        try:
            rollback_pending_writes(self.table.storage, Timeline.load(self.table.storage))
            self._metadata_table = MetadataTableGuard(self.table)
            self._metadata_table.check()
        except BaseException:
            with contextlib.suppress(OSError):  # the fault that failed the rollback may fail this too
                self._lease.release()
            raise
        self._open = True
        return self

    def close(self) -> None:
        if self._open:
            self._lease.release()
            self._open = False

    @property
    def batch_spec(self) -> BatchSpec:
        c = self.table.config
        return BatchSpec(
            record_key_fields=tuple(c.record_key_fields),
            partition_fields=tuple(c.partition_fields),
            ordering_field=c.precombine_field,
            hive_style_partitioning=c.hive_style_partitioning,
            url_encode_partitions=c.url_encode_partitioning,
            delete_field=self.options.delete_field,
        )

    def check_schema(self, incoming: pa.Schema) -> pa.Schema:
        """The data schema of the commit: the table's, evolved by the batch's new columns and
        widened types (see `table.schema.evolve`); refuses a batch that drops or retypes a column."""
        columns = pa.schema([f for f in incoming if f.name != self.options.delete_field])
        try:
            return evolve(self.table.schema(), columns)
        except SchemaEvolutionError as e:
            raise InvalidBatchError(f"the batch does not fit the table: {e}") from None

    def check_held(self) -> None:
        """Raise unless this writer is open and still holds the lease: what only the writer may
        do (commit, schedule a plan) starts with this."""
        self._require_open()
        self._lease.check_held()

    def begin(self) -> tuple[str, Timeline]:
        """Start a deltacommit: a new instant, requested then inflight."""
        self.check_held()
        timeline = Timeline.load(self.table.storage)
        instant = Instant(timeline.new_instant_time(), "deltacommit", "requested")
        self._metadata_table.check(timeline, instant.timestamp)
        timeline.create_requested(instant)
        failpoints.reach("deltacommit.requested")
        timeline.transition_to_inflight(instant)
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
            ordering_field=self.table.config.precombine_field,
            log_block_format=self.options.log_block_format,
        )

    def begin_delta_commit(self, data_schema: pa.Schema) -> "DeltaCommit":
        """Start a deltacommit and work out where each of its records goes."""
        instant, timeline = self.begin()
        routing, layout = self._routing(timeline)
        return DeltaCommit(self, instant, timeline, data_schema, routing, layout)

    def _routing(self, timeline: Timeline) -> tuple[Routing, LayoutStats]:
        """Each partition's ring and each bucket's file group target, as of `timeline`.

        A group in a pending compaction plan gets its logs in a new slice at the compaction's
        instant, whose base file (not there yet) is the compaction's output. While a resize of a
        partition is pending at r, its children are targets too: their logs start slices at r,
        whose base files are the resize's output (dual writes; see `table.services.clustering.planner`).
        """
        rings = self._rings.as_of(timeline)
        routers: dict[str, ring.Router] = {}
        targets: dict[str, FileGroupTarget] = {}
        view = self.table.file_system_view(timeline=timeline, partition_paths=sorted(rings))
        compacting = pending_compaction_file_groups(timeline)
        resizing = {p: (plan.instant, children) for plan in pending_clustering_plans(timeline)
                    for p, children in plan.children_by_partition().items()}
        for partition, metadata in rings.items():
            groups = view.file_groups(partition)
            if partition in resizing:
                resize_instant, children = resizing[partition]
                metadata = metadata.with_children(children)
                for child in children:
                    if child.file_id_prefix:
                        group = groups.get(child.file_id)
                        targets[child.file_id] = FileGroupTarget(
                            partition_path=partition, file_id=child.file_id, base_instant=resize_instant,
                            base_file_name="",
                            log_version=group.next_log_version(resize_instant) if group else 1)
            routers[partition] = ring.Router(metadata, index_key_fields=tuple(self.table.config.record_key_fields))
            for node in metadata.nodes:
                file_id = ring.file_id_for(node)
                group = groups.get(file_id)
                latest = group.latest_slice() if group else None
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
        buckets = {p: [ring.file_id_for(node) for node in m.nodes] for p, m in rings.items()}
        return (Routing(self.batch_spec, self.key_generator, routers, targets, self.options.initial_buckets),
                LayoutStats.of_view(view, buckets))

    def complete(self, instant: str, timeline: Timeline, stats: list[WriteStat], data_schema: pa.Schema,
                 extra_metadata: dict[str, str] | None) -> None:
        """Complete the deltacommit: one atomic file creation makes the batch visible."""
        self._lease.check_held()
        extra = {SCHEMA_KEY: avro_schema_json(data_schema, self.table.name, with_meta_fields=False)}
        extra.update(extra_metadata or {})
        metadata = CommitMetadata.for_write(stats, extra, operation_type="UPSERT")
        self._delete_unreported_files(instant, stats)
        failpoints.reach("deltacommit.files_written")
        timeline.complete(Instant(instant, "deltacommit", "inflight"), metadata.to_json().encode())
        self.last_commit = metadata
        failpoints.reach("deltacommit.completed")
        delete_markers(self.table.storage, instant)

    def _delete_unreported_files(self, instant: str, stats: list[WriteStat]) -> None:
        """Delete the files this instant marked that no write stat reports, before it completes
        (Hudi's marker reconciliation): what a failed or duplicate task attempt wrote, whole or
        cut off, must not be listed by readers under a completed instant."""
        storage = self.table.storage
        reported = {s.path for s in stats}
        for path in marked_files(storage, instant):
            if path in reported:
                continue
            for leftover in [path, *storage.temp_files_of(path)]:
                storage.delete(leftover)
                log.warning("%s: deleted %s, written by a task attempt that did not report it", instant, leftover)

    def commit_empty(self, extra_metadata: dict[str, str] | None = None) -> str:
        """A deltacommit without data, recording progress (a caller's checkpoint) for a batch
        that had nothing to write."""
        instant, timeline = self.begin()
        self.complete(instant, timeline, [], self.table.schema(timeline), extra_metadata)
        return instant

    def upsert(self, records: pa.Table, extra_metadata: dict[str, str] | None = None) -> str:
        """Upsert a pyarrow Table in this process as one deltacommit; returns its instant."""
        self._require_open()
        data_schema = self.check_schema(records.schema)
        prepared = prepare_batch(records, self.batch_spec, self.key_generator)
        commit = self.begin_delta_commit(data_schema)
        stats: list[WriteStat] = []
        for task_id, (file_id, rows) in enumerate(file_group_slices(commit.routing.route(prepared))):
            stat = write_file_group(commit.context, commit.routing.target(file_id, rows[PARTITION_PATH][0].as_py()),
                                    rows, task_id)
            if stat is not None:
                stats.append(stat)
        return commit.complete(stats, extra_metadata)

    def _require_open(self) -> None:
        if not self._open:
            raise WriterNotOpenError("the writer is not open: use it as a context manager or call open()")


class _Rings:
    """The latest committed ring of every partition, as a writer's timeline sees them.

    Only a resize changes a ring, and a resize is a replacecommit, so the rings loaded for one
    timeline hold for the next as long as its replacecommits (pending or completed) are the
    same; new partitions are added by the commits that create them."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self._key: tuple | None = None
        self._rings: dict[str, ring.HashingMetadata] = {}

    def as_of(self, timeline: Timeline) -> dict[str, ring.HashingMetadata]:
        key = tuple((i.timestamp, i.state) for i in timeline.instants if i.action == Action.REPLACE_COMMIT)
        if key != self._key:
            instants = timeline.completed_timestamps()
            pending = set(instants.pending)
            loaded = {p: ring.load_latest(self._storage, p, instants.active, pending_instants=pending)
                      for p in ring.partitions(self._storage)}
            self._rings = {p: m for p, m in loaded.items() if m is not None}
            self._key = key
        return dict(self._rings)

    def add(self, metadata: ring.HashingMetadata) -> None:
        self._rings[metadata.partition_path] = metadata
