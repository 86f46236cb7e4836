"""Apache Hudi 0.15 under optimistic concurrency beside our writers on one local table: one lock,
one conflict rule, no lost write.

Hudi writes with `hoodie.write.concurrency.mode=optimistic_concurrency_control`, its
`FileSystemBasedLockProvider` at the table's `.hoodie` (the file `.hoodie/lock`, which our commit
lock is) and lazy rollback of failed writes (by heartbeat, as ours). Its conflict rule must be set
to the file-group one: for a bucket index Hudi 0.15 otherwise picks a rule that reads a bucket
number from the first eight characters of a file id, which fails on a consistent-hashing table's
file ids (theirs and ours) with a NumberFormatException.

- Hudi refuses its commit when we committed in its file groups since it began, and we refuse
  ours when Hudi did; each writes again and succeeds.
- While our commit lock is held, Hudi's commit waits for it.
- Every reader then reads the oracle's rows.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from harness.hudi_judge import HudiJudgeError
from table import Concurrency, MorTable, WriteConflictError
from table.storage.commit_lock import CommitLock
from table.write.file_group_writer import WriteTask, write_file_groups
from table.write.prepare import prepare_batch
from tests.support.hudi_writes import DATA_SCHEMA, Story, hudi_options
from tests.support.orders import SCHEMA, make_table, write_options
from tests.support.readers import project

pytestmark = pytest.mark.hudi


def hudi_occ(path) -> dict[str, str]:
    return {
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.cleaner.policy.failed.writes": "LAZY",
        "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
        "hoodie.write.lock.filesystem.path": f"{path}/.hoodie",
        "hoodie.write.lock.filesystem.expire": "1",
        "hoodie.write.lock.conflict.resolution.strategy": (
            "org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy"
        ),
    }


def upserts_of(rows: list[dict], clock: int) -> list[dict]:
    """The rows again, updated later (live, every one a key the table holds)."""
    return [dict(r, updated_at=clock + i, amount=float(i), is_deleted=False) for i, r in enumerate(rows)]


def test_hudi_and_our_writers_share_the_commit_lock_and_refuse_each_others_conflicting_commits(
    tmp_path, hudi_judge, conformance_matrix
):
    story = Story(tmp_path / "orders", seed=97, state="ours and Hudi, both optimistic", matrix=conformance_matrix)
    story.hudi_configs = hudi_occ(story.path)
    make_table(story.path)
    options = write_options(concurrency=Concurrency.OPTIMISTIC)
    first = [dict(r, is_deleted=False) for r in story.batch(300)]
    story.oracle.apply_batch(first)
    release = tmp_path / "release-hudi"

    with MorTable.load(str(story.path)).writer(options, description="ours") as ours, ThreadPoolExecutor(1) as hudi:
        ours.upsert(pa.Table.from_pylist(first, schema=SCHEMA))

        # Hudi began before our commit in the same file groups: Hudi refuses its own
        theirs = pa.Table.from_pylist([project(r, DATA_SCHEMA.names) for r in upserts_of(first[:100], 2_000)])
        options_of_hudi = hudi_options(**story.hudi_configs)
        held = hudi.submit(hudi_judge.upsert, story.path, theirs.cast(DATA_SCHEMA), options_of_hudi, release)
        pending = wait_for_pending(story.path)
        ours.upsert(pa.Table.from_pylist(mine := upserts_of(first[50:150], 3_000), schema=SCHEMA))
        story.oracle.apply_batch(mine)
        release.touch()
        with pytest.raises(HudiJudgeError, match="HoodieWriteConflictException"):
            held.result(timeout=300)
        assert not MorTable.load(str(story.path)).timeline().is_completed(pending)

        # ours began before Hudi's commit in the same file groups: ours is refused, then written again
        again = upserts_of(first[:100], 4_000)
        commit = ours.begin_delta_commit(ours.check_schema(SCHEMA))
        routed = commit.routing.route(
            prepare_batch(pa.Table.from_pylist(again, schema=SCHEMA), ours.batch_spec, ours.key_generator)
        )
        stats = write_file_groups(commit.context, WriteTask(0), commit.routing, routed)
        story.by_hudi(hudi_judge, hudis := upserts_of(first[100:200], 5_000))
        with pytest.raises(WriteConflictError, match="conflicts with deltacommit"):
            commit.complete(stats)
        ours.upsert(pa.Table.from_pylist(again, schema=SCHEMA))
        story.oracle.apply_batch(again)
        assert hudis

        # our commit lock held: Hudi's commit waits for it
        lock = CommitLock(MorTable.load(str(story.path)).storage, "the test")
        later = upserts_of(first[200:260], 6_000)
        with lock.held():
            waiting = hudi.submit(story.by_hudi, hudi_judge, later)
            time.sleep(8)
            assert not waiting.done()
            released = time.time()
        waiting.result(timeout=300)
        timeline = MorTable.load(str(story.path)).timeline()
        last = timeline.completed("deltacommit")[-1]
        completed_at = (story.path / ".hoodie" / f"{last.timestamp}.deltacommit").stat().st_mtime
        assert completed_at >= released, "Hudi completed its commit while our commit lock was held"

    story.assert_readers_agree(hudi_judge, "both writers optimistic, conflicts refused and written again")


def wait_for_pending(path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while not (pending := MorTable.load(str(path)).timeline().pending("deltacommit")):
        assert time.monotonic() < deadline, "Hudi's write put no instant on the timeline"
        time.sleep(0.1)
    return pending[0].timestamp
