"""A job's last failure, kept with its table in `.hoodie/.aux/streamer-last-error.json`: the
application records it when a table stops with an error, and `streamer status` shows it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from table import AUX_DIR, Storage

LAST_ERROR_PATH = f"{AUX_DIR}/streamer-last-error.json"
_ERROR_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def record_error(table_path: str, message: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Keep a job's failure with the table, for `streamer status`."""
    error = {"time": time.strftime(_ERROR_TIME_FORMAT, time.gmtime()), "message": message}
    Storage(table_path, storage_options).write_bytes(LAST_ERROR_PATH, json.dumps(error).encode())


def read_last_error(storage: Storage) -> dict | None:
    """The last failure recorded with the table, `{"time", "message"}`; None when there is none."""
    if not storage.exists(LAST_ERROR_PATH):
        return None
    return json.loads(storage.read_bytes(LAST_ERROR_PATH))


def error_time(error: dict) -> datetime:
    """When a recorded failure happened (UTC, to the second)."""
    return datetime.strptime(error["time"], _ERROR_TIME_FORMAT).replace(tzinfo=UTC)
