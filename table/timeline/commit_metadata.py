"""Commit metadata: the JSON of completed commit, deltacommit and replacecommit instants.

Hudi 0.14/0.15 serialise HoodieCommitMetadata / HoodieReplaceCommitMetadata with Jackson's
default pretty printer (`"key" : value`, two-space indent, `[ a, b ]` arrays, `{ }` when empty)
and every HoodieWriteStat field, nulls included; a write to a log file is a HoodieDeltaWriteStat
with logVersion, logOffset, baseFile, logFiles and recordsStats after them. We write the same
layout and read both ours and Hudi's, keeping keys we do not know.

What readers take from here: Hudi and hudi-rs read the table schema from the latest completed
write's `extraMetadata["schema"]`, so every completed write carries it; extraMetadata values
are strings (hudi-rs maps it to string -> string), so structured values such as our streaming
checkpoint go in as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from table.errors import UnsupportedTypeError
from table.jackson import Laid, jackson_dumps, jackson_object, jackson_values, laid_object

SCHEMA_KEY = "schema"


# -- models --------------------------------------------------------------------------------------


@dataclass
class RuntimeStats:
    """Milliseconds spent by the write handle (HoodieWriteStat.RuntimeStats)."""

    total_scan_time: int = 0
    total_upsert_time: int = 0
    total_create_time: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "totalScanTime": self.total_scan_time,
            "totalUpsertTime": self.total_upsert_time,
            "totalCreateTime": self.total_create_time,
        }

    @classmethod
    def from_dict(cls, d: dict[str, int]) -> RuntimeStats:
        return cls(d.get("totalScanTime", 0), d.get("totalUpsertTime", 0), d.get("totalCreateTime", 0))


# (attribute, JSON key) in Hudi's field order
_STAT_FIELDS = (
    ("file_id", "fileId"),
    ("path", "path"),
    ("cdc_stats", "cdcStats"),
    ("prev_commit", "prevCommit"),
    ("num_writes", "numWrites"),
    ("num_deletes", "numDeletes"),
    ("num_update_writes", "numUpdateWrites"),
    ("num_inserts", "numInserts"),
    ("total_write_bytes", "totalWriteBytes"),
    ("total_write_errors", "totalWriteErrors"),
    ("temp_path", "tempPath"),
    ("partition_path", "partitionPath"),
    ("total_log_records", "totalLogRecords"),
    ("total_log_files_compacted", "totalLogFilesCompacted"),
    ("total_log_size_compacted", "totalLogSizeCompacted"),
    ("total_updated_records_compacted", "totalUpdatedRecordsCompacted"),
    ("total_log_blocks", "totalLogBlocks"),
    ("total_corrupt_log_block", "totalCorruptLogBlock"),
    ("total_rollback_blocks", "totalRollbackBlocks"),
    ("file_size_in_bytes", "fileSizeInBytes"),
    ("min_event_time", "minEventTime"),
    ("max_event_time", "maxEventTime"),
    ("runtime_stats", "runtimeStats"),
)
_DELTA_FIELDS = (
    ("log_version", "logVersion"),
    ("log_offset", "logOffset"),
    ("base_file", "baseFile"),
    ("log_files", "logFiles"),
    ("records_stats", "recordsStats"),
)
_ATTRIBUTE_OF_KEY = {key: attr for attr, key in _STAT_FIELDS + _DELTA_FIELDS}
_STAT_ATTRIBUTES = tuple(attr for attr, _ in _STAT_FIELDS)
_STAT_KEYS = tuple(key for _, key in _STAT_FIELDS)
#: A delta stat's keys in order, the order of WriteStat's fields too.
_DELTA_STAT_KEYS = _STAT_KEYS + tuple(key for _, key in _DELTA_FIELDS)
_NO_RECORDS_STATS = {"val": None}  # how Jackson writes an empty Hudi Option
_RUNTIME_STATS_AT = _STAT_KEYS.index("runtimeStats")
#: The level a write stat is laid out at: in partitionToWriteStats' lists.
_STAT_LEVEL = 2


@dataclass
class WriteStat:
    """What one write handle wrote into one file group (HoodieWriteStat / HoodieDeltaWriteStat).

    `path` is relative to the table base. A log file write sets `log_version` (which makes it a
    delta stat), `log_files` and `base_file`: the slice's base file name, '' when it has none.
    `prev_commit` is the base instant of the slice written to, the string "null" for a new one.
    """

    file_id: str = ""
    path: str | None = None
    cdc_stats: dict[str, int] | None = None
    prev_commit: str = "null"
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    temp_path: str | None = None
    partition_path: str | None = None
    total_log_records: int = 0
    total_log_files_compacted: int = 0
    total_log_size_compacted: int = 0
    total_updated_records_compacted: int = 0
    total_log_blocks: int = 0
    total_corrupt_log_block: int = 0
    total_rollback_blocks: int = 0
    file_size_in_bytes: int = 0
    min_event_time: int | None = None
    max_event_time: int | None = None
    runtime_stats: RuntimeStats | None = None
    log_version: int | None = None
    log_offset: int | None = None
    base_file: str | None = None
    log_files: list[str] | None = None
    records_stats: Any = None  # Hudi's Option of column ranges; None is Option.empty()
    extra: dict[str, Any] = field(default_factory=dict)  # keys this class does not know
    #: The stat as its writer laid it out for the commit file (`laid_out`), when it came that way.
    _laid: Laid | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def is_delta(self) -> bool:
        return self.log_version is not None

    def laid_out(self) -> Laid:
        """This stat as it stands in a commit file: what a write task renders and sends the
        driver (`from_laid_out`), so that a commit of thousands of stats is not rendered by the
        driver alone."""
        return self.to_jackson(_STAT_LEVEL)

    def sent(self) -> tuple[Laid, str | None]:
        """What a write task sends the driver: this stat `laid_out`, and its values in that order
        as one JSON array, which the driver parses instead of the text (`from_laid_out`): a third
        of the bytes, without a key before every value. No array for a stat with keys of its own
        (`extra`)."""
        if self.extra:
            return self.laid_out(), None
        laid = jackson_values(self._values(), _STAT_LEVEL)
        keys = _DELTA_STAT_KEYS if self.is_delta else _STAT_KEYS
        return laid_object(keys, laid, _STAT_LEVEL), "[" + ",".join(laid) + "]"

    @classmethod
    def from_laid_out(cls, texts: list[str], values: list[str | None] | None = None) -> list[WriteStat]:
        """Stats from their `laid_out` texts, each keeping its text for the commit file: parsed in
        one go, from the arrays of their values where given (`sent`), else from the texts. A stat
        is the report of the file its writer wrote, not changed after."""
        sent = values or [None] * len(texts)
        parsed = json.loads("[" + ",".join(t if v is None else v for t, v in zip(texts, sent)) + "]")
        stats = [cls.from_dict(p) if v is None else cls._from_values(p) for p, v in zip(parsed, sent)]
        for stat, text in zip(stats, texts):
            stat._laid = Laid(text)
        return stats

    def to_jackson(self, level: int) -> Laid:
        """This stat laid out as Jackson writes it at `level`, equal to `jackson_dumps` of `to_dict`
        there, without the dict."""
        if self._laid is not None and level == _STAT_LEVEL:
            return self._laid
        if self.extra:
            d = self.to_dict()
            return jackson_object(tuple(d), list(d.values()), level)
        return jackson_object(_DELTA_STAT_KEYS if self.is_delta else _STAT_KEYS, self._values(), level)

    def _values(self) -> list[Any]:
        """The values of `_STAT_KEYS` (and of `_DELTA_STAT_KEYS` for a delta stat), as laid out."""
        values = [getattr(self, attr) for attr in _STAT_ATTRIBUTES]
        if self.runtime_stats is not None:
            values[_RUNTIME_STATS_AT] = self.runtime_stats.to_dict()
        if self.is_delta:
            values += [self.log_version, self.log_offset, self.base_file, list(self.log_files or [])]
            values.append(self.records_stats if self.records_stats is not None else dict(_NO_RECORDS_STATS))
        return values

    def to_dict(self) -> dict[str, Any]:
        fields = _STAT_FIELDS + (_DELTA_FIELDS if self.is_delta else ())
        d = {key: getattr(self, attr) for attr, key in fields}
        if self.runtime_stats is not None:
            d["runtimeStats"] = self.runtime_stats.to_dict()
        if self.is_delta:
            d["logFiles"] = list(self.log_files or [])
            d["recordsStats"] = self.records_stats if self.records_stats is not None else dict(_NO_RECORDS_STATS)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WriteStat:
        keys = tuple(d)
        if keys in (_DELTA_STAT_KEYS, _STAT_KEYS):  # as Hudi and we lay stats out: by position
            return cls._from_values(list(d.values()))
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in d.items():
            attribute = _ATTRIBUTE_OF_KEY.get(key)
            if attribute is None:
                extra[key] = value
            else:
                values[attribute] = value
        if values.get("runtime_stats") is not None:
            values["runtime_stats"] = RuntimeStats.from_dict(values["runtime_stats"])
        if values.get("records_stats") == _NO_RECORDS_STATS:
            values["records_stats"] = None
        return cls(**values, extra=extra)

    @classmethod
    def _from_values(cls, values: list[Any]) -> WriteStat:
        """A stat from the values of `_STAT_KEYS` or `_DELTA_STAT_KEYS`, in their order."""
        stat = cls(*values)
        if values[_RUNTIME_STATS_AT] is not None:
            stat.runtime_stats = RuntimeStats.from_dict(values[_RUNTIME_STATS_AT])
        if stat.records_stats == _NO_RECORDS_STATS:
            stat.records_stats = None
        return stat


@dataclass
class CommitMetadata:
    """HoodieCommitMetadata: write stats per partition path, extra metadata, operation type.

    `operation_type` is Hudi's WriteOperationType name (UPSERT, DELETE, COMPACT, CLUSTER, ...).
    """

    partition_to_write_stats: dict[str, list[WriteStat]] = field(default_factory=dict)
    compacted: bool = False
    extra_metadata: dict[str, str] = field(default_factory=dict)
    operation_type: str = "UNKNOWN"
    extra: dict[str, Any] = field(default_factory=dict)  # keys this class does not know

    _KNOWN: ClassVar[tuple[str, ...]] = (
        "partitionToWriteStats",
        "compacted",
        "extraMetadata",
        "operationType",
    )

    @classmethod
    def for_write(
        cls,
        stats: Iterable[WriteStat],
        extra_metadata: dict[str, str],
        operation_type: str,
        compacted: bool = False,
    ) -> Self:
        """Metadata of a write, its stats grouped by their partition path; `compacted` marks a
        compaction's commit, as Hudi's HoodieCommitMetadata(true)."""
        by_partition: dict[str, list[WriteStat]] = {}
        for stat in stats:
            by_partition.setdefault(stat.partition_path or "", []).append(stat)
        return cls(by_partition, compacted, dict(extra_metadata), operation_type)

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    @property
    def schema(self) -> str | None:
        """The Avro schema (JSON text) of the data as of this commit."""
        return self.extra_metadata.get(SCHEMA_KEY)

    def to_dict(self) -> dict[str, Any]:
        return self._document(WriteStat.to_dict)

    def to_json(self) -> str:
        """The JSON Hudi writes; each write stat laid out without a dict of it (a commit may hold
        thousands)."""
        return jackson_dumps(self._document(lambda stat: stat.to_jackson(_STAT_LEVEL)))

    def _document(self, stat: Callable[[WriteStat], Any]) -> dict[str, Any]:
        bad = [k for k, v in self.extra_metadata.items() if not isinstance(v, str)]
        if bad:
            raise UnsupportedTypeError(f"extraMetadata values must be strings: {bad}")
        return {
            "partitionToWriteStats": {
                p: [stat(s) for s in stats] for p, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
            **self._own_fields(),
            **self.extra,
        }

    def _own_fields(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return cls(
            partition_to_write_stats={
                p: [WriteStat.from_dict(s) for s in stats or []]
                for p, stats in (d.get("partitionToWriteStats") or {}).items()
            },
            compacted=bool(d.get("compacted")),
            extra_metadata=dict(d.get("extraMetadata") or {}),
            operation_type=d.get("operationType") or "UNKNOWN",
            extra={k: v for k, v in d.items() if k not in cls._KNOWN},
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Parse instant content; an empty file (a requested write) is empty metadata, as in Hudi."""
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return cls.from_dict(json.loads(text)) if text.strip() else cls()


@dataclass
class ReplaceCommitMetadata(CommitMetadata):
    """HoodieReplaceCommitMetadata: also the file groups the replacecommit retires, per partition."""

    partition_to_replace_file_ids: dict[str, list[str]] = field(default_factory=dict)

    _KNOWN: ClassVar[tuple[str, ...]] = (*CommitMetadata._KNOWN, "partitionToReplaceFileIds")

    def _own_fields(self) -> dict[str, Any]:
        return {"partitionToReplaceFileIds": {p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        base = CommitMetadata.from_dict(d)
        return cls(
            base.partition_to_write_stats,
            base.compacted,
            base.extra_metadata,
            base.operation_type,
            {k: v for k, v in base.extra.items() if k not in cls._KNOWN},
            partition_to_replace_file_ids={
                p: list(ids or []) for p, ids in (d.get("partitionToReplaceFileIds") or {}).items()
            },
        )
