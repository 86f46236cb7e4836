"""Names and paths of a Hudi table's files, as Hudi 0.14/0.15 (table version 6) lays them out.

Every other module builds file names and `.hoodie` paths through here, so that what we write
parses in Hudi (FSUtils) and hudi-rs (BaseFile / LogFile), and what they write parses here:

- base file  `<fileId>_<writeToken>_<instant>.parquet`
- log file   `.<fileId>_<baseInstant>.log.<version>_<writeToken>`
- write token `<taskPartitionId>-<stageId>-<taskAttemptId>` (FSUtils.makeWriteToken)
- `.hoodie_partition_metadata` in every partition directory: how Hudi (without a metadata
  table) recognises a partition.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from table.errors import FormatError, InvalidRequestError
from table.storage.file_io import Storage

METADATA_DIR = ".hoodie"
#: Files of the table that are not Hudi's: leases, the streaming checkpoint, the last error.
AUX_DIR = f"{METADATA_DIR}/.aux"
#: Marker files of the instants in flight (`table.storage.markers`).
TEMP_DIR = f"{METADATA_DIR}/.temp"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
BASE_FILE_EXTENSION = ".parquet"
LOG_FILE_EXTENSION = ".log"
#: What every log file name holds (`.<fileId>_<baseInstant>.log.<version>_<writeToken>`).
LOG_FILE_MARK = f"{LOG_FILE_EXTENSION}."
# Where the consistent-hashing bucket index keeps its `<instant>.hashing_meta` files, one
# directory per partition (RFC-42).
HASHING_METADATA_DIR = f"{METADATA_DIR}/.bucket_index/consistent_hashing_metadata"

_FILE_ID = r"[^_/]+"  # names are split on '_', so a file id never holds one
_INSTANT = r"\d{17}|\d{14}"  # yyyyMMddHHmmssSSS, or the second-precision form of old tables
_WRITE_TOKEN = r"\d+-\d+-\d+"
_BASE_FILE_RE = re.compile(
    rf"(?P<file_id>{_FILE_ID})_(?P<write_token>{_WRITE_TOKEN})_(?P<instant>{_INSTANT})" + re.escape(BASE_FILE_EXTENSION)
)
_LOG_FILE_RE = re.compile(
    rf"\.(?P<file_id>{_FILE_ID})_(?P<base_instant>{_INSTANT})"
    + re.escape(LOG_FILE_EXTENSION)
    + rf"\.(?P<version>\d+)_(?P<write_token>{_WRITE_TOKEN})"
)

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


_PART_RES = {pattern: re.compile(pattern) for pattern in (_FILE_ID, _INSTANT, _WRITE_TOKEN)}


def _check(pattern: str, value: str, what: str) -> None:
    if not _PART_RES[pattern].fullmatch(value):
        raise FormatError(f"invalid {what}: {value!r}")


_Name = TypeVar("_Name", "BaseFileName", "LogFileName")


@dataclass(frozen=True)
class BaseFileName:
    """A base (parquet) file name; `instant` is the commit that wrote the file."""

    file_id: str
    write_token: str
    instant: str

    def __post_init__(self) -> None:
        _check(_FILE_ID, self.file_id, "file id")
        _check(_WRITE_TOKEN, self.write_token, "write token")
        _check(_INSTANT, self.instant, "instant time")

    def format(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}{BASE_FILE_EXTENSION}"

    @classmethod
    def parse(cls, name: str) -> BaseFileName | None:
        """The parts of a base file name; None for any other name."""
        m = _BASE_FILE_RE.fullmatch(name)
        return _matched(cls, m.groupdict()) if m else None

    @classmethod
    def of(cls, name: str) -> BaseFileName:
        """The parts of a name that must be a base file's (a plan or commit names it as one)."""
        parsed = cls.parse(name)
        if parsed is None:
            raise FormatError(f"not a base file name: {name!r}")
        return parsed


