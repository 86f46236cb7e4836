"""Marker files: a record, made before any data file, of the files an instant is writing.

Each writer of an instant's files (a Spark write task attempt, an in-process commit, a service
execution) writes one file, `.hoodie/.temp/<instant>/MARKERS<n>`, naming every data file it is
about to write, one per line as `<partition>/<file>.marker.<IOTYPE>`, before it writes the first
of them; `MARKERS.type` beside them says `TIMELINE_SERVER_BASED`. That is the layout Hudi's
timeline-server-based markers leave in storage, and Hudi's rollback reads it from there. A write
so costs one request for its markers however many file groups it touches, where one marker file
per data file (Hudi's direct markers) costs a request each.

A rollback of an instant that never completed deletes exactly the files its markers name (a
named file that was never written is simply absent); a completed instant's markers are removed
with it. Direct markers, `<partition>/<file>.marker.<IOTYPE>` files, are read too: an instant
left pending by an earlier version of this writer may have them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum

from table.errors import InvalidRequestError
from table.storage.file_io import Storage
from table.storage.layout import TEMP_DIR, partition_file_path

MARKER_SUFFIX = ".marker."
MARKERS_FILE_PREFIX = "MARKERS"
MARKER_TYPE_FILE = f"{MARKERS_FILE_PREFIX}.type"
#: Hudi's `MarkerType` whose storage layout these files are.
MARKER_TYPE = "TIMELINE_SERVER_BASED"


class IOType(StrEnum):
    """Hudi's `IOType`: how the marked file is written."""

    CREATE = "CREATE"  # a new base file
    APPEND = "APPEND"  # a log file


@dataclass(frozen=True)
class MarkedFile:
    """A data file an instant is about to write, in its partition."""

    partition_path: str
    file_name: str
    io_type: IOType

    @property
    def path(self) -> str:
        return partition_file_path(self.partition_path, self.file_name)

    @property
    def marker(self) -> str:
        return f"{self.path}{MARKER_SUFFIX}{self.io_type}"


def marker_dir(instant: str) -> str:
    return f"{TEMP_DIR}/{instant}"


def begin_markers(storage: Storage, instant: str) -> None:
    """Say how the instant's markers are kept, before any writer writes its own: Hudi's
    rollback reads the marker files the type names."""
    storage.write_bytes(f"{marker_dir(instant)}/{MARKER_TYPE_FILE}", MARKER_TYPE.encode())


def write_markers(storage: Storage, instant: str, writer_id: int, files: Iterable[MarkedFile]) -> None:
    """Record, in one file of its own, the files one writer of the instant is about to write.

    `writer_id` tells apart the writers of one instant (a Spark task attempt's unique id); the
    file is written whole or not at all, so a writer killed before it wrote any data file."""
    if writer_id < 0:
        raise InvalidRequestError(f"a marker writer id is not negative, got {writer_id}")
    lines = "".join(f"{f.marker}\n" for f in files)
    storage.write_bytes(f"{marker_dir(instant)}/{MARKERS_FILE_PREFIX}{writer_id}", lines.encode())


def marked_files(storage: Storage, instant: str) -> list[str]:
    """Table-relative paths of the data files an instant marked, whether or not they exist."""
    root = marker_dir(instant)
    found: set[str] = set()
    for entry in storage.list_dir(root, recursive=True):
        if entry.is_dir:
            continue
        below = entry.path[len(root) + 1 :]
        if entry.name.startswith(MARKERS_FILE_PREFIX) and entry.name != MARKER_TYPE_FILE and "/" not in below:
            text = storage.read_bytes(entry.path).decode()
            found.update(line.split(MARKER_SUFFIX, 1)[0] for line in text.splitlines() if MARKER_SUFFIX in line)
        elif MARKER_SUFFIX in entry.name:
            found.add(below.split(MARKER_SUFFIX, 1)[0])
    return sorted(found)


def delete_marked_files(
    storage: Storage, instant: str, *, keep: Collection[str] = (), also: Iterable[str] = ()
) -> list[str]:
    """Delete the data files the instant's markers name, and `also` (table-relative paths), but
    those in `keep`: each with the temporary files a write killed before moving it into place left
    beside it (`Storage.temp_files_of`). What a rollback, a retried plan execution and a commit's
    reconciliation of its task attempts all do; returns the paths that were there and are gone."""
    deleted: list[str] = []
    for path in sorted(set(marked_files(storage, instant)) | set(also)):
        if path in keep:
            continue
        for leftover in [path, *storage.temp_files_of(path)]:
            try:
                storage.delete(leftover, missing_ok=False)
            except FileNotFoundError:  # marked, never written
                continue
            deleted.append(leftover)
    return deleted


def delete_markers(storage: Storage, instant: str) -> None:
    storage.delete_dir(marker_dir(instant))
