"""File access for one table, rooted at its base path.

Every module of the engine reads and writes through `Storage`, so the same code serves a local
directory and any filesystem pyarrow knows (S3, GCS, HDFS). Paths given to it are relative to
the table's base path and use '/' separators.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs


@dataclass(frozen=True)
class FileStatus:
    name: str
    path: str
    size: int
    is_dir: bool
    mtime_ns: int


class Storage:
    """Storage of one table. Picklable: executors rebuild the filesystem from the URI."""

    def __init__(self, base_uri: str):
        self.base_uri = base_uri.rstrip("/") or "/"
        self._fs: pafs.FileSystem | None = None
        self._root: str | None = None

    def __getstate__(self) -> dict:
        return {"base_uri": self.base_uri}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["base_uri"])

    def __repr__(self) -> str:
        return f"Storage({self.base_uri!r})"

    def _resolve(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            if "://" in self.base_uri:
                self._fs, self._root = pafs.FileSystem.from_uri(self.base_uri)
            else:
                self._fs, self._root = pafs.LocalFileSystem(), os.path.abspath(self.base_uri)
        return self._fs, self._root

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._resolve()[0]

    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def full_path(self, rel: str = "") -> str:
        root = self._resolve()[1]
        rel = rel.strip("/")
        return f"{root}/{rel}" if rel else root

    def exists(self, rel: str) -> bool:
        return self.filesystem.get_file_info(self.full_path(rel)).type != pafs.FileType.NotFound

    def is_dir(self, rel: str) -> bool:
        return self.filesystem.get_file_info(self.full_path(rel)).type == pafs.FileType.Directory

    def read_bytes(self, rel: str) -> bytes:
        with self.filesystem.open_input_stream(self.full_path(rel)) as stream:
            return stream.read()

    def size(self, rel: str) -> int:
        info = self.filesystem.get_file_info(self.full_path(rel))
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self.full_path(rel))
        return info.size

    def makedirs(self, rel: str) -> None:
        self.filesystem.create_dir(self.full_path(rel), recursive=True)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file, replacing any old one; readers see the old or the new, never half."""
        target = self.full_path(rel)
        self.makedirs(_parent(rel))
        if self.is_local:
            tmp = _temp_name(target)
            _write_local(tmp, data)
            os.replace(tmp, target)
        else:
            with self.filesystem.open_output_stream(target) as out:
                out.write(data)

    def create(self, rel: str, data: bytes) -> None:
        """Create a file that must not exist yet; the file appears whole or not at all.

        Raises FileExistsError when it exists. On a local disk the check and the creation are
        one atomic step (a hard link of a fully written temporary file).
        """
        target = self.full_path(rel)
        self.makedirs(_parent(rel))
        if self.is_local:
            tmp = _temp_name(target)
            _write_local(tmp, data)
            try:
                os.link(tmp, target)
            finally:
                os.unlink(tmp)
            return
        if self.exists(rel):
            raise FileExistsError(target)
        with self.filesystem.open_output_stream(target) as out:
            out.write(data)

    def write_new(self, rel: str, data: bytes | bytearray | memoryview) -> None:
        """Write a data file of a pending instant: exclusively (FileExistsError when it exists),
        in place and durably. Readers never look at a pending instant's files, and its rollback
        deletes what a killed write left, so no temporary name is needed."""
        target = self.full_path(rel)
        self.makedirs(_parent(rel))
        if self.is_local:
            with open(target, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return
        if self.exists(rel):
            raise FileExistsError(target)
        with self.filesystem.open_output_stream(target) as out:
            out.write(data)

    def touch(self, rel: str) -> None:
        """Create an empty file (a marker): its name is all it says, so nothing is synced."""
        target = self.full_path(rel)
        self.makedirs(_parent(rel))
        if self.is_local:
            open(target, "ab").close()
        else:
            with self.filesystem.open_output_stream(target):
                pass

    def temp_files_of(self, rel: str) -> list[str]:
        """Temporary files a write of `rel` left when its process was killed before the file was
        moved into place (local disks only: other file systems write in place)."""
        if not self.is_local:
            return []
        parent, _, name = rel.rpartition("/")
        prefix = _temp_prefix(name)
        return [e.path for e in self.list_dir(parent)
                if not e.is_dir and e.name.startswith(prefix) and e.name.endswith(".tmp")]

    def list_dir(self, rel: str = "") -> list[FileStatus]:
        """Entries directly under a directory; an absent directory lists as empty."""
        base = self.full_path(rel)
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        prefix = rel.strip("/")
        out = []
        for info in self.filesystem.get_file_info(selector):
            name = info.base_name
            out.append(
                FileStatus(
                    name=name,
                    path=f"{prefix}/{name}" if prefix else name,
                    size=info.size or 0,
                    is_dir=info.type == pafs.FileType.Directory,
                    mtime_ns=info.mtime_ns or 0,
                )
            )
        return out

    def delete(self, rel: str, missing_ok: bool = True) -> None:
        try:
            self.filesystem.delete_file(self.full_path(rel))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_dir(self, rel: str) -> None:
        if self.exists(rel):
            self.filesystem.delete_dir(self.full_path(rel))

    def open_input(self, rel: str):
        """A random-access file, as pyarrow.parquet needs."""
        return self.filesystem.open_input_file(self.full_path(rel))

    def open_output(self, rel: str):
        self.makedirs(_parent(rel))
        return self.filesystem.open_output_stream(self.full_path(rel))


def _parent(rel: str) -> str:
    rel = rel.strip("/")
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _temp_name(target: str) -> str:
    head, tail = os.path.split(target)
    return os.path.join(head, f"{_temp_prefix(tail)}{uuid.uuid4().hex}.tmp")


def _temp_prefix(name: str) -> str:
    """Hidden, and without the underscores Hudi readers split data file names on: a temporary
    file left by a process killed mid-write is never taken for a log file of a file group."""
    return f".{name.replace('_', '~')}."


def _write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
