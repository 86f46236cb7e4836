"""What a reader returns, held against the rows a table must hold: hudi-rs's queries, rows
projected on columns, and a short account of what differs."""

from __future__ import annotations

from pathlib import Path

import hudi
import pyarrow as pa

from tests.support.orders import by_key

META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]


def project(record: dict, columns: list[str]) -> dict:
    return {c: record.get(c) for c in columns}


def hudi_rs(path: Path, query: str, incremental: tuple[str, str] | None = None, as_of: str | None = None) -> pa.Table:
    """A query of hudi-rs: snapshot, read_optimized, incremental (between the two instants of
    `incremental`) or time_travel (as of `as_of`)."""
    table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    options = hudi.HudiReadOptions()
    if query == "read_optimized":
        options = options.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    elif query == "incremental":
        options = (
            options.with_query_type(hudi.HudiQueryType.Incremental)
            .with_start_timestamp(incremental[0])
            .with_end_timestamp(incremental[1])
        )
    elif query == "time_travel":
        options = options.with_as_of_timestamp(as_of)
    batches = table.read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({"order_id": pa.array([], pa.string())})


def difference(actual: pa.Table, expected: dict, columns: list[str]) -> str:
    """'' when `actual` holds exactly the expected rows (by key, in these columns), else what differs."""
    keys = actual.column("order_id").to_pylist() if actual.num_rows else []
    if len(keys) != len(set(keys)):
        return f"{len(keys) - len(set(keys))} key(s) read twice"
    got = {k: project(r, columns) for k, r in by_key(actual).items()}
    missing, extra = sorted(expected.keys() - got.keys()), sorted(got.keys() - expected.keys())
    changed = sorted(k for k in expected.keys() & got.keys() if got[k] != expected[k])
    if not (missing or extra or changed):
        return ""
    example = changed[0] if changed else None
    detail = f"; {example}: {got[example]} != {expected[example]}" if example else ""
    return f"{len(missing)} missing, {len(extra)} extra, {len(changed)} differ of {len(expected)}{detail}"
