"""Marker files: a record, made before each data file, of what an instant is writing.

They live in `.hoodie/.temp/<instant>/<partition>/<file>.marker.<IOTYPE>` as Hudi's direct
markers do. A rollback of an instant that never completed deletes exactly the files its markers
name; a completed instant's markers are removed with it.
"""

from __future__ import annotations

from table.storage.file_io import Storage
from table.storage.layout import TEMP_DIR

MARKER_SUFFIX = ".marker."


def marker_dir(instant: str) -> str:
    return f"{TEMP_DIR}/{instant}"


def create_marker(storage: Storage, instant: str, partition_path: str, file_name: str, io_type: str) -> None:
    rel = "/".join(p for p in (marker_dir(instant), partition_path, f"{file_name}{MARKER_SUFFIX}{io_type}") if p)
    storage.touch(rel)


def marked_files(storage: Storage, instant: str) -> list[str]:
    """Table-relative paths of the data files an instant marked, whether or not they exist."""
    root = marker_dir(instant)
    return sorted(entry.path[len(root) + 1:].split(MARKER_SUFFIX, 1)[0]
                  for entry in storage.list_dir(root, recursive=True)
                  if not entry.is_dir and MARKER_SUFFIX in entry.name)


def delete_markers(storage: Storage, instant: str) -> None:
    storage.delete_dir(marker_dir(instant))
