"""The offline service commands: `streamer compact|cluster|clean|archive TABLE_PATH`, as separate jobs.

Executing a pending compaction or clustering plan needs no lease (the plan fixes what it reads
and writes). Scheduling, rolling a clustering back, cleaning and archiving do: they decide from
the timeline, which only the writer may change, so they refuse to run while a streaming job
holds the table and say so. With `--concurrency optimistic_concurrency_control` they run beside
writers of that mode instead (no lease), planning at a moment when none of their writes is pending.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from streamer.checkpoint import CHECKPOINT_KEY
from streamer.config.loading import load_config
from streamer.config.model import ClusteringSettings, IndexSettings
from streamer.errors import ConfigError, InvalidArgumentError
from streamer.scheduler import clustering_policy
from table import (
    MIB,
    ArchivePolicy,
    CleanPolicy,
    ClusteringConflictError,
    ClusteringPolicy,
    CompactionConflictError,
    CompactionStrategy,
    Concurrency,
    MorTable,
    TableNotFoundError,
    WriteInProgressError,
    WriteOptions,
    WriterConflictError,
    archive,
    clean,
    execute_clustering,
    execute_compaction,
    pending_clusterings,
    pending_compactions,
    rollback_clustering,
    schedule_clustering,
    schedule_compaction,
)

#: How long planning beside other writers waits for a moment when none of their writes is pending.
PLAN_WAIT_SECONDS = 120.0


def run_offline(args: argparse.Namespace) -> int:
    try:
        table = MorTable.load(args.table_path)
        options = options_of(args)
        if args.command == "compact":
            compact(table, args)
        elif args.command == "cluster":
            cluster(table, args)
        elif args.command == "clean":
            with table.writer(options, description="streamer clean") as writer:
                policy = CleanPolicy(**given(kind=args.policy, retained=args.retained))
                print(f"clean: {clean(writer, policy) or 'nothing to clean'}")
        else:
            with table.writer(options, description="streamer archive"):
                retention = ArchivePolicy(**given(min_instants=args.min_instants, max_instants=args.max_instants))
                result = archive(table, retention, keep_latest_with_metadata_prefix=CHECKPOINT_KEY)
                print(f"archive: {result}")
    except (
        TableNotFoundError,
        WriterConflictError,
        CompactionConflictError,
        ClusteringConflictError,
        ConfigError,
        ValueError,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def options_of(args: argparse.Namespace) -> WriteOptions:
    return WriteOptions(concurrency=Concurrency(args.concurrency))


def when_no_write_pending(plan: Callable[[], str | None]) -> str | None:
    """`plan()`, once no other writer's deltacommit is pending (it refuses while one is), for up
    to `PLAN_WAIT_SECONDS`. A write that begins after it planned is refused at its commit for
    the planned file groups and written again (`table.write.conflicts`)."""
    deadline = time.monotonic() + PLAN_WAIT_SECONDS
    while True:
        try:
            return plan()
        except WriteInProgressError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def given(**settings) -> dict:
    """The settings a flag gave; the others keep the engine's defaults."""
    return {name: value for name, value in settings.items() if value is not None}


def compact(table: MorTable, args: argparse.Namespace) -> None:
    if args.schedule:
        max_io_bytes = args.max_io_mb * MIB if args.max_io_mb is not None else None
        strategy = CompactionStrategy(
            **given(kind=args.strategy, min_log_files=args.min_log_files, max_io_bytes=max_io_bytes)
        )
        with table.writer(options_of(args), description="streamer compact --schedule") as writer:
            instant = when_no_write_pending(lambda: schedule_compaction(writer, strategy))
        print(f"compaction: {'scheduled ' + instant if instant else 'nothing to compact'}")
    pending = pending_compactions(table)
    if not pending:
        print("compaction: no pending plan")
    for instant in pending:
        print(f"compaction {instant}: {execute_compaction(table, instant)}")


def cluster(table: MorTable, args: argparse.Namespace) -> None:
    """Roll back the pending plan at --rollback; else execute the pending plans, or plan one with
    the policy (the config's, flags overriding) and execute it."""
    if args.rollback:
        with table.writer(options_of(args), description="streamer cluster --rollback") as writer:
            rolled_back_by = rollback_clustering(writer, args.rollback)
        print(f"clustering {args.rollback}: rolled back by {rolled_back_by}")
        return
    pending = pending_clusterings(table)
    if not pending:
        policy = cluster_policy(table, args)
        with table.writer(options_of(args), description="streamer cluster") as writer:
            instant = when_no_write_pending(lambda: schedule_clustering(writer, policy))
        if instant is None:
            print("clustering: nothing to cluster")
            return
        print(f"clustering: scheduled {instant}")
        pending = [instant]
    for instant in pending:
        print(f"clustering {instant}: {execute_clustering(table, instant)}")


_INDEX_FLAGS = ("split_threshold_mb", "merge_threshold_mb", "min_buckets", "max_buckets", "split_point")
_CLUSTERING_FLAGS = ("max_partitions", "max_plan_mb")


def cluster_policy(table: MorTable, args: argparse.Namespace) -> ClusteringPolicy:
    """The policy of `--config` (the job's `index` and `services.clustering`), else the defaults,
    with the flags given on top."""
    index, clustering, sort_key = IndexSettings(), ClusteringSettings(), "--sort-columns"
    if args.config:
        config = load_config(args.config)
        if _same_path(config.table.path) != _same_path(table.base_uri):
            raise InvalidArgumentError(
                f"--config {args.config} is the config of the table at {config.table.path}, not of {args.table_path}"
            )
        index, clustering = config.index, config.services.clustering
        sort_key = f"{args.config}: services.clustering.sort_columns"
    index = index.model_copy(update={k: getattr(args, k) for k in _INDEX_FLAGS if getattr(args, k) is not None})
    updates = {k: getattr(args, k) for k in _CLUSTERING_FLAGS if getattr(args, k) is not None}
    if args.sort_columns is not None:
        updates["sort_columns"] = [c.strip() for c in args.sort_columns.split(",") if c.strip()]
        sort_key = "--sort-columns"
    clustering = clustering.model_copy(update=updates)
    columns = table.schema().names
    unknown = [c for c in clustering.sort_columns if c not in columns]
    if unknown:
        raise InvalidArgumentError(f"{sort_key}: no column(s) {unknown} in the table's columns {columns}")
    return clustering_policy(index, clustering)


def _same_path(path: str) -> str:
    path = path.rstrip("/")
    return path if "://" in path else os.path.abspath(path)
