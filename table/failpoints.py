"""Named points where a test can stop or hold up the process, to prove recovery and overlap.

Inert unless an environment variable names a point:

- `MOR_STREAMER_FAILPOINT=name` or `name:N` kills the process with SIGKILL the N-th time (from 1)
  it reaches the point: no `finally`, no cleanup, as a power cut or an OOM kill.
- `MOR_STREAMER_PAUSE=name=SECONDS` sleeps there each time, e.g. to keep a compaction pending
  while micro-batches go on.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter

FAIL_ENV_VAR = "MOR_STREAMER_FAILPOINT"
PAUSE_ENV_VAR = "MOR_STREAMER_PAUSE"

_reached: Counter[str] = Counter()


def reach(name: str) -> None:
    """Mark that the process reached `name`; act if a test asked for it."""
    pause = os.environ.get(PAUSE_ENV_VAR)
    if pause:
        target, _, seconds = pause.partition("=")
        if target == name:
            time.sleep(float(seconds))
    spec = os.environ.get(FAIL_ENV_VAR)
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        print(f"failpoint {name}: killing process {os.getpid()}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
