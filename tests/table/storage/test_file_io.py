"""Local files a writer syncs in the background (`Storage.syncs`): every one handed over is
synced before the writer goes on, a file that cannot be synced fails the write, and no thread
outlives the syncs."""

from __future__ import annotations

import threading

import pytest

from table.storage.file_io import FileSyncs, Storage

pytestmark = pytest.mark.unit


def _fsync_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("fsync")]


def test_files_synced_in_the_background_are_all_durable_when_the_context_ends(tmp_path):
    storage = Storage(str(tmp_path))
    names = [f"p{i % 3}/f{i}" for i in range(2 * FileSyncs.BATCH + 5)]
    with storage.syncs() as syncs:
        for name in names:
            storage.write_new(name, name.encode(), durable=False)
            syncs.add(name)
    assert all((tmp_path / name).read_bytes() == name.encode() for name in names)
    assert _fsync_threads() == []


def test_a_file_that_cannot_be_synced_fails_the_write(tmp_path):
    storage = Storage(str(tmp_path))
    names = [f"f{i}" for i in range(FileSyncs.BATCH + 3)]
    syncs = storage.syncs()
    for name in names:
        storage.write_new(name, b"x", durable=False)
        syncs.add(name)
    (tmp_path / names[-1]).unlink()  # after the first batch went, before the last is synced
    with pytest.raises(FileNotFoundError):
        syncs.__exit__(None, None, None)
    assert _fsync_threads() == []
