"""Writers of one table in processes of their own, as several writers are: each opens a
`TableWriter` with the options given and upserts its batches, printing what it committed."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from table import Concurrency
from tests.support.ingestion import REPO
from tests.support.orders import row


def optimistic(**overrides) -> dict:
    return {"concurrency": Concurrency.OPTIMISTIC, **overrides}


def rows_in(regions: list[str], count: int, clock: int, seed: int, prefix: str) -> list[dict]:
    """`count` new keys whose partition (region, from the key) is one of `regions`."""
    rng = random.Random(seed)
    out, i = [], 0
    while len(out) < count:
        candidate = row(f"{prefix}-{i:06d}", clock + len(out), deleted=False, rng=rng)
        if candidate["region"] in regions:
            out.append(candidate)
        i += 1
    return out


def writer_process(
    path: Path | str, batches: list[list[dict]], options: dict, before_complete: str = "", env: dict | None = None
) -> subprocess.Popen:
    """A process that opens a writer with `options` and upserts `batches`, one commit each, and
    prints what it committed (or the error) as JSON. `before_complete`: Python run inside the
    commit lock, just before the instant completes (on a local disk or an object store). `env`:
    more of its environment (an object store's credentials)."""
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from pathlib import Path
        import pyarrow as pa
        from table import MorTable, TableError
        from table.storage import commit_lock, object_store_lock
        from tests.support.orders import SCHEMA, write_options

        def before_complete():
            {before_complete or "pass"}

        def held_up(created):
            return lambda self, rel, data: (before_complete(), created(self, rel, data))[1]

        commit_lock.Fence.create = held_up(commit_lock.Fence.create)
        object_store_lock.ObjectStoreFence.create = held_up(object_store_lock.ObjectStoreFence.create)

        batches = json.loads(sys.stdin.read())
        options = json.loads({json.dumps(json.dumps(options))})
        try:
            with MorTable.load({str(path)!r}).writer(write_options(**options), description="writer " + {str(os.getpid())!r}) as w:
                done = [w.upsert(pa.Table.from_pylist(b, schema=SCHEMA)) for b in batches]
        except TableError as e:
            print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
            sys.exit(3)
        print(json.dumps({{"committed": done}}))
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(batches))
    process.stdin.close()
    return process


def wait_until_holding(process: subprocess.Popen, marker: Path, timeout: float = 60) -> None:
    """Return once the writer made `marker` inside the commit lock (its `before_complete`)."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the writer never took the commit lock"
        time.sleep(0.01)


def finished(process: subprocess.Popen, timeout: float = 120) -> tuple[int, dict]:
    assert process.stdout is not None and process.stderr is not None
    code = process.wait(timeout)
    out, err = process.stdout.read(), process.stderr.read()
    lines = out.strip().splitlines()
    assert lines, f"exit {code}, no output; stderr:\n{err[-3000:]}"
    return code, json.loads(lines[-1])
