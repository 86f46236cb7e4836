"""File access for one table, rooted at its base path.

Every module of the engine reads and writes through `Storage`, so the same code serves a local
directory and any filesystem pyarrow knows (S3, GCS, HDFS). Paths given to it are relative to
the table's base path and use '/' separators.

`s3://bucket/path` tables go through pyarrow's S3 file system, set up by `S3Options`: the
table's storage options over the AWS environment variables. On an object store a file is
created by one PUT (a reader sees the whole object or none), so nothing is renamed; there are
no directories to make, and whether a file exists is asked with one HEAD.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import pyarrow.fs as pafs

from table.errors import InvalidRequestError, PathExistsError, PathNotFoundError, StorageOptionsError


@dataclass(frozen=True)
class FileStatus:
    name: str
    path: str
    size: int
    is_dir: bool
    mtime_ns: int


# Each setting: the storage option (hudi-rs / object_store names, so one mapping serves both
# readers) and the environment variables AWS tools read it from, the first set one winning.
_S3_SETTINGS = {
    "access_key_id": ("aws_access_key_id", "AWS_ACCESS_KEY_ID"),
    "secret_access_key": ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    "session_token": ("aws_session_token", "AWS_SESSION_TOKEN"),
    "region": ("aws_region", "AWS_REGION", "AWS_DEFAULT_REGION"),
    "endpoint_url": ("aws_endpoint_url", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "allow_http": ("aws_allow_http", "AWS_ALLOW_HTTP"),
}
STORAGE_OPTION_NAMES = tuple(names[0] for names in _S3_SETTINGS.values())


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store: options given for the table, else the environment.

    The secrets are kept out of `repr`, so a logged `Storage` or config never shows them.
    """

    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    allow_http: str | None = None

    @classmethod
    def resolve(cls, options: Mapping[str, str] | None, environ: Mapping[str, str] = os.environ) -> S3Options:
        given = dict(options or {})
        unknown = sorted(set(given) - set(STORAGE_OPTION_NAMES))
        if unknown:
            raise StorageOptionsError(
                f"unknown storage option(s) {', '.join(unknown)}; known: {', '.join(STORAGE_OPTION_NAMES)}"
            )
        values = {}
        for field, (option, *variables) in _S3_SETTINGS.items():
            found = given.get(option)
            for variable in variables:
                found = found if found not in (None, "") else environ.get(variable)
            values[field] = str(found) if found not in (None, "") else None
        return cls(**values)

    def __repr__(self) -> str:
        shown = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in ("region", "endpoint_url", "allow_http") and getattr(self, f.name)
        }
        return f"S3Options({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def filesystem(self) -> pafs.S3FileSystem:
        """pyarrow's S3 file system for these options. Small files go up in one PUT
        (`allow_delayed_open`), not a multipart upload of three requests."""
        endpoint = self.endpoint_url
        scheme = "https"
        if endpoint:
            if endpoint.startswith("http://"):
                if (self.allow_http or "").lower() not in ("true", "1", "yes"):
                    raise StorageOptionsError(
                        f"the S3 endpoint {endpoint} is plain HTTP; set the storage option aws_allow_http: "
                        "true (or AWS_ALLOW_HTTP=true) to allow it"
                    )
                scheme = "http"
            endpoint = endpoint.split("://", 1)[-1].rstrip("/")
        return pafs.S3FileSystem(
            access_key=self.access_key_id,
            secret_key=self.secret_access_key,
            session_token=self.session_token if self.access_key_id else None,
            region=self.region or "us-east-1",
            endpoint_override=endpoint,
            scheme=scheme,
            allow_delayed_open=True,
            connect_timeout=5,
            request_timeout=30,
        )


