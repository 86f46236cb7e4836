"""What a table looks like: its properties, timeline, files, buckets and size, read-only.

The `streamer table ...` and `streamer query` commands print these, for a person (aligned
columns, sizes in KiB/MiB, instants with their ISO time) or, with `--json`, as one JSON
document whose keys are stable:

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

import argparse
import json
import logging
import sys
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa

from table.errors import TableNotFoundError
from table.file_group.fs_view import FileGroup, FileSlice, list_partitions
from table.index import consistent_hashing as ring
from table.mor_table import MorTable
from table.schema import PARTITION_PATH
from table.services.archive import read_archived_instants
from table.services.clustering.plan import pending_clustering_plans, read_clustering_plan
from table.services.compaction import read_compaction_plan
from table.timeline.commit_metadata import CommitMetadata
from table.timeline.timeline import WRITE_ACTIONS, Action, Instant, State, Timeline, parse_instant_time

PLAN_ACTIONS = (Action.COMPACTION, Action.REPLACE_COMMIT, Action.CLEAN)
# One short query: a single core, no UI, and the JIT's quick tier (the JVM's start dominates).
QUERY_SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
                    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


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
        name=c.name, type=c.table_type, version=c.version, database=c.database,
        record_key_fields=list(c.record_key_fields), partition_fields=list(c.partition_fields),
        ordering_field=c.precombine_field, key_generator=c.key_generator_class,
        hive_style_partitioning=c.hive_style_partitioning, url_encode_partitioning=c.url_encode_partitioning,
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
        entries = [TimelineEntry(i.timestamp, iso_time(i.timestamp), i.action, i.state, archived=True)
                   for i in read_archived_instants(table)] + entries
    if limit is not None:
        newest = entries[-limit:] if limit > 0 else []
        entries = [e for e in entries[:len(entries) - len(newest)] if e.pending_plan] + newest
    return TimelineSummary(entries, [e.instant for e in entries if e.pending_plan])


def _entry(timeline: Timeline, instant: Instant) -> TimelineEntry:
    entry = TimelineEntry(instant.timestamp, iso_time(instant.timestamp), instant.action, instant.state)
    if instant.state is State.COMPLETED and instant.action in WRITE_ACTIONS:
        metadata = CommitMetadata.from_json(timeline.read_content(instant))
        stats = metadata.write_stats()
        logs = sum(s.is_delta for s in stats)
        return replace(entry, operation=metadata.operation_type,
                        records_written=sum(s.num_writes for s in stats),
                        records_updated=sum(s.num_update_writes for s in stats),
                        records_deleted=sum(s.num_deletes for s in stats),
                        base_files_added=len(stats) - logs, log_files_added=logs)
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
        raise ValueError(f"no partition {partition!r}; the table has {list_partitions(table.storage)}")
    view = table.file_system_view(partition_paths=None if partition is None else [partition])
    return FileGroups([_group_summary(g) for p in view.partition_paths()
                       for g in sorted(view.file_groups(p).values(), key=lambda g: g.file_id)])


def _current_slice(group: FileGroup) -> FileSlice:
    """The slice readers use; for a group with no base file yet, its newest slice of logs."""
    return group.latest_slice() or group.slices[max(group.slices)]


def _group_summary(group: FileGroup) -> FileGroupSummary:
    current = _current_slice(group)
    base = current.base_file.size if current.base_file else 0
    return FileGroupSummary(
        partition=group.partition_path, file_id=group.file_id, base_instant=current.base_instant,
        base_file_bytes=base, log_files=len(current.log_files), log_bytes=current.total_size - base,
        total_bytes=current.total_size, slices=len(group.slices))


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
    completed = set(timeline.completed_timestamps().active)
    partitions = []
    for partition in view.partition_paths():
        metadata = ring.load_latest(table.storage, partition, completed, repair=False)
        groups = view.file_groups(partition)
        nodes = ring.ring_nodes(metadata) if metadata else []
        partitions.append(PartitionBuckets(
            partition=partition,
            metadata_instant=metadata.instant if metadata else None,
            seq_no=metadata.seq_no if metadata else None,
            buckets=[_bucket(previous, node, groups.get(node.file_id))
                     for previous, node in zip(nodes[-1:] + nodes, nodes)],  # the first one's range wraps
            pending_resizes=resizes.get(partition, []),
        ))
    return Buckets(partitions)


def _bucket(previous: ring.HashingNode, node: ring.HashingNode, group: FileGroup | None) -> BucketSummary:
    summary = _group_summary(group) if group else None
    return BucketSummary(
        file_id=node.file_id, hash_start=(previous.value + 1) & ring.HASH_VALUE_MASK, hash_end=node.value,
        base_bytes=summary.base_file_bytes if summary else 0, log_bytes=summary.log_bytes if summary else 0,
        bytes=summary.total_bytes if summary else 0)


def _pending_resizes(timeline: Timeline) -> dict[str, list[PendingResize]]:
    """Resizes planned by pending replacecommits, per partition: the children they tag."""
    found: dict[str, list[PendingResize]] = {}
    for plan in pending_clustering_plans(timeline):
        for group in plan.groups:
            if not group.children:  # not a consistent-hashing group: nothing changes in the ring
                continue
            found.setdefault(group.partition_path, []).append(PendingResize(
                instant=plan.instant, kind=group.kind, file_ids=group.file_ids,
                children=[ResizeNode(c.value, c.file_id if c.file_id_prefix else None, c.tag.value)
                          for c in group.children]))
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
        row_count=len(paths), total_bytes=sum(p.bytes for p in partitions),
        file_groups=sum(p.file_groups for p in partitions), base_files=sum(p.base_files for p in partitions),
        log_files=sum(p.log_files for p in partitions), commits=len(timeline.completed_writes()),
        last_commit=last.timestamp if last else None, last_commit_time=iso_time(last.timestamp) if last else None,
        partitions=partitions)


def _partition_stats(partition: str, groups, rows: int) -> PartitionStats:
    slices = [s for g in groups for s in g.slices.values()]
    return PartitionStats(partition=partition, rows=rows, bytes=sum(s.total_size for s in slices),
                          file_groups=len(groups), base_files=sum(s.base_file is not None for s in slices),
                          log_files=sum(len(s.log_files) for s in slices))


# -- query ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryResult(Document):
    columns: list[str]
    rows: list[list]
    truncated: bool


def read_rows(table: MorTable, as_of: str | None = None, read_optimized: bool = False,
              incremental_from: str | None = None) -> pa.Table:
    """The rows a query sees: snapshot (as of an instant), base files only, or changed since."""
    if read_optimized:
        if as_of is not None:
            raise ValueError("--read-optimized reads the latest base files; it takes no --as-of")
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
        raise ValueError(f"query failed: {str(e).strip().splitlines()[0]}") from e
    return QueryResult(result.column_names, [list(r.values()) for r in result.slice(0, limit).to_pylist()],
                       truncated=result.num_rows > limit)


# -- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles(Document):
    files: list[str]


# -- text ----------------------------------------------------------------------------------------


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int) -> str:
    exponent = 0
    while exponent < len(_UNITS) - 1 and n >= 1024 ** (exponent + 1):
        exponent += 1
    return f"{n} B" if exponent == 0 else f"{n / 1024 ** exponent:.1f} {_UNITS[exponent]}"


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def aligned(headers: list[str], rows: list[list], right: tuple[str, ...] = ()) -> str:
    """Rows under their headers in columns; the columns named in `right` right-aligned."""
    cells = [headers] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(row, widths, headers)).rstrip()
             for row in cells]
    return "\n".join(lines)


def key_values(pairs: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in pairs)


def show_partition(partition: str) -> str:
    return partition or "(not partitioned)"


def render_info(info: TableInfo) -> str:
    facts = key_values([
        ("name", info.name), ("type", info.type), ("version", info.version), ("database", info.database),
        ("record key", ", ".join(info.record_key_fields)),
        ("partition fields", ", ".join(info.partition_fields) or None),
        ("ordering field", info.ordering_field), ("key generator", info.key_generator),
        ("hive-style partitioning", info.hive_style_partitioning),
        ("url-encoded partitions", info.url_encode_partitioning), ("base file format", info.base_file_format),
    ])
    columns = aligned(["column", "type", "nullable"], [[c.name, c.type, "yes" if c.nullable else "no"]
                                                        for c in info.columns])
    return f"{facts}\n\nschema\n{columns}"


def render_timeline(summary: TimelineSummary) -> str:
    headers = ["", "instant", "time", "action", "state", "operation", "written", "updated", "deleted",
               "base+", "logs+", "plan groups"]
    right = ("written", "updated", "deleted", "base+", "logs+", "plan groups")

    def row(e: TimelineEntry) -> list:
        marker = "PENDING" if e.pending_plan else "archived" if e.archived else ""
        return [marker, e.instant, e.time, e.action, e.state, e.operation, e.records_written, e.records_updated,
                e.records_deleted, e.base_files_added, e.log_files_added, e.plan_file_groups]

    plans = [e for e in summary.instants if e.pending_plan]
    pending = aligned(headers, [row(e) for e in plans], right) if plans else "none"
    return (f"pending plans\n{pending}\n\n"
            f"instants ({len(summary.instants)})\n{aligned(headers, [row(e) for e in summary.instants], right)}")


def render_files(groups: FileGroups) -> str:
    headers = ["partition", "file id", "base instant", "base file", "log files", "log bytes", "total", "slices"]
    return aligned(headers, [[show_partition(g.partition), g.file_id, g.base_instant, human_bytes(g.base_file_bytes),
                              g.log_files, human_bytes(g.log_bytes), human_bytes(g.total_bytes), g.slices]
                             for g in groups.file_groups],
                   right=("base file", "log files", "log bytes", "total", "slices"))


def render_buckets(result: Buckets) -> str:
    sections = []
    for p in result.partitions:
        rows = [[b.hash_start, b.hash_end, "wraps" if b.hash_start > b.hash_end else "", b.file_id,
                 human_bytes(b.bytes)] for b in p.buckets]
        table = aligned(["hash from", "hash to", "", "file id", "size"], rows, right=("hash from", "hash to", "size"))
        resizes = "\n".join(f"  {r.kind} at {r.instant}: {', '.join(r.file_ids)} -> "
                            + ", ".join(f"{c.tag} {c.value} {c.file_id or ''}".rstrip() for c in r.children)
                            for r in p.pending_resizes) or "  none"
        sections.append(f"partition {show_partition(p.partition)}: {len(p.buckets)} buckets "
                        f"(hashing metadata {p.metadata_instant}, seqNo {p.seq_no})\n{table}\n"
                        f"pending splits/merges\n{resizes}")
    return "\n\n".join(sections) or "no partitions"


def render_stats(stats: TableStats) -> str:
    last = f"{stats.last_commit} ({stats.last_commit_time})" if stats.last_commit else "-"
    facts = key_values([("rows", stats.row_count), ("bytes", human_bytes(stats.total_bytes)),
                        ("file groups", stats.file_groups), ("base files", stats.base_files),
                        ("log files", stats.log_files), ("commits", stats.commits), ("last commit", last)])
    headers = ["partition", "rows", "bytes", "file groups", "base files", "log files"]
    partitions = aligned(headers, [[show_partition(p.partition), p.rows, human_bytes(p.bytes), p.file_groups,
                                    p.base_files, p.log_files] for p in stats.partitions], right=tuple(headers[1:]))
    return f"{facts}\n\n{partitions}"


def render_query(result: QueryResult) -> str:
    numeric = [c for i, c in enumerate(result.columns)
               if all(isinstance(r[i], int | float) or r[i] is None for r in result.rows)]
    text = aligned(result.columns, result.rows, right=tuple(numeric))
    return text + ("\n(more rows; raise --limit)" if result.truncated else f"\n({len(result.rows)} rows)")


def render_report(report: ReportFiles) -> str:
    return "\n".join(report.files)


# -- the commands --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """`streamer table ...` and `streamer query`: print one document; 2 for a bad path or query."""
    try:
        table = MorTable.load(args.table_path)
        document, text = _document(table, args)
    except (TableNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(document.to_dict(), indent=2, default=str) if args.json else text(document))
    return 0


def _document(table: MorTable, args: argparse.Namespace):
    if args.command == "query":
        rows = read_rows(table, args.as_of, args.read_optimized, args.incremental_from)
        return query(rows, args.sql, args.limit), render_query
    kind = args.table_command
    if kind == "info":
        return table_info(table), render_info
    if kind == "timeline":
        return timeline_entries(table, args.limit, args.archived), render_timeline
    if kind == "files":
        return file_groups(table, args.partition), render_files
    if kind == "buckets":
        return buckets(table), render_buckets
    if kind == "stats":
        return table_stats(table), render_stats
    from streamer.cli.report import write_report

    return ReportFiles([str(p) for p in write_report(table, Path(args.out))]), render_report
