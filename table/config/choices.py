"""The engine's named choices, each a `StrEnum` defined once.

The engine's settings (`WriteOptions`, `CompactionStrategy`, `CleanPolicy`, `ClusteringPolicy`)
hold them; the streamer's config and command line take them by value, so a YAML value or a flag
is a member's value, and a member compares equal to its value.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from table.errors import InvalidRequestError


class Choice(StrEnum):
    """A choice whose value is the name users write."""

    @classmethod
    def parse(cls, value: str, what: str) -> Self:
        """The member of `value`; an InvalidRequestError (a ValueError) naming `what` and the
        choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise InvalidRequestError(
                f"unknown {what} {value!r}; expected one of {tuple(c.value for c in cls)}"
            ) from None


class LogBlockFormat(Choice):
    """The format of data blocks in log files. `auto` writes a block of `PARQUET_BLOCK_ROWS`
    records or more as Parquet, a smaller one as Avro: a Parquet file costs about 0.2 ms to make
    whatever it holds, which a batch spread over thousands of file groups pays per group, while
    the Avro blocks of a write are encoded together, a column at a time over all their records."""

    AUTO = "auto"
    PARQUET = "parquet"
    AVRO = "avro"

    def for_block(self, records: int) -> LogBlockFormat:
        """The format a data block of `records` records is written in."""
        if self is not LogBlockFormat.AUTO:
            return self
        return LogBlockFormat.PARQUET if records >= PARQUET_BLOCK_ROWS else LogBlockFormat.AVRO


#: With `LogBlockFormat.AUTO`, the records from which a data block is Parquet: about where writing
#: it as Avro (our encoder's cost per record) costs more than a Parquet file's making.
PARQUET_BLOCK_ROWS = 512


class CompactionStrategyKind(Choice):
    """Which latest file slices a compaction plan takes (see `CompactionStrategy`)."""

    LOG_FILE_COUNT = "log_file_count"
    LOG_FILE_SIZE = "log_file_size"
    BOUNDED_IO = "bounded_io"
    RECENT_PARTITIONS = "recent_partitions"


class CleanPolicyKind(Choice):
    """Which file slices a clean keeps (see `CleanPolicy`)."""

    KEEP_LATEST_COMMITS = "keep_latest_commits"
    KEEP_LATEST_FILE_VERSIONS = "keep_latest_file_versions"

    @property
    def hudi_name(self) -> str:
        """Hudi's HoodieCleaningPolicy name, which clean plans and metadata carry."""
        return self.name


class SplitPoint(Choice):
    """Where a bucket split cuts the bucket's hash range (see `ClusteringPolicy`)."""

    MIDDLE = "middle"
    DISTRIBUTION = "distribution"


class Concurrency(Choice):
    """How writers share a table, by Hudi's names (`hoodie.write.concurrency.mode`).
    `single_writer`: one writer holds the table's lease, and any deltacommit pending when it
    starts is a crashed writer's, rolled back. `optimistic_concurrency_control`: several writers,
    each commit checked under the table's commit lock against what completed since it began
    (`table.write.concurrency`)."""

    SINGLE_WRITER = "single_writer"
    OPTIMISTIC = "optimistic_concurrency_control"
