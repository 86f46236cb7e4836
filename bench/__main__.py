"""`python -m bench [--quick] [--scenario NAME ...] [--rows N] [--batch-rows B] [--batches K] [--out DIR]
[--keep] [--skip PEER] [--partitions 8,400,2000] [--s3 ROWS,BATCH_ROWS,BATCHES] [--backlog 10M,30M]
[--mirror-tables N] [--reader-messages N] [--reader-value-bytes N]`:
every scenario, one run.

A scenario is one function `(W1, work directory, **options) -> report.Section`; adding one is
adding it to SCENARIOS. The size picks the W1 parameters (`--quick` for a smoke run of a few
minutes). `partitions`, `backlog`, `mirror` and `verify` run only when named: the first two together
take about an hour, `mirror` a quarter of one, `verify` (which installs PostgreSQL and data-diff
when missing) a few minutes. `reader` (the Kafka readers alone, on one core) takes a few minutes
and runs with every scenario.
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

from bench import (
    backlog,
    cdc,
    continuous,
    growth,
    ingest,
    machine,
    mirror,
    partitions,
    queries,
    reader,
    report,
    services,
    sync,
    writers,
)
from bench.verify import scenario as verify_scenario
from bench.workload import SIZES, W1

SCENARIOS = {
    "reader": reader.scenario,
    "ingest": ingest.scenario,
    "continuous": continuous.scenario,
    "growth": growth.scenario,
    "services": services.scenario,
    "queries": queries.scenario,
    "cdc": cdc.scenario,
    "sync": sync.scenario,
    "partitions": partitions.scenario,
    "backlog": backlog.scenario,
    "mirror": mirror.scenario,
    "verify": verify_scenario,
    "writers": writers.scenario,
}
#: Scenarios that `--scenario` names but a run of every scenario leaves out: they take from a quarter
#: of an hour to an hour.
ON_REQUEST = ("partitions", "backlog", "mirror", "verify", "writers")


def counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of counts: `8,400,2000` or `10M,30M`."""
    scale = {"k": 1_000, "m": 1_000_000}
    return tuple(
        int(float(part[:-1]) * scale[part[-1].lower()]) if part[-1].lower() in scale else int(part)
        for part in text.split(",")
    )


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
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=sorted(ingest.PEERS),
        help="a peer the ingest scenario leaves out (e.g. spark-cow at 10M rows)",
    )
    parser.add_argument(
        "--partitions",
        type=counts,
        default=partitions.PARTITIONS,
        help="partitions scenario: the partition counts (default 8,400,2000)",
    )
    parser.add_argument(
        "--s3",
        type=counts,
        metavar="ROWS,BATCH_ROWS,BATCHES",
        default=dataclasses.astuple(partitions.S3_SIZE)[:3],
        help="partitions scenario: W1's size on S3 (default 100000,20000,3; 0 leaves S3 out)",
    )
    parser.add_argument("--s3-partitions", type=counts, help="partitions scenario: counts on S3 (default --partitions)")
    parser.add_argument(
        "--backlog",
        type=counts,
        default=backlog.BACKLOGS,
        help="backlog scenario: backlog sizes in records (default 10M,30M)",
    )
    parser.add_argument(
        "--mirror-tables",
        type=int,
        help="mirror scenario: tables of its stretch run, 100 records each (default 1000; none with --quick; 0: none)",
    )
    parser.add_argument(
        "--kill-rounds",
        type=int,
        default=writers.KILL_ROUNDS,
        help=f"writers scenario: rounds of three writers killed at random (default {writers.KILL_ROUNDS}; 0: none)",
    )
    parser.add_argument(
        "--reader-messages",
        type=counts,
        help="reader scenario: messages per topic (default 5 per W1 initial row: 5M, 500k with --quick)",
    )
    parser.add_argument(
        "--reader-value-bytes",
        type=int,
        default=reader.VALUE_BYTES,
        help=f"reader scenario: bytes of each message's value (default {reader.VALUE_BYTES}, the target's size)",
    )
    args = parser.parse_args(argv)

    overrides = {"initial_rows": args.rows, "batch_rows": args.batch_rows, "batches": args.batches}
    w = dataclasses.replace(SIZES[args.size], **{k: v for k, v in overrides.items() if v is not None})
    facts = machine.facts()
    work = Path(tempfile.mkdtemp(prefix=f"bench-{args.size}-"))
    print(
        f"bench {args.size}: {w}, {facts['cores']} cores, {facts['ram_gb']} GB, load {facts['load_average']}, "
        f"work {work}",
        flush=True,
    )
    started = time.monotonic()
    sections = {}
    try:
        for name in args.scenario or [name for name in SCENARIOS if name not in ON_REQUEST]:
            print(f"scenario {name}", flush=True)
            scenario_started = time.monotonic()
            sections[name] = SCENARIOS[name](w, work / name, **_options(name, args))
            sections[name].details["scenario_seconds"] = time.monotonic() - scenario_started
            print(f"scenario {name}: {sections[name].details['scenario_seconds']:.0f}s", flush=True)
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


def _options(name: str, args: argparse.Namespace) -> dict:
    if name == "ingest":
        return {"skip": set(args.skip)}
    if name == "partitions":
        s3 = W1(*args.s3) if args.s3[0] else None
        return {"partitions": args.partitions, "s3": s3, "s3_partitions": args.s3_partitions}
    if name == "backlog":
        return {"backlogs": args.backlog}
    if name == "reader":
        return {
            "messages": args.reader_messages[0] if args.reader_messages else None,
            "value_bytes": args.reader_value_bytes,
        }
    if name == "mirror":
        return {"stretch_tables": args.mirror_tables}
    if name == "writers":
        return {"kill_rounds": args.kill_rounds}
    return {}


if __name__ == "__main__":
    sys.exit(main())
