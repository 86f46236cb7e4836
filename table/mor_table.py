"""The library API: create or open a merge-on-read table, write to it, read it.

`MorTable` is a handle on a table directory; every read reloads the timeline so it sees the
latest completed commit. Writing goes through `TableWriter`, which holds the single-writer
lease and rolls back what a crashed writer left inflight before its first commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from table.config.properties import TABLE_VERSION, TableConfig
from table.errors import (
    FormatError,
    InvalidBatchError,
    InvalidRequestError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedTableVersionError,
)
from table.file_group.fs_view import FileSlice, FileSystemView
from table.file_group.layout_stats import LayoutStats, after_each_deltacommit
from table.index import consistent_hashing as ring
from table.keys import KeyGenerator
from table.read.merge import MergeRule
from table.read.predicate import Predicate
from table.read.reader import SliceReadSpec, read_base_file, read_file_slices, table_schema_with_meta
from table.schema import COMMIT_TIME, META_FIELDS, arrow_schema_from_avro, avro_schema_json
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR
from table.storage.lease import LeaseHolder, read_holder
from table.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata
from table.timeline.timeline import CompletedInstants, Timeline
from table.write.writer import TableWriter, WriteOptions

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

    # `storage_options` (see `table.storage.file_io.S3Options`) say how to reach an object store; the
    # environment fills in what they leave out.

    @staticmethod
    def exists(path: str, storage_options: Mapping[str, str] | None = None) -> bool:
        return Storage(path, storage_options).file_exists(TableConfig.PATH)

    @classmethod
    def create(cls, path: str, spec: TableSpec, storage_options: Mapping[str, str] | None = None) -> MorTable:
        storage = Storage(path, storage_options)
        if storage.file_exists(TableConfig.PATH):
            raise TableExistsError(f"a table already exists at {path}")
        for f in (*spec.record_key_fields, *spec.partition_fields, spec.ordering_field):
            if f not in spec.schema.names:
                raise InvalidBatchError(f"field '{f}' named in the table spec is not in its schema")
        key_generator = KeyGenerator(
            spec.record_key_fields, spec.partition_fields, spec.hive_style_partitioning, spec.url_encode_partitions
        )
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
        storage.makedirs(METADATA_DIR)
        config.save(storage)
        return cls(storage, config)

    @classmethod
    def load(cls, path: str, storage_options: Mapping[str, str] | None = None) -> MorTable:
        storage = Storage(path, storage_options)
        if not storage.file_exists(TableConfig.PATH):
            raise TableNotFoundError(f"no Hudi table at {path} (missing {TableConfig.PATH})")
        config = TableConfig.load(storage)
        if config.version != TABLE_VERSION:
            raise UnsupportedTableVersionError(path, config.name, config.version)
        return cls(storage, config)

    @classmethod
    def create_or_load(cls, path: str, spec: TableSpec, storage_options: Mapping[str, str] | None = None) -> MorTable:
        if cls.exists(path, storage_options):
            return cls.load(path, storage_options)
        return cls.create(path, spec, storage_options)

    # ---- metadata --------------------------------------------------------------------------

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage)

    def last_commit_metadata(self, timeline: Timeline | None = None) -> CommitMetadata | None:
        """The latest completed write that records the table's schema."""
        return self._latest_with(SCHEMA_KEY, timeline)

    def latest_extra_metadata(self, key: str, timeline: Timeline | None = None) -> str | None:
        """The value under `key` in the extraMetadata of the latest completed write that has it:
        what a writer's caller keeps with its commits (a stream's checkpoint). Service commits
        (compaction, clustering) carry only their own keys, so the search goes back past them,
        as Hudi's streamer does for its checkpoint key."""
        metadata = self._latest_with(key, timeline)
        return metadata.extra_metadata[key] if metadata else None

    def _latest_with(self, key: str, timeline: Timeline | None) -> CommitMetadata | None:
        timeline = timeline or self.timeline()
        for instant in reversed(timeline.completed_writes()):
            metadata = CommitMetadata.from_json(timeline.read_content(instant))
            if key in metadata.extra_metadata:
                return metadata
        return None

    def schema(self, timeline: Timeline | None = None) -> pa.Schema:
        """The table's columns (no meta fields): the last commit's schema, else the created one.
        Some of Hudi's commits (its `ALTER TABLE ... DROP PARTITION`) record the meta fields too."""
        metadata = self.last_commit_metadata(timeline)
        avro = metadata.extra_metadata[SCHEMA_KEY] if metadata else self.config.create_schema
        if avro is None:
            raise FormatError(f"table '{self.name}' has no schema: no commit records one, nor does hoodie.properties")
        schema = arrow_schema_from_avro(avro)
        return pa.schema([f for f in schema if f.name not in META_FIELDS], metadata=schema.metadata)

    def file_system_view(
        self,
        as_of: str | None = None,
        timeline: Timeline | None = None,
        partition_paths: list[str] | None = None,
        include_replaced: bool = False,
    ) -> FileSystemView:
        return FileSystemView.build(self.storage, timeline or self.timeline(), partition_paths, as_of, include_replaced)

    def hashing_metadata(self, partition_path: str, timeline: Timeline | None = None) -> ring.HashingMetadata | None:
        """The partition's latest committed ring of buckets, as readers load it (nothing
        repaired); None for a partition without one."""
        completed = set((timeline or self.timeline()).completed_timestamps().active)
        return ring.load_latest(self.storage, partition_path, completed, repair=False)

    def layout_history(self) -> list[tuple[str, LayoutStats]]:
        """Each completed deltacommit, oldest first, and the buckets' latest slices a snapshot as of
        it read; needs the slices the cleaner has not removed yet (a table whose clean is off)."""
        return after_each_deltacommit(self)

    def writer_lease_holder(self) -> LeaseHolder | None:
        """Who holds the table's writer lease, as it last renewed it; None when it is free."""
        return read_holder(self.storage)

    # ---- reads -----------------------------------------------------------------------------

    def read_plan(
        self, as_of: str | None = None, columns: list[str] | None = None, predicates: Sequence[Predicate] = ()
    ) -> tuple[list[FileSlice], SliceReadSpec]:
        """The slices to read and how: what the Spark source distributes among its tasks."""
        timeline = self.timeline()
        visible = timeline.completed_timestamps()
        if as_of is not None:
            visible = visible.up_to(as_of)
        view = self.file_system_view(as_of=as_of, timeline=timeline)
        return view.latest_slices(), self._read_spec(visible, timeline, columns, tuple(predicates))

    def read_spec(self, as_of: str | None = None, columns: list[str] | None = None) -> SliceReadSpec:
        """How a read as of `as_of` reads its slices (the schema it returns above all), without
        listing the table."""
        timeline = self.timeline()
        visible = timeline.completed_timestamps()
        return self._read_spec(visible if as_of is None else visible.up_to(as_of), timeline, columns, ())

    def _read_spec(
        self,
        visible: CompletedInstants,
        timeline: Timeline,
        columns: list[str] | None,
        predicates: tuple[Predicate, ...],
    ) -> SliceReadSpec:
        schema = table_schema_with_meta(self.schema(timeline))
        missing = [c for c in list(columns or ()) + [p.column for p in predicates] if c not in schema.names]
        if missing:
            raise InvalidRequestError(f"unknown column(s) {missing}; the table has {schema.names}")
        return SliceReadSpec(
            visible,
            self.config.precombine_field,
            schema,
            tuple(columns) if columns else None,
            predicates,
            MergeRule.of(self.config.payload_class),
        )

    def snapshot(
        self, columns: list[str] | None = None, as_of: str | None = None, predicates: Sequence[Predicate] = ()
    ) -> pa.Table:
        """Latest committed rows (or as of an instant): base files merged with log blocks.

        With predicates, only rows satisfying all of them, read skipping what statistics rule out."""
        slices, spec = self.read_plan(as_of, columns, predicates)
        return _concat(list(read_file_slices(self.storage, slices, spec)), spec)

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

    def writer(self, options: WriteOptions | None = None, description: str = "mor-streamer writer") -> TableWriter:
        return TableWriter(self, options or WriteOptions(), description)


def _concat(tables: list[pa.Table], spec: SliceReadSpec) -> pa.Table:
    if not tables:
        schema = spec.schema
        return schema.empty_table().select(list(spec.columns)) if spec.columns else schema.empty_table()
    return pa.concat_tables(tables)
