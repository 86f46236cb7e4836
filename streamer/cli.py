"""The `streamer` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamer", description="Stream Kafka topics into Hudi merge-on-read tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="embedded broker, sample order changes, a streaming upsert and a report")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from streamer.demo import main as demo

        return demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
