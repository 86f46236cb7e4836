"""Peer: delta-rs (`deltalake`) MERGE of each batch into a Delta table partitioned by region.

The merge is what a delta-rs user writes for CDC: match on the key (and the region, so that
only the batch's partitions are scanned), delete when the event says so, update when the event
is newer, insert what is new and not a delete. Each merge rewrites the data files it touches
(copy-on-write), so its latency includes what a merge-on-read table defers to compaction.
"""

from __future__ import annotations

from deltalake import DeltaTable, write_deltalake

from bench.measure import PathResult
from bench.peers import PeerInput, run_batches
from bench.workload import WorkloadFiles


def merge(peer: PeerInput) -> PathResult:
    path = str(peer.table)
    opened: list[DeltaTable] = []

    def load(table):
        write_deltalake(path, table.drop_columns(["is_deleted"]), partition_by=["region"])
        opened.append(DeltaTable(path))

    def upsert(batch):
        (
            opened[0]
            .merge(batch, "t.order_id = s.order_id AND t.region = s.region", source_alias="s", target_alias="t")
            .when_matched_delete("s.is_deleted")
            .when_matched_update_all("s.updated_at > t.updated_at", except_cols=["is_deleted"])
            .when_not_matched_insert_all("NOT s.is_deleted", except_cols=["is_deleted"])
            .execute()
        )

    return run_batches(
        "delta-merge",
        "delta-rs merge",
        WorkloadFiles(peer.workload),
        load,
        upsert,
        lambda: DeltaTable(path).to_pyarrow_dataset().count_rows(),
    )
