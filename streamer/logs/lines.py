"""The job's log lines: text for people, or JSON lines for log shippers (`--log-format json`).

Each JSON line is one object: `time` (ISO 8601, UTC, milliseconds), `level`, `logger`,
`message`, and `exception` when the event carries one. Spark's Python workers write theirs the
same way: the driver passes its choice on in the environment (`LOG_FORMAT_ENV`).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

#: Set by the job's driver (`app.configure_logging`); Spark's Python workers inherit them.
LOG_LEVEL_ENV = "MOR_STREAMER_LOG_LEVEL"
LOG_FORMAT_ENV = "MOR_STREAMER_LOG_FORMAT"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object per event, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    """The formatter of `kind`: `text` or `json`."""
    return JsonLines() if kind == "json" else logging.Formatter(LOG_FORMAT)
