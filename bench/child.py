"""Entry point of a peer's own process: `python -m bench.child NAME INPUT.json RESULT.json`.

The parent (`bench.ingest`) starts it through `bench.measure.run_measured`, which samples its
memory from outside; the peer's result comes back as JSON.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from bench.peers import PEERS, PeerInput


def main(name: str, input_path: str, result_path: str) -> None:
    module, function = PEERS[name]
    peer = PeerInput(
        **{k: Path(v) if k in ("workload", "table") else v for k, v in json.loads(Path(input_path).read_text()).items()}
    )
    result = getattr(importlib.import_module(f"bench.peers.{module}"), function)(peer)
    Path(result_path).write_text(json.dumps(result.to_json()))


if __name__ == "__main__":
    main(*sys.argv[1:])