class Storage:
    """Storage of one table. Picklable with its options: executors rebuild the file system."""

    def __init__(self, base_uri: str, options: Mapping[str, str] | None = None):
        self.base_uri = base_uri.rstrip("/") or "/"
        self.options = dict(options or {})
        self._fs: pafs.FileSystem | None = None
        self._root: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"base_uri": self.base_uri, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Storage.__init__(self, state["base_uri"], state.get("options"))

    def __repr__(self) -> str:
        return f"Storage({self.base_uri!r})"

    def at(self, base_uri: str) -> Storage:
        """Another path (a sibling table, a checkpoint) on the same store, with the same options."""
        return Storage(base_uri, self.options)

    def _resolve(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            if self.base_uri.startswith(("s3://", "s3a://")):
                self._fs = S3Options.resolve(self.options).filesystem()
                self._root = self.base_uri.split("://", 1)[1]
            elif "://" in self.base_uri:
                self._fs, self._root = pafs.FileSystem.from_uri(self.base_uri)
            else:
                S3Options.resolve(self.options)  # a misspelt option fails here too
                self._fs, self._root = pafs.LocalFileSystem(), os.path.abspath(self.base_uri)
        return self._fs, str(self._root)

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

    def file_exists(self, rel: str) -> bool:
        """Whether a file (not a directory) is there: one HEAD on an object store, where
        `exists` also lists the prefix when no object has the name."""
        if self.is_local:
            return os.path.isfile(self.full_path(rel))
        try:
            self.filesystem.open_input_file(self.full_path(rel)).close()
            return True
        except FileNotFoundError:
            return False

    def is_dir(self, rel: str) -> bool:
        return self.filesystem.get_file_info(self.full_path(rel)).type == pafs.FileType.Directory

    def read_bytes(self, rel: str) -> bytes:
        with self.filesystem.open_input_stream(self.full_path(rel)) as stream:
            return stream.read()

    def size(self, rel: str) -> int:
        info = self.filesystem.get_file_info(self.full_path(rel))
        if info.type == pafs.FileType.NotFound:
            raise PathNotFoundError(self.full_path(rel))
        return info.size

    def makedirs(self, rel: str) -> None:
        """Make a directory and its parents; nothing on an object store, whose directories are
        the prefixes of its objects (a marker object would cost a PUT and show up in listings)."""
        if self.is_local:
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
        one atomic step (a hard link of a fully written temporary file); on an object store the
        object appears whole with its PUT, after a HEAD that found no object of that name.
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
        self._put_new(target, data)

    def write_new(self, rel: str, data: bytes | bytearray | memoryview, durable: bool = True) -> None:
        """Write a data file of a pending instant, in place. Readers never look at a pending
        instant's files, and its rollback deletes what a killed write left, so no temporary name
        is needed; the write token in the name makes it its writer's own, so an object store is
        not asked first whether it exists (a HEAD a file). On a local disk the file is created
        exclusively (FileExistsError when it exists) and, unless `durable` is False, synced:
        a writer of many files passes False and syncs them together with `syncs`."""
        if not self.is_local:
            with self.open_new(rel) as out:
                out.write(data)
            return
        fd = self._create_exclusive(rel)  # a file descriptor, no file object: a commit writes thousands
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def open_new(self, rel: str) -> Any:  # a pyarrow output stream or a local file
        """A data file of a pending instant written as a stream (a large base file written a row
        group at a time), as `write_new` writes it whole: created exclusively on a local disk
        and not synced (see `syncs`); on an object store a PUT, or a multipart upload
        when it grows."""
        if not self.is_local:
            return self.filesystem.open_output_stream(self.full_path(rel))
        return open(self._create_exclusive(rel), "wb")

    def _create_exclusive(self, rel: str) -> int:
        """A new local file open for writing; FileExistsError when there is one. Through
        `os.open`, which costs a new file a third less than `open(path, "xb")`."""
        target = self.full_path(rel)
        try:
            return os.open(target, _CREATE_EXCLUSIVE, 0o644)
        except FileNotFoundError:  # a new partition's directory, or one deleted since (a partition dropped)
            self.makedirs(_parent(rel))
            return os.open(target, _CREATE_EXCLUSIVE, 0o644)

    def syncs(self) -> FileSyncs:
        """Files written with `durable=False`, handed over one by one and made durable together
        when the writer is done (`FileSyncs`). An object store's PUT is durable when it returns:
        nothing to do there."""
        return FileSyncs(self)

    def _put_new(self, target: str, data: bytes | bytearray | memoryview) -> None:
        """One PUT after one HEAD: atomic for readers, but not exclusive. pyarrow cannot send
        `If-None-Match`, so two writers racing for one name are kept apart by the writer lease
        (`table.storage.lease`), not here."""
        try:
            self.filesystem.open_input_file(target).close()
        except FileNotFoundError:
            with self.filesystem.open_output_stream(target) as out:
                out.write(data)
            return
        raise PathExistsError(target)

    def touch(self, rel: str) -> None:
        """Create an empty file (a marker): its name is all it says, so nothing is synced."""
        target = self.full_path(rel)
        self.makedirs(_parent(rel))
        if self.is_local:
            open(target, "ab").close()
        else:
            with self.filesystem.open_output_stream(target):
                pass

    def modified_ns(self, rel: str) -> int | None:
        """When the file was last written, in nanoseconds since the epoch; None when it is absent."""
        info = self.filesystem.get_file_info(self.full_path(rel))
        return None if info.type == pafs.FileType.NotFound else info.mtime_ns

    def rename(self, src: str, dst: str) -> None:
        """Move a file or directory in one atomic step (FileNotFoundError when `src` is gone).
        Local disks only: an object store has no atomic rename."""
        if not self.is_local:
            raise InvalidRequestError(f"{self.base_uri} has no atomic rename")
        os.rename(self.full_path(src), self.full_path(dst))

    def create_via(self, staged: str, rel: str, data: bytes) -> None:
        """Create `rel`, which must not exist yet, from a file first written whole at `staged`:
        the creation is a hard link of the staged file, so it fails (FileNotFoundError) once the
        staged file's directory has been moved away, and it is one step with that check. Local
        disks only (`table.storage.commit_lock` fences a commit this way)."""
        if not self.is_local:
            raise InvalidRequestError(f"{self.base_uri} cannot create a file through a staged one")
        source, target = self.full_path(staged), self.full_path(rel)
        _write_local(source, data)
        try:
            os.link(source, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(source)

    def temp_files_of(self, rel: str) -> list[str]:
        """Temporary files a write of `rel` left when its process was killed before the file was
        moved into place (local disks only: other file systems write in place)."""
        if not self.is_local:
            return []
        parent, _, name = rel.rpartition("/")
        prefix = _temp_prefix(name)
        return [
            e.path
            for e in self.list_dir(parent)
            if not e.is_dir and e.name.startswith(prefix) and e.name.endswith(".tmp")
        ]

    def list_dir(self, rel: str = "", recursive: bool = False) -> list[FileStatus]:
        """Entries directly under a directory (all below it with `recursive`: one listing of the
        prefix on an object store, however deep); an absent directory lists as empty."""
        base = self.full_path(rel)
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=recursive)
        prefix = rel.strip("/")
        out = []
        for info in self.filesystem.get_file_info(selector):
            name = info.base_name
            below = info.path[len(base) :].strip("/") if recursive else name
            out.append(
                FileStatus(
                    name=name,
                    path=f"{prefix}/{below}" if prefix else below,
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
        """Delete a directory and all in it; an absent one is fine."""
        with contextlib.suppress(FileNotFoundError):
            self.filesystem.delete_dir(self.full_path(rel))

    def open_input(self, rel: str) -> Any:  # a pyarrow random-access file
        """A random-access file, as pyarrow.parquet needs."""
        return self.filesystem.open_input_file(self.full_path(rel))

    def open_output(self, rel: str) -> Any:  # a pyarrow output stream
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


class FileSyncs:
    """Files written with `durable=False`, made durable together once the writer is done
    (`Storage.syncs`). On Linux that is one `syncfs(2)` per file system holding them: the kernel
    writes them all back in one pass and flushes the disk once, where an fsync of each file
    flushes it once a file, which costs more than writing a small file. Elsewhere each file is
    fsynced. `wait` returns once they are durable, or raises the first failure."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self._directories: set[str] = set()  # where the files are, for syncfs
        self._paths: list[str] = []  # the files, for fsync

    def add(self, rel: str) -> None:
        if not self._storage.is_local:
            return  # an object store's PUT is durable when it returns
        path = self._storage.full_path(rel)
        if _SYNCFS is None:
            self._paths.append(path)
        else:
            self._directories.add(os.path.dirname(path))

    def wait(self) -> None:
        """Return once every file handed over is durable."""
        directories, self._directories = self._directories, set()
        paths, self._paths = self._paths, []
        for directory in {os.stat(d).st_dev: d for d in sorted(directories)}.values():
            _sync_file_system(directory)
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _libc_syncfs() -> Any:
    """`syncfs(2)`, where the C library has it (Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _libc_syncfs()


def _sync_file_system(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"syncfs: {os.strerror(code)}", directory)
    finally:
        os.close(fd)


_CREATE_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def _write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
