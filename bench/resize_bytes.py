"""Bench: a bucket resize rewrites only the buckets in its plan.

    python -m bench.resize_bytes [--rows 400000] [--partitions 4] [--initial-buckets 8]
                                 [--seed 7] [--out bench/results/resize_bytes.json] [--quick]

Measures, for a split (middle and distribution split points), a merge and a sort of
consistent-hashing buckets, each on a fresh copy of one skewed table (70% of the keys hash into
two narrow ranges): bytes written against the exact bytes of the planned slices' files (within
1.1x is the claim), that no file of any other file group is created or deleted, and the size
balance of split children. The table is compacted first, so a resize reads and writes the same
records; a last scenario splits the copy taken before compaction, logs included. Peer in the
same run: a full-table rewrite, which writes about the whole table. Nothing is asserted: it
prints a table and a verdict per scenario and writes the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from table import (
    HASH_VALUE_MASK,
    BaseFileName,
    ClusteringGroup,
    ClusteringPolicy,
    CompactionStrategy,
    LogFileName,
    MorTable,
    PlannedSlice,
    Storage,
    TableSpec,
    WriteOptions,
    WriteStat,
    execute_clustering,
    execute_compaction,
    hash_values,
    partition_file_path,
    read_clustering_plan,
    schedule_clustering,
    schedule_compaction,
)

BOUND = 1.1
HASH_SPACE = HASH_VALUE_MASK + 1
#: (start, end, share of all keys) as fractions of the hash space: with 8 initial buckets each
#: range is in the lower half of a bucket, so a split at the middle leaves one child the hot keys.
HOT_RANGES = ((0.26, 0.28, 0.45), (0.64, 0.66, 0.25))
REGIONS = ("emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia")
INSERT_BATCHES = 4
UPDATED_SHARE = 0.25
DELETED_SHARE = 0.9  # of one partition's keys, before the merge scenario
SPLIT_FACTOR = 4  # a bucket splits above this many times the median bucket size
SORT_COLUMNS = ("customer",)
KEY_CHUNK = 200_000
QUICK_ROWS = 100_000
SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("customer", pa.string()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("status", pa.string()),
        ("note", pa.string()),
        ("updated_at", pa.int64()),
    ]
)
DELETE_FIELD = "is_deleted"  # in the change rows, not a table column: the writer drops it
SPEC = TableSpec("orders", SCHEMA, ("order_id",), "updated_at", ("region",))
WORDS = (
    "parcel",
    "courier",
    "delayed",
    "address",
    "updated",
    "refund",
    "partial",
    "express",
    "gift",
    "wrap",
    "customer",
    "called",
    "warehouse",
    "backorder",
    "priority",
    "invoice",
    "sent",
    "again",
)


# -- data ----------------------------------------------------------------------------------------


class Orders:
    """The keys and the per-key attributes of the generated orders, all derived from the seed."""

    def __init__(self, rows: int, partitions: int, seed: int):
        self.rng = np.random.default_rng(seed)
        self.keys = np.array(skewed_keys(rows, seed), dtype=object)
        self.rng.shuffle(self.keys)
        self.regions = np.array(REGIONS[:partitions], dtype=object)[self.rng.integers(0, partitions, rows)]
        self.customers = np.char.mod("cust-%05d", self.rng.integers(0, 20_000, rows)).astype(object)
        notes = [" ".join(self.rng.choice(WORDS, 12)).ljust(60)[:60] for _ in range(500)]
        self.notes = np.array(notes, dtype=object)
        self.clock = 1_700_000_000_000

    def changes(self, index: np.ndarray, status: str, deleted: bool = False) -> pa.Table:
        """Change rows of the orders at `index`, each newer than every earlier change."""
        n = len(index)
        updated_at = self.clock + np.arange(n, dtype=np.int64)
        self.clock += n
        return pa.table(
            {
                "order_id": pa.array(self.keys[index], pa.string()),
                "customer": pa.array(self.customers[index], pa.string()),
                "region": pa.array(self.regions[index], pa.string()),
                "amount": pa.array(np.round(self.rng.uniform(5, 2_000, n), 2)),
                "status": pa.array([status] * n, pa.string()),
                "note": pa.array(self.notes[self.rng.integers(0, len(self.notes), n)], pa.string()),
                "updated_at": pa.array(updated_at),
                DELETE_FIELD: pa.array(np.full(n, deleted)),
            }
        )


def skewed_keys(rows: int, seed: int) -> list[str]:
    """`rows` distinct order ids: each HOT_RANGES share hashing into its range, the rest outside
    them all (rejection sampling of sequential candidates by the index's own hash)."""
    bounds = [(int(lo * HASH_SPACE), int(hi * HASH_SPACE)) for lo, hi, _ in HOT_RANGES]
    quotas = [round(rows * share) for *_, share in HOT_RANGES]
    quotas.append(rows - sum(quotas))
    picked: list[list[str]] = [[] for _ in quotas]
    start = 0
    while any(len(p) < q for p, q in zip(picked, quotas)):
        candidates = [f"ord-{seed}-{i:010d}" for i in range(start, start + KEY_CHUNK)]
        hashes = hash_values(candidates)
        kind = np.full(len(candidates), len(bounds))
        for k, (lo, hi) in enumerate(bounds):
            kind[(hashes >= lo) & (hashes < hi)] = k
        for k, quota in enumerate(quotas):
            need = quota - len(picked[k])
            picked[k].extend(candidates[i] for i in np.flatnonzero(kind == k)[: max(need, 0)])
        start += KEY_CHUNK
    return [key for p in picked for key in p]


def build_table(path: Path, orders: Orders, initial_buckets: int) -> None:
    table = MorTable.create(str(path), SPEC)
    rows = len(orders.keys)
    with table.writer(WriteOptions(initial_buckets=initial_buckets, delete_field=DELETE_FIELD)) as writer:
        for batch in np.array_split(np.arange(rows), INSERT_BATCHES):
            writer.upsert(orders.changes(batch, "created"))
        updated = orders.rng.choice(rows, int(rows * UPDATED_SHARE), replace=False)
        writer.upsert(orders.changes(np.sort(updated), "paid"))


def delete_most_of(path: Path, orders: Orders, region: str) -> None:
    """Delete DELETED_SHARE of the orders of one region, then compact."""
    table = MorTable.load(str(path))
    in_region = np.flatnonzero(orders.regions == region)
    deleted = orders.rng.choice(in_region, int(len(in_region) * DELETED_SHARE), replace=False)
    with table.writer(WriteOptions(delete_field=DELETE_FIELD)) as writer:
        writer.upsert(orders.changes(np.sort(deleted), "cancelled", deleted=True))
    compact(table)


def compact(table: MorTable) -> None:
    """Compact until no slice has a log file left (a plan is bounded by the strategy's max IO)."""
    with table.writer() as writer:
        while (instant := schedule_compaction(writer, CompactionStrategy())) is not None:
            execute_compaction(table, instant)


# -- measuring -----------------------------------------------------------------------------------


def data_files(table: MorTable) -> dict[tuple[str, str], dict[str, int]]:
    """(partition, file id) -> {file name: size} of every base and log file on storage."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for partition in table.file_system_view().partition_paths():
        for entry in table.storage.list_dir(partition):
            parsed = BaseFileName.parse(entry.name) or LogFileName.parse(entry.name)
            if parsed is not None:
                out.setdefault((partition, parsed.file_id), {})[entry.name] = entry.size
    return out


def slice_bytes(storage: Storage, planned: PlannedSlice) -> int:
    names = ([planned.base_file] if planned.base_file else []) + list(planned.log_files)
    return sum(storage.size(partition_file_path(planned.partition_path, n)) for n in names)


def latest_sizes(table: MorTable) -> dict[tuple[str, str], int]:
    return {(s.partition_path, s.file_id): s.total_size for s in table.file_system_view().latest_slices()}


def split_policy(table: MorTable, split_point: str) -> ClusteringPolicy:
    sizes = latest_sizes(table).values()
    return ClusteringPolicy(
        split_threshold_bytes=SPLIT_FACTOR * int(statistics.median(sizes)),
        merge_threshold_bytes=0,
        split_point=split_point,
    )


def merge_policy(bucket_bytes: int) -> Callable[[MorTable], ClusteringPolicy]:
    """Merge runs of buckets up to half of `bucket_bytes` (the median bucket before the deletes);
    nothing splits."""

    def policy(table: MorTable) -> ClusteringPolicy:
        return ClusteringPolicy(
            split_threshold_bytes=max(latest_sizes(table).values()), merge_threshold_bytes=bucket_bytes // 2
        )

    return policy


def sort_policy(table: MorTable) -> ClusteringPolicy:
    """Sort the buckets of one partition (the others stay as they are); nothing splits or merges."""
    return ClusteringPolicy(
        split_threshold_bytes=max(latest_sizes(table).values()),
        merge_threshold_bytes=0,
        sort_columns=SORT_COLUMNS,
        max_partitions=1,
    )


@dataclass
class GroupResult:
    kind: str
    partition: str
    inputs: list[str]
    input_bytes: int
    children: dict[str, dict[str, int]]  # child file id -> {"bytes", "rows"}

    @property
    def balance(self) -> float:
        """Larger child over smaller child, by bytes."""
        sizes = sorted(c["bytes"] for c in self.children.values())
        return sizes[-1] / sizes[0] if sizes[0] else float("inf")


@dataclass
class ScenarioResult:
    name: str
    groups: dict[str, int]
    buckets_touched: int
    buckets_total: int
    touched_bytes: int
    written_bytes: int
    untouched_bytes: int
    untouched_unchanged: bool
    changed_outside_plan: list[str]
    table_bytes: int
    rows_rewritten: int
    plan_seconds: float
    execute_seconds: float
    group_results: list[GroupResult] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.written_bytes / self.touched_bytes

    @property
    def within_bound(self) -> bool:
        return self.ratio <= BOUND and self.untouched_unchanged

    @property
    def rows_per_second(self) -> float:
        return self.rows_rewritten / (self.plan_seconds + self.execute_seconds)

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "ratio_written_to_touched": self.ratio,
            "ratio_written_to_table": self.written_bytes / self.table_bytes,
            "rows_per_second": self.rows_per_second,
            "within_bound": self.within_bound,
            "split_balance": {
                f"{g.partition}/{g.inputs[0]}": g.balance for g in self.group_results if g.kind == "split"
            },
        }


def run_clustering(name: str, path: Path, policy_of: Callable[[MorTable], ClusteringPolicy]) -> ScenarioResult:
    """Schedule and execute one clustering of the table at `path` with `policy_of(table)`."""
    table = MorTable.load(str(path))
    files_before = data_files(table)
    sizes = latest_sizes(table)
    policy = policy_of(table)
    with table.writer() as writer:
        started = time.monotonic()
        instant = schedule_clustering(writer, policy)
        plan_seconds = time.monotonic() - started
    if instant is None:
        raise RuntimeError(f"{name}: {policy} planned nothing")
    plan = read_clustering_plan(table.timeline(), instant)
    touched = sum(slice_bytes(table.storage, s) for g in plan.groups for s in g.slices)
    started = time.monotonic()
    result = execute_clustering(table, instant)
    execute_seconds = time.monotonic() - started
    files_after = data_files(table)
    in_plan = plan.file_groups() | plan.child_file_groups()
    changed = sorted(
        f"{p}/{f}"
        for p, f in files_before.keys() | files_after.keys()
        if (p, f) not in in_plan and files_before.get((p, f)) != files_after.get((p, f))
    )
    return ScenarioResult(
        name=name,
        groups=dict(Counter(g.kind for g in plan.groups)),
        buckets_touched=len(plan.file_groups()),
        buckets_total=len(sizes),
        touched_bytes=touched,
        written_bytes=result.bytes_written,
        untouched_bytes=sum(size for key, size in sizes.items() if key not in plan.file_groups()),
        untouched_unchanged=not changed,
        changed_outside_plan=changed,
        table_bytes=sum(sizes.values()),
        rows_rewritten=sum(s.num_writes for s in result.write_stats),
        plan_seconds=plan_seconds,
        execute_seconds=execute_seconds,
        group_results=[group_result(table.storage, g, result.write_stats) for g in plan.groups],
    )


def group_result(storage: Storage, group: ClusteringGroup, stats: list[WriteStat]) -> GroupResult:
    by_file_id = {s.file_id: s for s in stats if s.partition_path == group.partition_path}
    return GroupResult(
        group.kind,
        group.partition_path,
        group.file_ids,
        sum(slice_bytes(storage, s) for s in group.slices),
        {
            f: {"bytes": by_file_id[f].file_size_in_bytes, "rows": by_file_id[f].num_writes}
            for f in group.child_file_ids
        },
    )


# -- report --------------------------------------------------------------------------------------


def kib(n: int) -> str:
    return f"{n / 1024:,.0f}"


def print_scenarios(results: list[ScenarioResult]) -> None:
    header = (
        f"{'scenario':<30} {'groups':<18} {'buckets':>8} {'touched KiB':>12} {'written KiB':>12} "
        f"{'w/touched':>9} {'untouched KiB':>13} {'same':>4} {'table KiB':>10} {'w/table':>7} "
        f"{'plan s':>6} {'exec s':>6} {'rows':>9} {'rows/s':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        groups = ", ".join(f"{n} {kind}" for kind, n in r.groups.items())
        print(
            f"{r.name:<30} {groups:<18} {f'{r.buckets_touched}/{r.buckets_total}':>8} {kib(r.touched_bytes):>12} "
            f"{kib(r.written_bytes):>12} {r.ratio:>9.3f} {kib(r.untouched_bytes):>13} "
            f"{'yes' if r.untouched_unchanged else 'NO':>4} {kib(r.table_bytes):>10} "
            f"{r.written_bytes / r.table_bytes:>7.3f} {r.plan_seconds:>6.2f} {r.execute_seconds:>6.2f} "
            f"{r.rows_rewritten:>9,} {r.rows_per_second:>9,.0f}"
        )
    print()
    for r in results:
        extra = "" if r.untouched_unchanged else f" (files changed outside the plan: {r.changed_outside_plan})"
        print(
            f"{r.name}: written/touched {r.ratio:.3f}, untouched groups unchanged: "
            f"{'yes' if r.untouched_unchanged else 'no'}{extra} -> within {BOUND}x: "
            f"{'yes' if r.within_bound else 'no'}"
        )
    if any("sort" in r.groups for r in results):
        print(
            "note: a sort is not a resize; rows ordered by the sort columns compress differently "
            "(keys compress worse out of key order), which is what moves its ratio, not extra buckets"
        )


def print_split_balance(middle: ScenarioResult, distribution: ScenarioResult) -> None:
    """Children of each split bucket, larger/smaller by bytes, for both split points."""

    def splits(r: ScenarioResult) -> dict[tuple[str, str], GroupResult]:
        return {(g.partition, g.inputs[0]): g for g in r.group_results if g.kind == "split"}

    def children(g: GroupResult | None) -> str:
        return " / ".join(kib(c["bytes"]) for c in g.children.values()) if g else "-"

    def balance(g: GroupResult | None) -> str:
        return f"{g.balance:.2f}" if g else "-"

    by_middle, by_distribution = splits(middle), splits(distribution)
    print("\nsplit children, KiB (larger/smaller by bytes):")
    header = (
        f"{'partition':<16} {'bucket':<38} {'parent KiB':>10} {'middle children':>18} {'balance':>8} "
        f"{'distribution children':>22} {'balance':>8}"
    )
    print(header)
    print("-" * len(header))
    for key in sorted(by_middle.keys() | by_distribution.keys()):
        m, d = by_middle.get(key), by_distribution.get(key)
        parent = (m or d).input_bytes
        print(
            f"{key[0]:<16} {key[1]:<38} {kib(parent):>10} {children(m):>18} {balance(m):>8} "
            f"{children(d):>22} {balance(d):>8}"
        )


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4, choices=range(1, len(REGIONS) + 1))
    parser.add_argument("--initial-buckets", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "resize_bytes.json")
    parser.add_argument("--quick", action="store_true", help=f"smoke size: {QUICK_ROWS:,} rows")
    args = parser.parse_args()
    rows = QUICK_ROWS if args.quick else args.rows

    work = Path(tempfile.mkdtemp(prefix="bench-resize-"))
    try:
        started = time.monotonic()
        orders = Orders(rows, args.partitions, args.seed)
        base, with_logs = work / "base", work / "with-logs"
        build_table(base, orders, args.initial_buckets)
        shutil.copytree(base, with_logs)
        compact(MorTable.load(str(base)))
        build_seconds = time.monotonic() - started

        def fresh(name: str) -> Path:
            copy = work / name
            shutil.copytree(base, copy)
            return copy

        median_bucket = int(statistics.median(latest_sizes(MorTable.load(str(base))).values()))
        shrunk = REGIONS[0]
        merge_copy = fresh("merge")
        delete_most_of(merge_copy, orders, shrunk)
        results = [
            run_clustering("(a) split, middle", fresh("middle"), lambda t: split_policy(t, "middle")),
            run_clustering("(b) split, distribution", fresh("distribution"), lambda t: split_policy(t, "distribution")),
            run_clustering(f"(c) merge, {DELETED_SHARE:.0%} of {shrunk} gone", merge_copy, merge_policy(median_bucket)),
            run_clustering(f"(d) sort by {','.join(SORT_COLUMNS)}, 1 part.", fresh("sort"), sort_policy),
            run_clustering("(e) split, distrib., with logs", with_logs, lambda t: split_policy(t, "distribution")),
        ]
    finally:
        shutil.rmtree(work)

    hot = sum(share for *_, share in HOT_RANGES)
    print(
        f"\n{rows:,} rows in {args.partitions} partition(s) of {args.initial_buckets} buckets, seed {args.seed}, "
        f"{hot:.0%} of the keys in narrow hash ranges; built and compacted in {build_seconds:.1f} s"
    )
    print(
        "touched: the planned slices' files; untouched: every other latest slice ('same': none of their "
        "files created or deleted);\npeer: a full-table rewrite writes about 'table KiB' (all latest slices), "
        "'w/table' is the share of it this resize wrote\n"
    )
    print_scenarios(results)
    print_split_balance(results[0], results[1])

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "rows": rows,
                "partitions": args.partitions,
                "initial_buckets": args.initial_buckets,
                "seed": args.seed,
                "bound": BOUND,
                "hot_ranges": HOT_RANGES,
                "build_seconds": build_seconds,
                "cpus": os.cpu_count(),
                "scenarios": [r.to_json() for r in results],
            },
            indent=2,
        )
    )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
