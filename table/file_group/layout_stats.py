"""What a snapshot read costs and how even the buckets are, from the latest file slices.

A writer lists the partitions it routes to when it begins a deltacommit; `LayoutStats` keeps
what that listing says of each bucket's latest slice (its log files, their bytes, its size),
and `with_writes` adds the commit's own files from its write stats. So the compaction debt and
the bucket skew after every commit cost no listing of their own.

Only the file groups readers see count: the ring's buckets, not the children a pending resize
dual-writes to, and a pending compaction's logs count with the slice readers merge them into.

`after_each_deltacommit` rebuilds the same from a table's history, for benchmarks and tests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from table.file_group.fs_view import FileSlice
from table.timeline.commit_metadata import CommitMetadata, WriteStat

if TYPE_CHECKING:
    from table.mor_table import MorTable


@dataclass(frozen=True)
class SliceSize:
    """One bucket's latest file slice."""

    log_files: int
    log_bytes: int
    total_bytes: int  # base file and log files


@dataclass(frozen=True)
class LayoutStats:
    """The latest slice of every bucket readers see: partition path -> file id -> its size."""

    partitions: dict[str, dict[str, SliceSize]]

    @classmethod
    def of_slices(cls, buckets: Mapping[str, Mapping[str, FileSlice | None]]) -> LayoutStats:
        """Of the latest slice of each bucket (partition path -> the ring's file ids -> their
        latest slices, None for a group with none yet), as a writer finds them when it routes."""
        partitions: dict[str, dict[str, SliceSize]] = {}
        for partition, slices in buckets.items():
            sizes = partitions[partition] = {}
            for file_id, latest in slices.items():
                if latest is not None:
                    log_bytes = sum(f.size for f in latest.log_files)
                    base_bytes = latest.base_file.size if latest.base_file else 0
                    sizes[file_id] = SliceSize(len(latest.log_files), log_bytes, base_bytes + log_bytes)
        return cls(partitions)

    def with_writes(self, stats: list[WriteStat]) -> LayoutStats:
        """After a commit of `stats`: a log file joins its bucket's slice, a base file starts a new
        one. Files of groups readers do not see (a pending resize's children) are left out."""
        partitions = {p: dict(sizes) for p, sizes in self.partitions.items()}
        for stat in stats:
            sizes = partitions.setdefault(stat.partition_path or "", {})
            is_log = ".log." in (stat.path or "")
            known = sizes.get(stat.file_id)
            if is_log and known is not None:
                sizes[stat.file_id] = SliceSize(
                    known.log_files + 1,
                    known.log_bytes + stat.file_size_in_bytes,
                    known.total_bytes + stat.file_size_in_bytes,
                )
            elif not is_log:
                sizes[stat.file_id] = SliceSize(0, 0, stat.file_size_in_bytes)
        return LayoutStats(partitions)

    def _slices(self) -> list[SliceSize]:
        return [s for sizes in self.partitions.values() for s in sizes.values()]

    def log_files(self, quantile: float = 1.0) -> int:
        """Log files per bucket at `quantile` (1.0: the most any snapshot read merges)."""
        return _quantile([s.log_files for s in self._slices()], quantile)

    def log_bytes(self, quantile: float = 1.0) -> int:
        return _quantile([s.log_bytes for s in self._slices()], quantile)

    def buckets(self) -> dict[str, int]:
        return {p: len(sizes) for p, sizes in self.partitions.items()}

    def skew(self) -> dict[str, float]:
        """Per partition, its largest bucket's bytes over the median bucket's (1.0: even)."""
        skews = {}
        for partition, sizes in self.partitions.items():
            totals = [s.total_bytes for s in sizes.values()]
            median = statistics.median(totals) if totals else 0
            if median > 0:
                skews[partition] = max(totals) / median
        return skews


def after_each_deltacommit(table: MorTable) -> list[tuple[str, LayoutStats]]:
    """Each completed deltacommit and what a snapshot as of it read: the latest slices as of it,
    with only the log files of deltacommits completed by then. Needs the slices the cleaner
    has not removed yet (a table whose clean is off)."""
    timeline = table.timeline()
    committed_logs: set[str] = set()
    found = []
    for commit in timeline.completed("deltacommit"):
        stats = CommitMetadata.from_json(timeline.read_content(commit)).write_stats()
        committed_logs |= {s.path for s in stats if s.path is not None and ".log." in s.path}
        partitions: dict[str, dict[str, SliceSize]] = {}
        for s in table.file_system_view(as_of=commit.timestamp, timeline=timeline).latest_slices():
            logs = [f for f in s.log_files if f.path in committed_logs]
            base = s.base_file.size if s.base_file else 0
            log_bytes = sum(f.size for f in logs)
            partitions.setdefault(s.partition_path, {})[s.file_id] = SliceSize(len(logs), log_bytes, base + log_bytes)
        found.append((commit.timestamp, LayoutStats(partitions)))
    return found


def _quantile(values: list[int], quantile: float) -> int:
    """The nearest-rank quantile: the smallest value at least `quantile` of them do not exceed."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]
