"""Named points where a test can stop the process hard, to prove that recovery works.

Inert unless the environment variable `MOR_STREAMER_FAILPOINT` names a point, as `name` or
`name:N` (the N-th time the point is reached in this process, counting from 1). Reaching it
kills the process with SIGKILL: no `finally`, no cleanup, as a power cut or an OOM kill.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

ENV_VAR = "MOR_STREAMER_FAILPOINT"

_reached: Counter[str] = Counter()


def reach(name: str) -> None:
    """Mark that the process reached `name`; kill it if a test asked to crash here."""
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        print(f"failpoint {name}: killing process {os.getpid()}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
