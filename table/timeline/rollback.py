"""Rolling back writes that never completed.

A writer killed mid-commit leaves a requested or inflight deltacommit and some data files.
Readers already ignore them (their instant is not completed); the next writer removes them
before its first commit: the files the instant's markers name (and the temporary files a
write killed before moving them into place left beside them) are deleted and a rollback
instant is recorded (plan, then metadata, in Hudi's Avro). A rollback itself interrupted is
finished from its plan on the next start.

Only deltacommits are rolled back here. A requested or inflight compaction or clustering is a
plan to finish, not a failed write: its executor runs it again. A clustering plan is rolled
back only on request (`table.services.clustering.execute.rollback_clustering`), with the files of its
children named in the rollback plan as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from table import failpoints
from table.storage.file_io import Storage
from table.storage.markers import delete_marked_files, delete_markers, marked_files
from table.timeline.instant_avro import deserialize_plan, serialize_plan
from table.timeline.timeline import Instant, Timeline

log = logging.getLogger(__name__)

ROLLBACK_PLAN_VERSION = 1
ROLLBACK_METADATA_VERSION = 1
ROLLBACK_ACTION = "rollback"
ROLLED_BACK_ACTIONS = ("deltacommit",)


def rollback_pending_writes(
    storage: Storage, timeline: Timeline, is_failed: Callable[[str], bool] = lambda instant: True
) -> list[str]:
    """Roll back every pending deltacommit that `is_failed` (all of them for a single writer; under
    optimistic concurrency those whose heartbeat stopped), and finish interrupted rollbacks;
    returns the instants."""
    done: list[str] = []
    for pending in timeline.pending(ROLLBACK_ACTION):
        plan = deserialize_plan("HoodieRollbackPlan", timeline.read_content(pending.requested()))
        target = plan["instantToRollback"]
        _execute(storage, timeline, pending.timestamp, target["commitTime"], target["action"])
        done.append(target["commitTime"])
        timeline = Timeline.load(storage)
    for pending in timeline.pending():
        if pending.action in ROLLED_BACK_ACTIONS and is_failed(pending.timestamp):
            rollback(storage, timeline, pending)
            done.append(pending.timestamp)
            timeline = Timeline.load(storage)
    return done


def rollback(storage: Storage, timeline: Timeline, target: Instant, extra_files: Sequence[str] = ()) -> str:
    """Roll back one pending instant: the files its markers name and `extra_files` (table
    relative) are deleted; returns the rollback's instant time."""
    rollback_time = timeline.new_instant_time()
    files = sorted(set(marked_files(storage, target.timestamp)) | set(extra_files))
    plan = {
        "instantToRollback": {"commitTime": target.timestamp, "action": target.action},
        "RollbackRequests": [
            {
                "partitionPath": _partition_of(path),
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [storage.full_path(path)],
                "logBlocksToBeDeleted": {},
            }
            for path in files
        ],
        "version": ROLLBACK_PLAN_VERSION,
    }
    requested = Instant(rollback_time, ROLLBACK_ACTION, "requested")
    timeline.create_requested(requested, serialize_plan("HoodieRollbackPlan", plan))
    failpoints.reach("rollback.requested")
    _execute(storage, timeline, rollback_time, target.timestamp, target.action)
    return rollback_time


def _execute(storage: Storage, timeline: Timeline, rollback_time: str, target_time: str, target_action: str) -> None:
    inflight = Instant(rollback_time, ROLLBACK_ACTION, "inflight")
    if not timeline.contains(inflight):
        timeline.transition_to_inflight(Instant(rollback_time, ROLLBACK_ACTION, "requested"))
    plan = deserialize_plan(
        "HoodieRollbackPlan", timeline.read_content(Instant(rollback_time, ROLLBACK_ACTION, "requested"))
    )
    planned = [_relative(storage, f) for r in plan["RollbackRequests"] or () for f in r["filesToBeDeleted"] or ()]
    deleted: dict[str, list[str]] = {}
    for path in delete_marked_files(storage, target_time, also=planned):
        deleted.setdefault(_partition_of(path), []).append(storage.full_path(path))
    failpoints.reach("rollback.files_deleted")
    delete_markers(storage, target_time)
    timeline.delete_pending(Instant(target_time, target_action, "inflight"))
    metadata = {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": 0,
        "totalFilesDeleted": sum(len(v) for v in deleted.values()),
        "commitsRollback": [target_time],
        "partitionMetadata": {
            p: {
                "partitionPath": p,
                "successDeleteFiles": files,
                "failedDeleteFiles": [],
                "rollbackLogFiles": {},
                "logFilesFromFailedCommit": {},
            }
            for p, files in deleted.items()
        },
        "version": ROLLBACK_METADATA_VERSION,
        "instantsRollback": [{"commitTime": target_time, "action": target_action}],
    }
    timeline.complete(inflight, serialize_plan("HoodieRollbackMetadata", metadata))
    failpoints.reach("rollback.completed")
    log.info("rolled back %s %s (%d files deleted)", target_action, target_time, metadata["totalFilesDeleted"])


def _relative(storage: Storage, full_path: str) -> str:
    root = storage.full_path() + "/"
    return full_path[len(root) :] if full_path.startswith(root) else full_path


def _partition_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""