@dataclass(frozen=True)
class LogFileName:
    """A log file name; `base_instant` names the file slice the log belongs to."""

    file_id: str
    base_instant: str
    version: int
    write_token: str

    def __post_init__(self) -> None:
        _check(_FILE_ID, self.file_id, "file id")
        _check(_INSTANT, self.base_instant, "base instant time")
        _check(_WRITE_TOKEN, self.write_token, "write token")
        if self.version < 1:  # Hudi's first log version is 1 (HoodieLogFile.LOGFILE_BASE_VERSION)
            raise FormatError(f"invalid log version: {self.version}")

    def format(self) -> str:
        return f".{self.file_id}_{self.base_instant}{LOG_FILE_EXTENSION}.{self.version}_{self.write_token}"

    @classmethod
    def parse(cls, name: str) -> LogFileName | None:
        """The parts of a log file name; None for any other name (CDC logs included)."""
        m = _LOG_FILE_RE.fullmatch(name)
        if not m:
            return None
        parts: dict[str, Any] = m.groupdict()
        parts["version"] = int(parts["version"])
        return _matched(cls, parts) if parts["version"] >= 1 else None

    @classmethod
    def of(cls, name: str) -> LogFileName:
        """The parts of a name that must be a log file's (a plan or commit names it as one)."""
        parsed = cls.parse(name)
        if parsed is None:
            raise FormatError(f"not a log file name: {name!r}")
        return parsed


def _matched(cls: type[_Name], parts: dict[str, Any]) -> _Name:
    """A name made of the parts its pattern matched, so not checked again: a view parses the
    name of every file it lists or is told of."""
    name = object.__new__(cls)
    name.__dict__.update(parts)
    return name


def write_token(partition_id: int, stage_id: int, attempt_id: int) -> str:
    """The token that tells apart attempts at writing the same file (Spark task identity)."""
    if min(partition_id, stage_id, attempt_id) < 0:
        raise InvalidRequestError("write token parts must not be negative")
    return f"{partition_id}-{stage_id}-{attempt_id}"


def new_file_id_prefix() -> str:
    """A fresh file id prefix (a UUID); the index appends the `-<n>` suffix."""
    return str(uuid.uuid4())


def partition_file_path(partition_path: str, file_name: str) -> str:
    """Path of a file in a partition, relative to the table base ('' is the table root)."""
    return f"{partition_path}/{file_name}" if partition_path else file_name


def instant_file_path(file_name: str) -> str:
    """Path of a timeline file (`<ts>.<action>[.<state>]`) in the active timeline."""
    return f"{METADATA_DIR}/{file_name}"


def java_date(moment: datetime) -> str:
    """`java.util.Date.toString()` in UTC, the second comment line java.util.Properties writes."""
    t = moment.astimezone(UTC)
    return (
        f"{_DAYS[t.weekday()]} {_MONTHS[t.month - 1]} {t.day:02d} "
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} UTC {t.year}"
    )


def partition_depth(partition_path: str) -> int:
    """Directory levels between the table base and the partition (0 for a non-partitioned table)."""
    return len([p for p in partition_path.split("/") if p])


def _partition_metadata_text(commit_time: str, depth: int, now: datetime | None = None) -> str:
    """`.hoodie_partition_metadata` as HoodiePartitionMetadata writes it (java.util.Properties)."""
    now = now or datetime.now(UTC)
    return f"#partition metadata\n#{java_date(now)}\ncommitTime={commit_time}\npartitionDepth={depth}\n"


def write_partition_metadata(
    storage: Storage, partition_path: str, commit_time: str, now: datetime | None = None
) -> bool:
    """Mark a directory as a partition, once: the file appears whole and is never replaced.

    `commit_time` is the instant of the first write into the partition. Returns whether this
    call created the file (False when it already existed, possibly written concurrently).
    """
    path = partition_file_path(partition_path, PARTITION_METADATA_FILE)
    if storage.exists(path):
        return False
    text = _partition_metadata_text(commit_time, partition_depth(partition_path), now)
    try:
        storage.create(path, text.encode("ascii"))
    except FileExistsError:
        return False
    return True
