"""`streamer verify CONFIG [--table T ...]`: each mirrored table against its source table.

Prints a verdict per table (`equal`, or the keys missing, extra and different with their
columns); exits 0 when every table is equal, 1 when one differs or could not be compared, 2
for a config that cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_verify_command(commands) -> None:
    verify = commands.add_parser(
        "verify",
        help="compare each mirrored table with its source table",
        description="Compare the tables of a mirror config with the source database's: row counts and "
        "checksums over primary-key ranges, bisected down to the rows that differ, re-checked once the "
        "tables have caught up. Exit status 1 when a table differs.",
    )
    verify.add_argument("config", metavar="CONFIG", help="a mirror config file, or a directory holding one")
    verify.add_argument(
        "--table", action="append", metavar="T", help="schema.table (or the lake table's name); repeatable"
    )
    verify.add_argument("--json", action="store_true", help="one JSON document")


def verify_command(args: argparse.Namespace) -> int:
    from streamer.config.loading import load_all
    from streamer.errors import ConfigError
    from streamer.verify import verify_mirror

    try:
        _, mirrors = load_all(args.config)
        if not mirrors:
            raise ValueError(f"{args.config}: no mirror config (a file with a 'mirror' section)")
        verdicts = [v for mirror in mirrors for v in verify_mirror(mirror, args.table)]
    except (ConfigError, ValueError) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([_document(v) for v in verdicts], indent=2))
    else:
        for verdict in verdicts:
            print("\n".join(verdict.lines()))
    return 0 if all(v.equal or v.skipped for v in verdicts) else 1


def _document(verdict) -> dict:
    return {
        "source": verdict.source,
        "lake": verdict.lake,
        "equal": verdict.equal,
        "rows": verdict.rows,
        "missing": [list(k) for k in verdict.missing],
        "extra": [list(k) for k in verdict.extra],
        "different": [{"key": list(k), "columns": c} for k, c in sorted(verdict.different.items())],
        "rechecked": verdict.rechecked,
        "note": verdict.note,
        "skipped": verdict.skipped,
        "seconds": round(verdict.seconds, 3),
    }
