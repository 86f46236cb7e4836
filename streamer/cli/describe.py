"""What a table looks like: its properties, timeline, files, buckets and size, read-only.

The `streamer table ...` and `streamer query` commands print these, for a person
(`streamer.cli.output`) or, with `--json`, as one JSON document whose keys are stable:

- `table info`: name, type, version, database, record_key_fields, partition_fields,
  ordering_field, key_generator, hive_style_partitioning, url_encode_partitioning,
  base_file_format, columns [{name, type, nullable}].
- `table timeline`: instants [{instant, time, action, state, archived, pending_plan, operation,
  records_written, records_updated, records_deleted, base_files_added, log_files_added,
  plan_file_groups}] oldest first, and pending_plans [instant] (requested or inflight
  compaction, replacecommit and clean). Counts are null where the instant has none (pending,
  archived, clean, rollback); plan_file_groups only for pending compaction and replacecommit.
- `table files`: file_groups [{partition, file_id, base_instant, base_file_bytes, log_files,
  log_bytes, total_bytes, slices}]: sizes of each group's latest slice, and its slice count.
- `table buckets`: partitions [{partition, metadata_instant, seq_no, buckets [{file_id,
  hash_start, hash_end, base_bytes, log_bytes, bytes}], pending_resizes [{instant, kind,
  file_ids, children [{value, file_id, tag}]}]}]. A bucket owns hashes hash_start..hash_end
  inclusive; the first one's range wraps past the top of the hash space.
- `table stats`: row_count, total_bytes, file_groups, base_files, log_files, commits,
  last_commit, last_commit_time, partitions [{partition, rows, bytes, file_groups, base_files,
  log_files}]. Bytes and file counts cover every file slice still on storage (not cleaned yet);
  commits counts the completed writes of the active timeline.
- `table report`: files [path] of the PNG plots written.
- `query`: columns [name], rows [[value]], truncated (more rows than the limit).

Nothing here writes to the table: hashing metadata is read without the repair a writer does.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, replace

import pyarrow as pa

from streamer.errors import InvalidArgumentError
from table import (
    HASH_VALUE_MASK,
    PARTITION_PATH,
    WRITE_ACTIONS,
    Action,
    CommitMetadata,
    FileGroup,
    FileSlice,
    HashingNode,
    Instant,
    MorTable,
    State,
    Timeline,
    list_partitions,
    parse_instant_time,
    pending_clustering_plans,
    read_archived_instants,
    read_clustering_plan,
    read_compaction_plan,
    ring_nodes,
)

PLAN_ACTIONS = (Action.COMPACTION, Action.REPLACE_COMMIT, Action.CLEAN)
# One short query: a single core, no UI, and the JIT's quick tier (the JVM's start dominates).
QUERY_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


@dataclass(frozen=True)
class Document:
    """A result the commands print; `to_dict` is its `--json` form."""

    def to_dict(self) -> dict:
        return asdict(self)


# -- table info ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool


@dataclass(frozen=True)
class TableInfo(Document):
    name: str
    type: str
    version: int
    database: str | None
    record_key_fields: list[str]
    partition_fields: list[str]
    ordering_field: str | None
    key_generator: str | None
    hive_style_partitioning: bool
    url_encode_partitioning: bool
    base_file_format: str
    columns: list[Column]


def table_info(table: MorTable) -> TableInfo:
    c = table.config
    return TableInfo(
        name=c.name,
        type=c.table_type,
        version=c.version,
        database=c.database,
        record_key_fields=list(c.record_key_fields),
        partition_fields=list(c.partition_fields),
        ordering_field=c.precombine_field,
        key_generator=c.key_generator_class,
        hive_style_partitioning=c.hive_style_partitioning,
        url_encode_partitioning=c.url_encode_partitioning,
        base_file_format=c.base_file_format,
        columns=[Column(f.name, str(f.type), f.nullable) for f in table.schema()],
    )


# -- timeline ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    instant: str
    time: str
    action: str
    state: str
    archived: bool = False
    pending_plan: bool = False
    operation: str | None = None
    records_written: int | None = None
    records_updated: int | None = None
    records_deleted: int | None = None
    base_files_added: int | None = None
    log_files_added: int | None = None
    plan_file_groups: int | None = None


@dataclass(frozen=True)
class TimelineSummary(Document):
    instants: list[TimelineEntry]
    pending_plans: list[str]


def timeline_entries(table: MorTable, limit: int | None = None, archived: bool = False) -> TimelineSummary:
    """The newest `limit` instants (all when None), oldest first; pending plans are always in,
    however old: they are what an operator has to act on."""
    timeline = table.timeline()
    entries = [_entry(timeline, i) for i in timeline.instants]
    if archived:
        entries = [
            TimelineEntry(i.timestamp, iso_time(i.timestamp), i.action, i.state, archived=True)
            for i in read_archived_instants(table)
        ] + entries
    if limit is not None:
        newest = entries[-limit:] if limit > 0 else []
        entries = [e for e in entries[: len(entries) - len(newest)] if e.pending_plan] + newest
    return TimelineSummary(entries, [e.instant for e in entries if e.pending_plan])


def _entry(timeline: Timeline, instant: Instant) -> TimelineEntry:
    entry = TimelineEntry(instant.timestamp, iso_time(instant.timestamp), instant.action, instant.state)
    if instant.state is State.COMPLETED and instant.action in WRITE_ACTIONS:
        metadata = CommitMetadata.from_json(timeline.read_content(instant))
        stats = metadata.write_stats()
        logs = sum(s.is_delta for s in stats)
        return replace(
            entry,
            operation=metadata.operation_type,
            records_written=sum(s.num_writes for s in stats),
            records_updated=sum(s.num_update_writes for s in stats),
            records_deleted=sum(s.num_deletes for s in stats),
            base_files_added=len(stats) - logs,
            log_files_added=logs,
        )
    if instant.state is not State.COMPLETED and instant.action in PLAN_ACTIONS:
        return replace(entry, pending_plan=True, plan_file_groups=_plan_file_groups(timeline, instant))
    return entry


def _plan_file_groups(timeline: Timeline, instant: Instant) -> int | None:
    if instant.action is Action.COMPACTION:
        return len(read_compaction_plan(timeline, instant.timestamp)[0])
    if instant.action is Action.REPLACE_COMMIT:
        plan = read_clustering_plan(timeline, instant.timestamp)
        return sum(len(g.slices) for g in plan.groups) if plan else 0
    return None


def iso_time(instant: str) -> str:
    return parse_instant_time(instant).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- files ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileGroupSummary:
    partition: str
    file_id: str
    base_instant: str
    base_file_bytes: int
    log_files: int
    log_bytes: int
    total_bytes: int
    slices: int


@dataclass(frozen=True)
class FileGroups(Document):
    file_groups: list[FileGroupSummary]


def file_groups(table: MorTable, partition: str | None = None) -> FileGroups:
    """Every file group of the table, or of one partition."""
    if partition is not None and partition not in list_partitions(table.storage):
        raise InvalidArgumentError(f"no partition {partition!r}; the table has {list_partitions(table.storage)}")
    view = table.file_system_view(partition_paths=None if partition is None else [partition])
    return FileGroups(
        [
            _group_summary(g)
            for p in view.partition_paths()
            for g in sorted(view.file_groups(p).values(), key=lambda g: g.file_id)
        ]
    )


def _current_slice(group: FileGroup) -> FileSlice:
    """The slice readers use; for a group with no base file yet, its newest slice of logs."""
    return group.latest_slice() or group.slices[max(group.slices)]


def _group_summary(group: FileGroup) -> FileGroupSummary:
    current = _current_slice(group)
    base = current.base_file.size if current.base_file else 0
    return FileGroupSummary(
        partition=group.partition_path,
        file_id=group.file_id,
        base_instant=current.base_instant,
        base_file_bytes=base,
        log_files=len(current.log_files),
        log_bytes=current.total_size - base,
        total_bytes=current.total_size,
        slices=len(group.slices),
    )


# -- buckets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketSummary:
    file_id: str
    hash_start: int
    hash_end: int
    base_bytes: int
    log_bytes: int
    bytes: int


@dataclass(frozen=True)
class ResizeNode:
    value: int
    file_id: str | None
    tag: str


@dataclass(frozen=True)
class PendingResize:
    instant: str
    kind: str  # split | merge | sort
    file_ids: list[str]
    children: list[ResizeNode]


@dataclass(frozen=True)
class PartitionBuckets:
    partition: str
    metadata_instant: str | None
    seq_no: int | None
    buckets: list[BucketSummary]
    pending_resizes: list[PendingResize]


@dataclass(frozen=True)
class Buckets(Document):
    partitions: list[PartitionBuckets]


def buckets(table: MorTable) -> Buckets:
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    resizes = _pending_resizes(timeline)
    partitions = []
    for partition in view.partition_paths():
        metadata = table.hashing_metadata(partition, timeline)
        groups = view.file_groups(partition)
        nodes = ring_nodes(metadata) if metadata else []
        partitions.append(
            PartitionBuckets(
                partition=partition,
                metadata_instant=metadata.instant if metadata else None,
                seq_no=metadata.seq_no if metadata else None,
                buckets=[
                    _bucket(previous, node, groups.get(node.file_id))
                    for previous, node in zip(nodes[-1:] + nodes, nodes)
                ],  # the first one's range wraps
                pending_resizes=resizes.get(partition, []),
            )
        )
    return Buckets(partitions)


def _bucket(previous: HashingNode, node: HashingNode, group: FileGroup | None) -> BucketSummary:
    summary = _group_summary(group) if group else None
    return BucketSummary(
        file_id=node.file_id,
        hash_start=(previous.value + 1) & HASH_VALUE_MASK,
        hash_end=node.value,
        base_bytes=summary.base_file_bytes if summary else 0,
        log_bytes=summary.log_bytes if summary else 0,
        bytes=summary.total_bytes if summary else 0,
    )


def _pending_resizes(timeline: Timeline) -> dict[str, list[PendingResize]]:
    """Resizes planned by pending replacecommits, per partition: the children they tag."""
    found: dict[str, list[PendingResize]] = {}
    for plan in pending_clustering_plans(timeline):
        for group in plan.groups:
            if not group.children:  # not a consistent-hashing group: nothing changes in the ring
                continue
            found.setdefault(group.partition_path, []).append(
                PendingResize(
                    instant=plan.instant,
                    kind=group.kind,
                    file_ids=group.file_ids,
                    children=[
                        ResizeNode(c.value, c.file_id if c.file_id_prefix else None, c.tag.value)
                        for c in group.children
                    ],
                )
            )
    return found


# -- stats ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionStats:
    partition: str
    rows: int
    bytes: int
    file_groups: int
    base_files: int
    log_files: int


@dataclass(frozen=True)
class TableStats(Document):
    row_count: int
    total_bytes: int
    file_groups: int
    base_files: int
    log_files: int
    commits: int
    last_commit: str | None
    last_commit_time: str | None
    partitions: list[PartitionStats]


def table_stats(table: MorTable) -> TableStats:
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    paths = table.snapshot(columns=[PARTITION_PATH])[PARTITION_PATH].to_pylist()
    rows = Counter(paths)
    partitions = [_partition_stats(p, view.file_groups(p).values(), rows[p]) for p in view.partition_paths()]
    last = timeline.last_completed_write()
    return TableStats(
        row_count=len(paths),
        total_bytes=sum(p.bytes for p in partitions),
        file_groups=sum(p.file_groups for p in partitions),
        base_files=sum(p.base_files for p in partitions),
        log_files=sum(p.log_files for p in partitions),
        commits=len(timeline.completed_writes()),
        last_commit=last.timestamp if last else None,
        last_commit_time=iso_time(last.timestamp) if last else None,
        partitions=partitions,
    )


def _partition_stats(partition: str, groups, rows: int) -> PartitionStats:
    slices = [s for g in groups for s in g.slices.values()]
    return PartitionStats(
        partition=partition,
        rows=rows,
        bytes=sum(s.total_size for s in slices),
        file_groups=len(groups),
        base_files=sum(s.base_file is not None for s in slices),
        log_files=sum(len(s.log_files) for s in slices),
    )


# -- query ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryResult(Document):
    columns: list[str]
    rows: list[list]
    truncated: bool


def read_rows(
    table: MorTable, as_of: str | None = None, read_optimized: bool = False, incremental_from: str | None = None
) -> pa.Table:
    """The rows a query sees: snapshot (as of an instant), base files only, or changed since."""
    if read_optimized:
        if as_of is not None:
            raise InvalidArgumentError("--read-optimized reads the latest base files; it takes no --as-of")
        return table.read_optimized()
    if incremental_from is not None:
        return table.incremental(incremental_from, as_of)
    return table.snapshot(as_of=as_of)


def query(rows: pa.Table, sql: str, limit: int) -> QueryResult:
    """Run SQL over `rows` as view `t` in a small local Spark session (no DuckDB here)."""
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.logger import PySparkLogger

    from streamer.app import spark_session

    spark = spark_session("local[1]", QUERY_SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # the error is ours to print
    spark.createDataFrame(rows).createOrReplaceTempView("t")
    try:
        result = spark.sql(sql).limit(limit + 1).toArrow()
    except (AnalysisException, ParseException) as e:
        raise InvalidArgumentError(f"query failed: {str(e).strip().splitlines()[0]}") from e
    return QueryResult(
        result.column_names,
        [list(r.values()) for r in result.slice(0, limit).to_pylist()],
        truncated=result.num_rows > limit,
    )


# -- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles(Document):
    files: list[str]
