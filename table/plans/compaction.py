"""Compaction plans on the timeline: the file slices a pending compaction folds into base files.

`<c>.compaction.requested` holds Hudi's HoodieCompactionPlan, one HoodieCompactionOperation per
file slice. Readers of this module: writers (a write to a planned group starts its slice at c),
clustering and cleaning (leave planned groups alone), the executor, and `streamer table`."""

from __future__ import annotations

from dataclasses import dataclass

from table.file_group.fs_view import FileSlice
from table.storage.file_io import Storage
from table.timeline.instant_avro import deserialize_plan
from table.timeline.timeline import Instant, Timeline

PLAN_SCHEMA = "HoodieCompactionPlan"
PLAN_VERSION = 2  # CompactionUtils.LATEST_COMPACTION_METADATA_VERSION
COMPACTION = "compaction"


@dataclass(frozen=True)
class CompactionOperation:
    """One planned file slice (HoodieCompactionOperation); files by name, as Hudi stores them."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: str | None
    log_files: tuple[str, ...]

    @classmethod
    def of_slice(cls, file_slice: FileSlice) -> CompactionOperation:
        return cls(
            partition_path=file_slice.partition_path,
            file_id=file_slice.file_id,
            base_instant=file_slice.base_instant,
            base_file=file_slice.base_file.name.format() if file_slice.base_file else None,
            log_files=tuple(f.name.format() for f in file_slice.sorted_log_files()),
        )

    def file_slice(self, storage: Storage) -> FileSlice:
        """The slice as planned: exactly these files, whatever was written to the group since."""
        return FileSlice.of_files(
            storage, self.partition_path, self.file_id, self.base_instant, self.base_file, self.log_files
        )


def read_compaction_plan(timeline: Timeline, instant: str) -> tuple[list[CompactionOperation], dict[str, str]]:
    """The operations and extraMetadata of the plan requested at `instant`."""
    plan = deserialize_plan(PLAN_SCHEMA, timeline.read_content(Instant(instant, COMPACTION, "requested")))
    operations = [
        CompactionOperation(
            partition_path=op["partitionPath"] or "",
            file_id=op["fileId"],
            base_instant=op["baseInstantTime"],
            base_file=op["dataFilePath"],
            log_files=tuple(op["deltaFilePaths"] or ()),
        )
        for op in plan["operations"] or ()
    ]
    return operations, dict(plan["extraMetadata"] or {})
