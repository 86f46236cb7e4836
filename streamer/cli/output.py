"""The table documents (`streamer.cli.describe`) as a person reads them: aligned columns, sizes
in KiB/MiB, instants with their ISO time. `--json` prints the documents themselves instead."""

from __future__ import annotations

from streamer.cli.describe import (
    Buckets,
    FileGroups,
    QueryResult,
    ReportFiles,
    TableInfo,
    TableStats,
    TimelineEntry,
    TimelineSummary,
)

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int) -> str:
    exponent = 0
    while exponent < len(_UNITS) - 1 and n >= 1024 ** (exponent + 1):
        exponent += 1
    return f"{n} B" if exponent == 0 else f"{n / 1024**exponent:.1f} {_UNITS[exponent]}"


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
    lines = [
        "  ".join(c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(row, widths, headers)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def key_values(pairs: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in pairs)


def show_partition(partition: str) -> str:
    return partition or "(not partitioned)"


def render_info(info: TableInfo) -> str:
    facts = key_values(
        [
            ("name", info.name),
            ("type", info.type),
            ("version", info.version),
            ("database", info.database),
            ("record key", ", ".join(info.record_key_fields)),
            ("partition fields", ", ".join(info.partition_fields) or None),
            ("ordering field", info.ordering_field),
            ("key generator", info.key_generator),
            ("hive-style partitioning", info.hive_style_partitioning),
            ("url-encoded partitions", info.url_encode_partitioning),
            ("base file format", info.base_file_format),
        ]
    )
    columns = aligned(
        ["column", "type", "nullable"], [[c.name, c.type, "yes" if c.nullable else "no"] for c in info.columns]
    )
    return f"{facts}\n\nschema\n{columns}"


def render_timeline(summary: TimelineSummary) -> str:
    headers = [
        "",
        "instant",
        "time",
        "action",
        "state",
        "operation",
        "written",
        "updated",
        "deleted",
        "base+",
        "logs+",
        "plan groups",
    ]
    right = ("written", "updated", "deleted", "base+", "logs+", "plan groups")

    def row(e: TimelineEntry) -> list:
        marker = "PENDING" if e.pending_plan else "archived" if e.archived else ""
        return [
            marker,
            e.instant,
            e.time,
            e.action,
            e.state,
            e.operation,
            e.records_written,
            e.records_updated,
            e.records_deleted,
            e.base_files_added,
            e.log_files_added,
            e.plan_file_groups,
        ]

    plans = [e for e in summary.instants if e.pending_plan]
    pending = aligned(headers, [row(e) for e in plans], right) if plans else "none"
    return (
        f"pending plans\n{pending}\n\n"
        f"instants ({len(summary.instants)})\n{aligned(headers, [row(e) for e in summary.instants], right)}"
    )


def render_files(groups: FileGroups) -> str:
    headers = ["partition", "file id", "base instant", "base file", "log files", "log bytes", "total", "slices"]
    return aligned(
        headers,
        [
            [
                show_partition(g.partition),
                g.file_id,
                g.base_instant,
                human_bytes(g.base_file_bytes),
                g.log_files,
                human_bytes(g.log_bytes),
                human_bytes(g.total_bytes),
                g.slices,
            ]
            for g in groups.file_groups
        ],
        right=("base file", "log files", "log bytes", "total", "slices"),
    )


def render_buckets(result: Buckets) -> str:
    sections = []
    for p in result.partitions:
        rows = [
            [b.hash_start, b.hash_end, "wraps" if b.hash_start > b.hash_end else "", b.file_id, human_bytes(b.bytes)]
            for b in p.buckets
        ]
        table = aligned(["hash from", "hash to", "", "file id", "size"], rows, right=("hash from", "hash to", "size"))
        resizes = (
            "\n".join(
                f"  {r.kind} at {r.instant}: {', '.join(r.file_ids)} -> "
                + ", ".join(f"{c.tag} {c.value} {c.file_id or ''}".rstrip() for c in r.children)
                for r in p.pending_resizes
            )
            or "  none"
        )
        sections.append(
            f"partition {show_partition(p.partition)}: {len(p.buckets)} buckets "
            f"(hashing metadata {p.metadata_instant}, seqNo {p.seq_no})\n{table}\n"
            f"pending splits/merges\n{resizes}"
        )
    return "\n\n".join(sections) or "no partitions"


def render_stats(stats: TableStats) -> str:
    last = f"{stats.last_commit} ({stats.last_commit_time})" if stats.last_commit else "-"
    facts = key_values(
        [
            ("rows", stats.row_count),
            ("bytes", human_bytes(stats.total_bytes)),
            ("file groups", stats.file_groups),
            ("base files", stats.base_files),
            ("log files", stats.log_files),
            ("commits", stats.commits),
            ("last commit", last),
        ]
    )
    headers = ["partition", "rows", "bytes", "file groups", "base files", "log files"]
    partitions = aligned(
        headers,
        [
            [show_partition(p.partition), p.rows, human_bytes(p.bytes), p.file_groups, p.base_files, p.log_files]
            for p in stats.partitions
        ],
        right=tuple(headers[1:]),
    )
    return f"{facts}\n\n{partitions}"


def render_query(result: QueryResult) -> str:
    numeric = [
        c
        for i, c in enumerate(result.columns)
        if all(isinstance(r[i], int | float) or r[i] is None for r in result.rows)
    ]
    text = aligned(result.columns, result.rows, right=tuple(numeric))
    return text + ("\n(more rows; raise --limit)" if result.truncated else f"\n({len(result.rows)} rows)")


def render_report(report: ReportFiles) -> str:
    return "\n".join(report.files)
