"""A table's last verdict, kept with it in `.hoodie/.aux/streamer-verify.json`: `streamer verify`
writes it, `streamer status` shows it and the job's metrics expose it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from streamer.verify.compare import TableVerdict
from table import AUX_DIR, MorTable, Storage

log = logging.getLogger(__name__)

VERIFY_PATH = f"{AUX_DIR}/streamer-verify.json"


def keep_verdict(path: str, storage_options: Mapping[str, str] | None, verdict: TableVerdict) -> None:
    """Keep the verdict with the lake table, when there is one."""
    if not MorTable.exists(path, storage_options):
        return
    kept = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "equal": verdict.equal,
        "rows": verdict.rows,
        "missing": len(verdict.missing),
        "extra": len(verdict.extra),
        "different": len(verdict.different),
        "note": verdict.note,
    }
    try:
        Storage(path, storage_options).write_bytes(VERIFY_PATH, json.dumps(kept).encode())
    except OSError as e:
        log.warning("%s: could not keep the verdict with the table: %s", path, e)


def read_verdict(storage: Storage) -> dict | None:
    """The last verdict kept with a table; None when it has none."""
    if not storage.exists(VERIFY_PATH):
        return None
    return json.loads(storage.read_bytes(VERIFY_PATH))


def differing_rows(verdict: Mapping) -> int:
    """The rows a kept verdict found missing, extra or different."""
    return sum(int(verdict.get(kind, 0)) for kind in ("missing", "extra", "different"))
