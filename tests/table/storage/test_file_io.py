"""Local files a writer makes durable together (`Storage.syncs`): every one handed over is
durable before the writer goes on, on Linux with one syncfs of their file system, elsewhere an
fsync each; a file or directory that is gone fails the write."""

from __future__ import annotations

import os

import pytest

from table.storage import file_io
from table.storage.file_io import Storage

pytestmark = pytest.mark.unit


@pytest.fixture(params=["syncfs", "fsync"])
def sync_kind(request, monkeypatch):
    """Both ways of syncing: syncfs where the C library has it, fsync without."""
    if request.param == "syncfs" and file_io._SYNCFS is None:
        pytest.fail("this Linux C library has no syncfs")
    if request.param == "fsync":
        monkeypatch.setattr(file_io, "_SYNCFS", None)
    return request.param


def _recorded_syncs(monkeypatch) -> list[str]:
    """The paths fsynced or syncfs'd, recorded as the real calls go through."""
    synced: list[str] = []
    real_fsync, real_syncfs = os.fsync, file_io._SYNCFS

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def syncfs(fd: int) -> int:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_syncfs(fd)

    monkeypatch.setattr(file_io.os, "fsync", fsync)
    if real_syncfs is not None:
        monkeypatch.setattr(file_io, "_SYNCFS", syncfs)
    return synced


def test_files_handed_over_are_all_synced_when_the_writer_is_done(tmp_path, sync_kind, monkeypatch):
    storage = Storage(str(tmp_path))
    names = [f"p{i % 3}/f{i}" for i in range(20)]
    synced = _recorded_syncs(monkeypatch)
    syncs = storage.syncs()
    for name in names:
        storage.write_new(name, name.encode(), durable=False)
        syncs.add(name)
    assert synced == []  # nothing until the writer is done
    syncs.wait()
    assert all((tmp_path / name).read_bytes() == name.encode() for name in names)
    if sync_kind == "syncfs":
        assert len(synced) == 1 and synced[0] in {str(tmp_path / f"p{i}") for i in range(3)}  # one file system
    else:
        assert sorted(synced) == sorted(str(tmp_path / name) for name in names)


def test_a_file_whose_directory_is_gone_fails_the_write(tmp_path, sync_kind):
    storage = Storage(str(tmp_path))
    syncs = storage.syncs()
    storage.write_new("p/f", b"x", durable=False)
    syncs.add("p/f")
    (tmp_path / "p" / "f").unlink()
    (tmp_path / "p").rmdir()  # a partition dropped while the task wrote into it
    with pytest.raises(FileNotFoundError):
        syncs.wait()


def test_an_object_store_write_needs_no_sync(tmp_path, monkeypatch):
    storage = Storage("s3://bucket/table", {"aws_region": "us-east-1"})
    synced = _recorded_syncs(monkeypatch)
    syncs = storage.syncs()
    syncs.add("p/f")  # its PUT returned: durable
    syncs.wait()
    assert synced == []
