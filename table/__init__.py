"""The storage engine's front door: merge-on-read tables in Apache Hudi's format (table version 6).

What a library user and the streamer need, by concept: the table (`MorTable`, `TableSpec`), its
writer and options, reads with predicates, the table services called one way (schedule on the
writer, execute anywhere, list what is pending), the timeline and commit metadata, the
consistent-hashing index's rings, storage access and options, catalog sync, the choices the
settings offer, schema helpers, and the errors, every one a `TableError`. The Spark parts have
their own front door, `table.spark`. The modules below are the engine's own; their names may
change.

    from table import MorTable, TableSpec, WriteOptions

    table = MorTable.create_or_load("tables/orders", TableSpec("orders", schema, ("id",), "ts"))
    with table.writer(WriteOptions()) as writer:
        writer.upsert(records)
    rows = table.snapshot()
"""

from table.config.choices import (
    Choice,
    CleanPolicyKind,
    CompactionStrategyKind,
    Concurrency,
    LogBlockFormat,
    SplitPoint,
)
from table.config.properties import TableConfig
from table.errors import (
    CatalogSyncError,
    ClusteringConflictError,
    CommitLockError,
    CompactionConflictError,
    FormatError,
    HashingMetadataError,
    InvalidBatchError,
    InvalidRequestError,
    KeyGenerationError,
    PathExistsError,
    PathNotFoundError,
    SchemaEvolutionError,
    StorageOptionsError,
    TableError,
    TableExistsError,
    TableNotFoundError,
    TimelineStateError,
    UnsupportedTableVersionError,
    UnsupportedTypeError,
    WriteConflictError,
    WriteInProgressError,
    WriterConflictError,
    WriterNotOpenError,
)
from table.failpoints import PAUSE_ENV_VAR as FAILPOINT_PAUSE_ENV_VAR
from table.failpoints import reach as reach_failpoint
from table.file_group.fs_view import FileGroup, FileSlice, list_partitions
from table.file_group.layout_stats import LayoutStats
from table.file_group.log_file.avro_binary import log_schema, read_avro_records
from table.index.consistent_hashing import (
    HASH_VALUE_MASK,
    HashingMetadata,
    HashingNode,
    hash_value,
    hash_values,
    ring_nodes,
)
from table.keys import is_key_type
from table.mor_table import MorTable, TableSpec
from table.plans.clustering import ClusteringGroup, ClusteringPlan, PlannedSlice, read_clustering_plan
from table.plans.compaction import CompactionOperation, read_compaction_plan
from table.plans.pending import pending_clustering_plans
from table.read.predicate import Predicate
from table.schema import (
    COMMIT_TIME,
    PARTITION_PATH,
    RECORD_KEY,
    AvroSchema,
    arrow_schema_from_avro,
    evolve,
    to_avro_schema,
    widens,
)
from table.services import (
    ArchivePolicy,
    ArchiveResult,
    CleanPolicy,
    CleanResult,
    ClusteringPolicy,
    ClusteringResult,
    CompactionResult,
    CompactionStrategy,
    archive,
    clean,
    execute_clean,
    execute_clustering,
    execute_compaction,
    pending_cleans,
    pending_clusterings,
    pending_compactions,
    read_archived_instants,
    rollback_clustering,
    schedule_clean,
    schedule_clustering,
    schedule_compaction,
)
from table.storage.commit_lock import require_atomic_storage
from table.storage.file_io import STORAGE_OPTION_NAMES, S3Options, Storage
from table.storage.layout import AUX_DIR, METADATA_DIR, BaseFileName, LogFileName, partition_file_path
from table.storage.lease import LeaseHolder
from table.storage.object_store_lock import ObjectStoreCommitLock
from table.sync import HiveMetastoreClient, HiveSync, SyncResult, SyncTarget
from table.timeline.commit_metadata import CommitMetadata, ReplaceCommitMetadata, WriteStat
from table.timeline.timeline import WRITE_ACTIONS, Action, Instant, State, Timeline, parse_instant_time
from table.units import MIB
from table.write.delta_commit import DeltaCommit
from table.write.prepare import is_orderable_type
from table.write.writer import TableWriter, WriteOptions

__all__ = [
    # the table, its writer and reads
    "MorTable",
    "TableSpec",
    "TableConfig",
    "TableWriter",
    "WriteOptions",
    "DeltaCommit",
    "Predicate",
    # table services
    "schedule_compaction",
    "execute_compaction",
    "pending_compactions",
    "CompactionStrategy",
    "CompactionResult",
    "schedule_clustering",
    "execute_clustering",
    "pending_clusterings",
    "rollback_clustering",
    "ClusteringPolicy",
    "ClusteringResult",
    "schedule_clean",
    "execute_clean",
    "pending_cleans",
    "clean",
    "CleanPolicy",
    "CleanResult",
    "archive",
    "read_archived_instants",
    "ArchivePolicy",
    "ArchiveResult",
    # plans of pending services
    "pending_clustering_plans",
    "read_clustering_plan",
    "ClusteringPlan",
    "ClusteringGroup",
    "PlannedSlice",
    "read_compaction_plan",
    "CompactionOperation",
    # the timeline and commit metadata
    "Timeline",
    "Instant",
    "Action",
    "State",
    "WRITE_ACTIONS",
    "parse_instant_time",
    "CommitMetadata",
    "ReplaceCommitMetadata",
    "WriteStat",
    # file groups and the bucket index
    "FileGroup",
    "FileSlice",
    "list_partitions",
    "LayoutStats",
    "HashingMetadata",
    "HashingNode",
    "ring_nodes",
    "hash_value",
    "hash_values",
    "HASH_VALUE_MASK",
    # storage
    "Storage",
    "S3Options",
    "STORAGE_OPTION_NAMES",
    "METADATA_DIR",
    "AUX_DIR",
    "BaseFileName",
    "LogFileName",
    "partition_file_path",
    "LeaseHolder",
    # catalog sync
    "HiveSync",
    "HiveMetastoreClient",
    "SyncTarget",
    "SyncResult",
    # choices the settings offer
    "Choice",
    "LogBlockFormat",
    "CompactionStrategyKind",
    "Concurrency",
    "CleanPolicyKind",
    "SplitPoint",
    # schemas and keys
    "AvroSchema",
    "arrow_schema_from_avro",
    "log_schema",
    "read_avro_records",
    "to_avro_schema",
    "evolve",
    "widens",
    "is_key_type",
    "is_orderable_type",
    "RECORD_KEY",
    "PARTITION_PATH",
    "COMMIT_TIME",
    # units and failure points
    "MIB",
    "reach_failpoint",
    "require_atomic_storage",
    "ObjectStoreCommitLock",
    "FAILPOINT_PAUSE_ENV_VAR",
    # errors
    "TableError",
    "InvalidBatchError",
    "KeyGenerationError",
    "SchemaEvolutionError",
    "InvalidRequestError",
    "UnsupportedTypeError",
    "StorageOptionsError",
    "TableNotFoundError",
    "TableExistsError",
    "PathExistsError",
    "PathNotFoundError",
    "FormatError",
    "HashingMetadataError",
    "TimelineStateError",
    "WriteConflictError",
    "UnsupportedTableVersionError",
    "WriteInProgressError",
    "WriterConflictError",
    "WriterNotOpenError",
    "CompactionConflictError",
    "ClusteringConflictError",
    "CommitLockError",
    "CatalogSyncError",
]
