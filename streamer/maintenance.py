"""The offline service commands: `streamer compact|clean|archive TABLE_PATH`, as separate jobs.

Executing a pending compaction plan needs no lease (the plan fixes what it reads and writes).
Scheduling, cleaning and archiving do: they decide from the timeline, which only the writer may
change, so they refuse to run while a streaming job holds the table and say so.
"""

from __future__ import annotations

import argparse
import sys

from table.errors import TableNotFoundError
from table.lease import WriterConflictError
from table.mor_table import CHECKPOINT_KEY, MorTable, WriteOptions
from table.services.archive import ArchivePolicy, archive
from table.services.clean import CleanPolicy, clean, finish_pending_cleans
from table.services.compaction import CompactionConflictError, CompactionStrategy, execute_compaction, pending_compactions, schedule_compaction

MIB = 1024 * 1024


def run_offline(args: argparse.Namespace) -> int:
    try:
        table = MorTable.load(args.table_path)
        if args.command == "compact":
            compact(table, args)
        elif args.command == "clean":
            with table.writer(WriteOptions(), description="streamer clean"):
                finish_pending_cleans(table)
                print(f"clean: {clean(table, CleanPolicy(kind=args.policy, retained=args.retained)) or 'nothing to clean'}")
        else:
            with table.writer(WriteOptions(), description="streamer archive"):
                result = archive(table, ArchivePolicy(min_instants=args.min_instants, max_instants=args.max_instants),
                                 keep_latest_with_metadata_key=CHECKPOINT_KEY)
                print(f"archive: {result}")
    except (TableNotFoundError, WriterConflictError, CompactionConflictError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def compact(table: MorTable, args: argparse.Namespace) -> None:
    if args.schedule:
        strategy = CompactionStrategy(kind=args.strategy, min_log_files=args.min_log_files,
                                      max_io_bytes=args.max_io_mb * MIB)
        with table.writer(WriteOptions(), description="streamer compact --schedule") as writer:
            instant = schedule_compaction(writer, strategy)
        print(f"compaction: {'scheduled ' + instant if instant else 'nothing to compact'}")
    pending = pending_compactions(table)
    if not pending:
        print("compaction: no pending plan")
    for instant in pending:
        print(f"compaction {instant}: {execute_compaction(table, instant)}")
