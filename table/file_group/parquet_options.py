"""How base files are encoded: the Parquet options every writer of base files uses (first
writes, compaction, clustering), and how every reader reads a Parquet file or block.

Dictionary encoding goes only to columns with few distinct values. pyarrow falls back to plain
encoding once a column's dictionary passes 1 MiB, so a high-cardinality column (record keys,
sequence numbers, amounts) would cost its values plus dictionary indices in a small file and
only its values in a large one. Encoded plain from the start, such a column takes the same
bytes per row whatever the file's size: splitting or merging buckets then writes about the
bytes it reads, and bucket sizes stay proportional to their rows.

Row groups hold about `ROW_GROUP_BYTES` of data: small enough that a bucket of a few hundred
thousand rows, sorted by a clustering column, has row groups whose statistics let a selective
query skip most of it; large enough that repeating each dictionary per row group stays cheap.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.schema import COMMIT_SEQNO, COMMIT_TIME, FILE_NAME, PARTITION_PATH, RECORD_KEY
from table.units import MIB

COMPRESSION = "snappy"
#: A column is dictionary-encoded when it has at most this share of distinct values.
DICTIONARY_MAX_DISTINCT_SHARE = 0.5
#: Large enough that a dictionary-encoded column never falls back to plain mid-file.
DICTIONARY_PAGE_LIMIT_BYTES = 256 * MIB
#: Arrow bytes of data per row group; the rows per group follow from the rows' average size.
ROW_GROUP_BYTES = 4 * MIB
MIN_ROW_GROUP_ROWS = 1024
#: Files with fewer rows are not worth counting the distinct values of (`dictionary_columns`).
COUNTED_ROWS = 1024
#: Meta columns whose cardinality a base file fixes, so their values need no counting (which
#: costs about as much as writing them): one value per file or per commit, or one per record.
FEW_VALUED_META = frozenset({COMMIT_TIME, PARTITION_PATH, FILE_NAME})
UNIQUE_META = frozenset({COMMIT_SEQNO, RECORD_KEY})


def parquet_options(rows: pa.Table, row_bytes: float | None = None) -> dict[str, Any]:
    """Keyword arguments for `pyarrow.parquet.write_table` of a base file holding `rows`. A
    writer of many files may give the rows' average size (`row_bytes`), measured once for all."""
    return {
        "compression": COMPRESSION,
        "use_dictionary": dictionary_columns(rows),
        "dictionary_pagesize_limit": DICTIONARY_PAGE_LIMIT_BYTES,
        "row_group_size": row_group_rows(rows, row_bytes),
    }


def row_group_rows(rows: pa.Table, row_bytes: float | None = None) -> int:
    if rows.num_rows == 0:
        return MIN_ROW_GROUP_ROWS
    if row_bytes is None:
        row_bytes = rows.nbytes / rows.num_rows
    return max(MIN_ROW_GROUP_ROWS, int(ROW_GROUP_BYTES // max(1.0, row_bytes)))


def dictionary_columns(rows: pa.Table) -> list[str]:
    """Top-level primitive columns whose distinct values are few enough for a dictionary. A
    file of fewer than `COUNTED_ROWS` rows is not counted (a first write into hundreds of
    partitions writes hundreds of them, and counting costs about what writing them does): its
    data columns stay plain, which for so few rows takes about the bytes a dictionary would,
    and a compaction rewrites the file, counted, once it has grown."""
    limit = max(1, int(rows.num_rows * DICTIONARY_MAX_DISTINCT_SHARE))
    counted = rows.num_rows >= COUNTED_ROWS

    def few_valued(name: str) -> bool:
        if name in UNIQUE_META:
            return False
        if name in FEW_VALUED_META:
            return True
        return counted and pc.count_distinct(rows[name], mode="all").as_py() <= limit

    return [f.name for f in rows.schema if not pa.types.is_nested(f.type) and few_valued(f.name)]


#: Files smaller than this are read on the calling thread: pyarrow's thread pool costs a small
#: file more than it saves, and a table of many partitions is read as many small files.
THREADED_READ_BYTES = 8 * MIB


def read_parquet(source: pa.NativeFile | pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file (or a Parquet log block) as one table. Through `ParquetFile`, not
    `pyarrow.parquet.read_table`, whose dataset machinery costs about 1 ms a file."""
    if isinstance(source, pa.Buffer):
        size, source = source.size, pa.BufferReader(source)
    else:
        size = source.size()
    return pq.ParquetFile(source).read(columns=columns, use_threads=size >= THREADED_READ_BYTES)
