"""The library API: create or open a merge-on-read table, write to it, read it.

`MorTable` is a handle on a table directory; every read reloads the timeline so it sees the
latest completed commit. Writing goes through `TableWriter`, which holds the single-writer
lease and rolls back what a crashed writer left inflight before its first commit.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from table import failpoints
from table.commit_metadata import CommitMetadata, WriteStat
from table.errors import InvalidBatchError, TableExistsError, TableNotFoundError
from table.fsview import FileSlice, FileSystemView
from table.layout_stats import LayoutStats
from table.index import consistent_hashing as ring
from table.keys import KeyGenerator
from table.layout import write_partition_metadata
from table.lease import DEFAULT_TTL_SECONDS, WriterLease
from table.markers import delete_markers, marked_files
from table.properties import TableConfig
from table.predicate import Predicate
from table.read import SliceReadSpec, read_base_file, read_file_slice, table_schema_with_meta
from table.schema import (
    COMMIT_TIME,
    PARTITION_PATH,
    SchemaEvolutionError,
    arrow_schema_from_avro,
    avro_schema_json,
    evolve,
)
from table.services.clustering_plan import pending_clustering_plans
from table.services.compaction import pending_compaction_file_groups
from table.services.rollback import rollback, rollback_pending_writes
from table.storage import Storage
from table.timeline import Action, CompletedInstants, Instant, Timeline
from table.write import (
    BatchSpec,
    CommitContext,
    FileGroupTarget,
    Routing,
    file_group_slices,
    prepare_batch,
    write_file_group,
)

#: extraMetadata key under which the writer's caller stores its checkpoint (JSON).
CHECKPOINT_KEY = "mor.streamer.checkpoint"
SCHEMA_KEY = "schema"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableSpec:
    """What a new table is: its name, schema, keys and index settings."""

    name: str
    schema: pa.Schema
    record_key_fields: tuple[str, ...]
    ordering_field: str
    partition_fields: tuple[str, ...] = ()
    hive_style_partitioning: bool = True
    url_encode_partitions: bool = False
    database: str = "default"


@dataclass(frozen=True)
class WriteOptions:
    """How a writer writes: bucket count of new partitions, delete marker, log block format.

    Like Hudi's write config, these are not stored in the table: the bucket layout of a
    partition lives in its hashing metadata once created.
    """

    initial_buckets: int = 4
    delete_field: str | None = None
    log_block_format: str = "parquet"
    lease_ttl_seconds: float = DEFAULT_TTL_SECONDS


class MorTable:
    def __init__(self, storage: Storage, config: TableConfig):
        self.storage = storage
        self.config = config

    @property
    def base_uri(self) -> str:
        return self.storage.base_uri

    @property
    def name(self) -> str:
        return self.config.name

    # ---- lifecycle -------------------------------------------------------------------------

    # `storage_options` (see `table.storage.S3Options`) say how to reach an object store; the
    # environment fills in what they leave out.

    @staticmethod
    def exists(path: str, storage_options: Mapping[str, str] | None = None) -> bool:
        return Storage(path, storage_options).file_exists(TableConfig.PATH)

    @classmethod
    def create(cls, path: str, spec: TableSpec, storage_options: Mapping[str, str] | None = None) -> "MorTable":
        storage = Storage(path, storage_options)
        if storage.file_exists(TableConfig.PATH):
            raise TableExistsError(f"a table already exists at {path}")
        for f in (*spec.record_key_fields, *spec.partition_fields, spec.ordering_field):
            if f not in spec.schema.names:
                raise InvalidBatchError(f"field '{f}' named in the table spec is not in its schema")
        key_generator = KeyGenerator(spec.record_key_fields, spec.partition_fields,
                                     spec.hive_style_partitioning, spec.url_encode_partitions)
        config = TableConfig.for_new_mor_table(
            name=spec.name,
            database=spec.database,
            record_key_fields=spec.record_key_fields,
            partition_fields=spec.partition_fields,
            precombine_field=spec.ordering_field,
            key_generator_class=key_generator.class_name,
            hive_style_partitioning=spec.hive_style_partitioning,
            url_encode_partitioning=spec.url_encode_partitions,
            create_schema=avro_schema_json(spec.schema, spec.name, with_meta_fields=False),
        )
        storage.makedirs(".hoodie")
        config.save(storage)
        return cls(storage, config)

    @classmethod
    def load(cls, path: str, storage_options: Mapping[str, str] | None = None) -> "MorTable":
        storage = Storage(path, storage_options)
        if not storage.file_exists(TableConfig.PATH):
            raise TableNotFoundError(f"no Hudi table at {path} (missing {TableConfig.PATH})")
        return cls(storage, TableConfig.load(storage))

    @classmethod
    def create_or_load(cls, path: str, spec: TableSpec,
                       storage_options: Mapping[str, str] | None = None) -> "MorTable":
        if cls.exists(path, storage_options):
            return cls.load(path, storage_options)
        return cls.create(path, spec, storage_options)

    # ---- metadata --------------------------------------------------------------------------

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage)

    def last_commit_metadata(self, timeline: Timeline | None = None) -> CommitMetadata | None:
        timeline = timeline or self.timeline()
        for instant in reversed(timeline.completed_writes()):
            metadata = CommitMetadata.from_json(timeline.read_content(instant))
            if SCHEMA_KEY in metadata.extra_metadata:
                return metadata
        return None

    def checkpoint(self, timeline: Timeline | None = None) -> dict | None:
        """The checkpoint the writer's caller stored with its latest commit that has one.

        Service commits (compaction, clustering) carry no checkpoint, so the search goes back
        past them, as Hudi's streamer does for its own checkpoint key.
        """
        timeline = timeline or self.timeline()
        for instant in reversed(timeline.completed_writes()):
            metadata = CommitMetadata.from_json(timeline.read_content(instant))
            if CHECKPOINT_KEY in metadata.extra_metadata:
                return json.loads(metadata.extra_metadata[CHECKPOINT_KEY])
        return None

    def schema(self, timeline: Timeline | None = None) -> pa.Schema:
        """The table's columns (no meta fields): the last commit's schema, else the created one."""
        metadata = self.last_commit_metadata(timeline)
        avro = metadata.extra_metadata[SCHEMA_KEY] if metadata else self.config.create_schema
        return arrow_schema_from_avro(avro)

    def file_system_view(self, as_of: str | None = None, timeline: Timeline | None = None,
                         partition_paths: list[str] | None = None, include_replaced: bool = False) -> FileSystemView:
        return FileSystemView.build(self.storage, timeline or self.timeline(), partition_paths, as_of, include_replaced)

    # ---- reads -----------------------------------------------------------------------------

    def read_plan(self, as_of: str | None = None, columns: list[str] | None = None,
                  predicates: Sequence[Predicate] = ()) -> tuple[list[FileSlice], SliceReadSpec]:
        """The slices to read and how: what the Spark source distributes among its tasks."""
        timeline = self.timeline()
        visible = timeline.completed_timestamps()
        if as_of is not None:
            visible = visible.up_to(as_of)
        view = self.file_system_view(as_of=as_of, timeline=timeline)
        return view.latest_slices(), self._read_spec(visible, timeline, columns, tuple(predicates))

    def _read_spec(self, visible: CompletedInstants, timeline: Timeline, columns: list[str] | None,
                   predicates: tuple[Predicate, ...]) -> SliceReadSpec:
        schema = table_schema_with_meta(self.schema(timeline))
        missing = [c for c in list(columns or ()) + [p.column for p in predicates] if c not in schema.names]
        if missing:
            raise ValueError(f"unknown column(s) {missing}; the table has {schema.names}")
        return SliceReadSpec(visible, self.config.precombine_field, schema, tuple(columns) if columns else None,
                             predicates)

    def snapshot(self, columns: list[str] | None = None, as_of: str | None = None,
                 predicates: Sequence[Predicate] = ()) -> pa.Table:
        """Latest committed rows (or as of an instant): base files merged with log blocks.

        With predicates, only rows satisfying all of them, read skipping what statistics rule out."""
        slices, spec = self.read_plan(as_of, columns, predicates)
        return _concat([read_file_slice(self.storage, s, spec) for s in slices], spec)

    def read_optimized(self, columns: list[str] | None = None, predicates: Sequence[Predicate] = ()) -> pa.Table:
        """Base files only: fast, but without what log files hold since the last compaction."""
        slices, spec = self.read_plan(None, columns, predicates)
        return _concat([read_base_file(self.storage, s, spec) for s in slices], spec)

    def incremental(self, start: str, end: str | None = None, columns: list[str] | None = None) -> pa.Table:
        """Latest versions of the records written by commits in (start, end]."""
        rows = self.snapshot(as_of=end)
        changed = rows.filter(pc.greater(rows[COMMIT_TIME], start))
        return changed.select(columns) if columns else changed

    # ---- writes ----------------------------------------------------------------------------

    def writer(self, options: WriteOptions | None = None, description: str = "mor-streamer writer") -> "TableWriter":
        return TableWriter(self, options or WriteOptions(), description)


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
        whose base files are the resize's output (dual writes; see `table.services.clustering`).
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
            raise RuntimeError("the writer is not open: use it as a context manager or call open()")


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


class DeltaCommit:
    """One deltacommit in progress: begun on the timeline (requested, then inflight) with the
    routing of its records, then completed with the write stats of the files its tasks wrote,
    or abandoned. The in-process upsert and the Spark write both go through it."""

    def __init__(self, writer: TableWriter, instant: str, timeline: Timeline, data_schema: pa.Schema,
                 routing: Routing, layout: LayoutStats):
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

    def abandon(self) -> None:
        """Roll the commit back: delete what its tasks wrote; nothing of it ever became visible."""
        storage = self.writer.table.storage
        rollback(storage, Timeline.load(storage), Instant(self.instant, "deltacommit", "inflight"))

    def _record_new_partitions(self, stats: list[WriteStat]) -> None:
        storage = self.writer.table.storage
        for partition in sorted({s.partition_path for s in stats if self.routing.is_new(s.partition_path)}):
            write_partition_metadata(storage, partition, self.instant)
            used = self.routing.router(partition).metadata
            stored = ring.create_initial(storage, partition, self.routing.initial_buckets)
            if stored.nodes != used.nodes:
                raise ring.HashingMetadataError(
                    f"partition '{partition}' was created with other buckets than this commit routed to "
                    f"({len(stored.nodes)} against {len(used.nodes)}); the commit is not completed")
            self.writer.remember_ring(stored)


def _concat(tables: list[pa.Table], spec: SliceReadSpec) -> pa.Table:
    if not tables:
        schema = spec.schema
        return schema.empty_table().select(list(spec.columns)) if spec.columns else schema.empty_table()
    return pa.concat_tables(tables)
