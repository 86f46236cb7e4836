"""Our table engine as a library, without Kafka or streaming: what the sink's write costs alone.

Two writers over the same table format: the pure-Python writer (`TableWriter.upsert`, one
process, Arrow in and files out) and the distributed one the streaming sink calls
(`table.spark.write.upsert_dataframe` in local[2]), fed from an Arrow table in the driver.
"""

from __future__ import annotations

from bench.measure import PathResult
from bench.peers import PeerInput, run_batches
from bench.workload import TABLE_SCHEMA, WorkloadFiles
from table import MorTable, TableSpec, WriteOptions

INITIAL_BUCKETS = 4  # as the streaming path's index.initial_buckets


def _table(path) -> MorTable:
    return MorTable.create(str(path), TableSpec("orders", TABLE_SCHEMA, ("order_id",), "updated_at", ("region",)))


def _rows(table: MorTable) -> int:
    return table.snapshot(columns=["order_id"]).num_rows


def python_writer(peer: PeerInput) -> PathResult:
    table = _table(peer.table)
    with table.writer(WriteOptions(initial_buckets=INITIAL_BUCKETS, delete_field="is_deleted")) as writer:
        return run_batches(
            "mor-python",
            "mor library: python writer",
            WorkloadFiles(peer.workload),
            writer.upsert,
            writer.upsert,
            lambda: _rows(table),
        )


def spark_writer(peer: PeerInput) -> PathResult:
    from bench.spark import session
    from table.spark import upsert_dataframe

    spark = session()
    table = _table(peer.table)
    with table.writer(WriteOptions(initial_buckets=INITIAL_BUCKETS, delete_field="is_deleted")) as writer:

        def upsert(batch):
            upsert_dataframe(writer, spark.createDataFrame(batch))

        return run_batches(
            "mor-spark",
            "mor library: spark upsert_dataframe",
            WorkloadFiles(peer.workload),
            upsert,
            upsert,
            lambda: _rows(table),
        )
