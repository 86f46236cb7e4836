"""Archival: moving the oldest completed instants off the active timeline.

A job that commits every few seconds would otherwise list thousands of files in `.hoodie/` at
every batch. As Hudi 0.14/0.15 do with timeline layout 1: when more than `max_instants`
completed instants are active, the oldest go until `min_instants` remain, each with all its
state files. Every state file becomes a HoodieArchivedMetaEntry record (instant time, action,
state, and the plan or metadata the file held, as Hudi's MetadataConversionUtils converts it);
one archival run writes them as one Avro data block of a new archive log file
`.hoodie/archived/.commits_.archive.<version>_1-0-1`, never appending to an older one.

Archival stops before the first of these, so that what it archives is always the oldest part
of the timeline and readers may take any instant older than the active timeline as completed
(`table.timeline.timeline.CompletedInstants`):

- the latest completed write: readers take the table's schema and the snapshot's time from it;
- the earliest pending instant, and the last completed write before it (Hudi keeps that one so
  the timeline does not start with a pending instant);
- the earliest commit the last completed clean retains: reads as of retained commits, and the
  next clean's window, need those instants;
- the first completed replacecommit whose replaced file groups still have files: readers,
  hudi-rs among them, learn that those groups are replaced only from it;
- for each extraMetadata key named by `keep_latest_with_metadata_prefix` (the key itself, or it
  followed by `.` and a name), the latest write that has it: the checkpoint of each stream that
  feeds the table, which its restart reads back.

The entries are written first, then the instant files deleted: requested and inflight ones,
then completed ones oldest first, so the active timeline never has a hole (Hudi's order). A
crash in between leaves instants both archived and active; the next run archives them again
in a new file, and `read_archived_instants` keeps one per (instant time, action).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from table import failpoints
from table.errors import InvalidRequestError
from table.file_group.log_file.block import BlockType, DataBlock, HeaderKey
from table.file_group.log_file.reader import read_log_file
from table.file_group.log_file.writer import write_log_file
from table.schema import arrow_schema_from_avro
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR, BaseFileName, LogFileName, instant_file_path
from table.storage.markers import delete_markers
from table.timeline.commit_metadata import CommitMetadata, ReplaceCommitMetadata
from table.timeline.instant_avro import deserialize_plan, schema
from table.timeline.timeline import Action, Instant, State, Timeline, instant_files

if TYPE_CHECKING:
    from table.mor_table import MorTable

ENTRY_SCHEMA = "HoodieArchivedMetaEntry"
ARCHIVE_FILE_ID = "commits"  # HoodieArchivedTimeline's log file id, with base instant ""
ARCHIVE_WRITE_TOKEN = "1-0-1"  # HoodieLogFormat.UNKNOWN_WRITE_TOKEN
_ARCHIVE_FILE = re.compile(rf"\.{ARCHIVE_FILE_ID}_\.archive\.(?P<version>\d+)_\d+-\d+-\d+")
# Hudi's convertCommitMetadata blanks the rolling stats key rather than archiving them.
ROLLING_STATS_KEY = "ROLLING_STATS"


@dataclass(frozen=True)
class ArchivePolicy:
    """Archive when more than `max_instants` completed instants are active, down to `min_instants`."""

    min_instants: int = 20
    max_instants: int = 30

    def __post_init__(self) -> None:
        if not 1 <= self.min_instants < self.max_instants:
            raise InvalidRequestError(
                f"need 1 <= min_instants < max_instants, not {self.min_instants} and {self.max_instants}"
            )


@dataclass(frozen=True)
class ArchiveResult:
    archived: tuple[Instant, ...]  # the completed instants moved, oldest first
    archive_file: str | None

    def __str__(self) -> str:
        if not self.archived:
            return "nothing to archive"
        return (
            f"archived {len(self.archived)} instant(s), {self.archived[0].timestamp} to "
            f"{self.archived[-1].timestamp}, into {self.archive_file}"
        )


def archive(
    table: MorTable, policy: ArchivePolicy, keep_latest_with_metadata_prefix: str | None = None
) -> ArchiveResult:
    """Archive what the policy allows (see the module docstring for what always stays)."""
    storage = table.storage
    files = instant_files(storage)
    timeline = Timeline(storage, files)
    completed = timeline.completed()
    if len(completed) <= policy.max_instants:
        return ArchiveResult((), None)
    bound = _archival_bound(storage, timeline, keep_latest_with_metadata_prefix)
    archived = [i for i in completed if bound is None or i.timestamp < bound][: len(completed) - policy.min_instants]
    if not archived:
        return ArchiveResult((), None)
    keys = {i.key for i in archived}
    states = list(State)  # requested, inflight, completed
    state_files = sorted((f for f in files if f.key in keys), key=lambda f: (f.timestamp, states.index(f.state)))
    archive_file = _write_archive_file(table, timeline, state_files)
    failpoints.reach("archive.entries_written")
    for f in sorted(state_files, key=lambda f: f.state is State.COMPLETED):  # completed ones last, oldest first
        storage.delete(instant_file_path(f.file_name))
    for i in archived:
        delete_markers(storage, i.timestamp)  # left over by a crash after completing
    return ArchiveResult(tuple(archived), archive_file)


def _archival_bound(storage: Storage, timeline: Timeline, keep_prefix: str | None) -> str | None:
    """The earliest instant time that must stay active; None when nothing bounds archival."""
    last_write = timeline.last_completed_write()
    bounds = (
        last_write.timestamp if last_write else None,
        _pending_bound(timeline),
        _clean_bound(timeline),
        _replace_bound(storage, timeline),
        _latest_writes_with(timeline, keep_prefix) if keep_prefix else None,
    )
    return min((b for b in bounds if b), default=None)


def _pending_bound(timeline: Timeline) -> str | None:
    pending = timeline.pending()
    if not pending:
        return None
    before = [w.timestamp for w in timeline.completed_writes() if w.timestamp < pending[0].timestamp]
    return before[-1] if before else pending[0].timestamp


def _clean_bound(timeline: Timeline) -> str | None:
    cleans = timeline.completed(Action.CLEAN)
    if not cleans:
        return None
    return deserialize_plan("HoodieCleanMetadata", timeline.read_content(cleans[-1]))["earliestCommitToRetain"] or None


def _replace_bound(storage: Storage, timeline: Timeline) -> str | None:
    for commit in timeline.completed(Action.REPLACE_COMMIT):
        replaced = ReplaceCommitMetadata.from_json(timeline.read_content(commit)).partition_to_replace_file_ids
        if any(_file_ids_in(storage, partition) & set(ids) for partition, ids in replaced.items()):
            return commit.timestamp
    return None


def _file_ids_in(storage: Storage, partition: str) -> set[str]:
    names = (e.name for e in storage.list_dir(partition) if not e.is_dir)
    parsed = (BaseFileName.parse(n) or LogFileName.parse(n) for n in names)
    return {p.file_id for p in parsed if p is not None}


def _latest_writes_with(timeline: Timeline, prefix: str) -> str | None:
    """The earliest of the latest writes that have each key named by `prefix`."""
    seen: set[str] = set()
    earliest = None
    for write in reversed(timeline.completed_writes()):
        keys = {
            k
            for k in CommitMetadata.from_json(timeline.read_content(write)).extra_metadata
            if k == prefix or k.startswith(f"{prefix}.")
        }
        if not keys <= seen:
            seen |= keys
            earliest = write.timestamp
    return earliest


# -- writing the archive -------------------------------------------------------------------------


def _archive_dir(table: MorTable) -> str:
    return f"{METADATA_DIR}/{table.config.archivelog_folder}"


def _archive_files(storage: Storage, archive_dir: str) -> list[tuple[int, str]]:
    """(version, path) of the archive log files, oldest first."""
    found = []
    for entry in storage.list_dir(archive_dir):
        m = _ARCHIVE_FILE.fullmatch(entry.name)
        if m and not entry.is_dir:
            found.append((int(m["version"]), entry.path))
    return sorted(found)


def _write_archive_file(table: MorTable, timeline: Timeline, state_files: list[Instant]) -> str:
    archive_dir = _archive_dir(table)
    version = 1 + max((v for v, _ in _archive_files(table.storage, archive_dir)), default=0)
    path = f"{archive_dir}/.{ARCHIVE_FILE_ID}_.archive.{version}_{ARCHIVE_WRITE_TOKEN}"
    entry_schema = schema(ENTRY_SCHEMA)
    entries = [_entry(timeline, f) for f in state_files]
    records = pa.Table.from_pylist(entries, schema=arrow_schema_from_avro(entry_schema))
    header = {HeaderKey.SCHEMA: json.dumps(entry_schema)}
    write_log_file(table.storage, path, [DataBlock(records, header, BlockType.AVRO_DATA)])
    return path


def _entry(timeline: Timeline, state_file: Instant) -> dict[str, Any]:
    """The HoodieArchivedMetaEntry of one state file."""
    return {
        "commitTime": state_file.timestamp,
        "actionType": str(state_file.action),
        "actionState": state_file.state.name,
        "version": 1,
        **_archived_metadata(timeline, state_file),
    }


def _archived_metadata(timeline: Timeline, state_file: Instant) -> dict[str, Any]:
    """The entry field holding what the file held, as MetadataConversionUtils fills it."""
    action, state = state_file.action, state_file.state
    if action is Action.COMPACTION:  # its inflight file is empty: the plan is the requested one
        plan = timeline.read_content(state_file.requested())
        return {"hoodieCompactionPlan": deserialize_plan("HoodieCompactionPlan", plan)}
    content = timeline.read_content(state_file)
    if not content:  # a requested write, an empty inflight one
        return {}
    if action in (Action.COMMIT, Action.DELTA_COMMIT):
        return {"hoodieCommitMetadata": _commit_record(content)}
    if action is Action.CLEAN and state is State.COMPLETED:
        return {"hoodieCleanMetadata": deserialize_plan("HoodieCleanMetadata", content)}
    if action is Action.CLEAN:
        return {"hoodieCleanerPlan": deserialize_plan("HoodieCleanerPlan", content)}
    if action is Action.ROLLBACK and state is State.COMPLETED:
        return {"hoodieRollbackMetadata": deserialize_plan("HoodieRollbackMetadata", content)}
    if action is Action.ROLLBACK:  # Hudi 0.14/0.15 entries have no field for a rollback plan
        return {}
    if state is State.COMPLETED:
        return {"hoodieReplaceCommitMetadata": _commit_record(content)}
    if state is State.INFLIGHT:
        return {"HoodieInflightReplaceMetadata": _commit_record(content)}
    return {"hoodieRequestedReplaceMetadata": deserialize_plan("HoodieRequestedReplaceMetadata", content)}


def _commit_record(content: bytes) -> dict[str, Any]:
    """Commit metadata JSON as the Avro record Hudi archives (fields taken by name)."""
    record = json.loads(content)
    record["extraMetadata"] = {**(record.get("extraMetadata") or {}), ROLLING_STATS_KEY: ""}
    record["version"] = 1
    if record.get("compacted"):
        record["operationType"] = "COMPACT"
    return record


# -- reading it back -----------------------------------------------------------------------------


def read_archived_instants(table: MorTable) -> list[Instant]:
    """The archived instants, oldest first, one per (instant time, action) at its latest state;
    entries of actions this project does not know (savepoint, indexing) are left out."""
    known = {str(a) for a in Action}
    instants = []
    for _, path in _archive_files(table.storage, _archive_dir(table)):
        for block in read_log_file(table.storage, path):
            if not isinstance(block, DataBlock):
                continue
            for r in block.records.select(["commitTime", "actionType", "actionState"]).to_pylist():
                if r["actionType"] in known:
                    instants.append(Instant(r["commitTime"], r["actionType"], r["actionState"].lower()))
    return Timeline(table.storage, instants).instants  # a timeline keeps each instant's latest state
