"""`python -m bench [--quick] [--scenario NAME ...] [--rows N] [--batch-rows B] [--batches K] [--out DIR]
[--keep] [--skip PEER]`: every scenario, one run.

A scenario is one function `(W1, work directory) -> report.Section`; adding one is adding it to
SCENARIOS. The size picks the W1 parameters (`--quick` for a smoke run of a few minutes).
Prints a table per scenario and writes `<out>/<size>.json` and PNG plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import continuous, growth, ingest, machine, queries, report, services, sync
from bench.workload import SIZES

SCENARIOS = {
    "ingest": ingest.scenario,
    "continuous": continuous.scenario,
    "growth": growth.scenario,
    "services": services.scenario,
    "queries": queries.scenario,
    "sync": sync.scenario,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Every scenario side by side in one run.")
    parser.add_argument("--size", choices=sorted(SIZES), default="full", help="W1's size (default: full)")
    parser.add_argument("--quick", dest="size", action="store_const", const="quick", help="same as --size quick")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="default: all")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (tables, logs)")
    parser.add_argument("--rows", type=int, help="W1's initial rows, instead of the size's")
    parser.add_argument("--batch-rows", type=int, help="records per upsert batch, instead of the size's")
    parser.add_argument("--batches", type=int, help="upsert batches, instead of the size's")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(ingest.PEERS),
                        help="a peer the ingest scenario leaves out (e.g. spark-cow at 10M rows)")
    args = parser.parse_args(argv)

    overrides = {"initial_rows": args.rows, "batch_rows": args.batch_rows, "batches": args.batches}
    w = dataclasses.replace(SIZES[args.size], **{k: v for k, v in overrides.items() if v is not None})
    facts = machine.facts()
    work = Path(tempfile.mkdtemp(prefix=f"bench-{args.size}-"))
    print(f"bench {args.size}: {w}, {facts['cores']} cores, {facts['ram_gb']} GB, load {facts['load_average']}, "
          f"work {work}", flush=True)
    started = time.monotonic()
    sections = {}
    try:
        for name in args.scenario or SCENARIOS:
            print(f"scenario {name}", flush=True)
            options = {"skip": set(args.skip)} if name == "ingest" else {}
            sections[name] = SCENARIOS[name](w, work / name, **options)
    except BaseException:
        print(f"work directory kept for its logs: {work}", file=sys.stderr)
        raise
    failed = any("error" in r.details for s in sections.values() for r in s.results)
    if args.keep or failed:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work)
    seconds = time.monotonic() - started
    for section in sections.values():
        print()
        print(report.table(section))
    written = report.write(args.out, args.size, w, facts, seconds, sections)
    print(f"\n{seconds:.0f}s; wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
