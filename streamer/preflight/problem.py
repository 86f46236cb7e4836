"""One problem of a config found before Spark starts: the file, the key, what is wrong, the fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamer.errors import StreamerError


@dataclass(frozen=True)
class ConfigProblem:
    file: Path
    key: str  # the dotted key path, e.g. "table.record_key"
    text: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.text}; fix: {self.fix}"


class ConfigProblemsError(StreamerError, ValueError):
    """Raised where a check cannot go on; carries what it found, and the fields it could read
    (`known`: name -> type, None for a field whose type was wrong) for the checks that follow."""

    def __init__(self, problems: list[ConfigProblem], known: dict | None = None):
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems
        self.known = known
