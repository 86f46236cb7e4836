"""Catalog sync: a table registered in a Hive Metastore the way Hudi's `HiveSyncTool` registers
it (`<name>_rt` and `<name>_ro`), kept in step with the table's timeline.

    from table.sync import HiveMetastoreClient, HiveSync, SyncTarget

    sync = HiveSync(table, SyncTarget("lake", "orders"),
                    connect=lambda: HiveMetastoreClient(spark._jvm, "thrift://metastore:9083"))
    result = sync.sync()      # CatalogSyncError when the metastore refuses or is down
"""

from table.sync.changes import PartitionChanges, partition_changes
from table.sync.hive_sync import HiveSync, SyncResult, SyncTarget, hive_location
from table.sync.metastore import HiveMetastoreClient
from table.sync.registration import LAST_COMMIT_TIME_SYNC, HiveTable, hive_tables

__all__ = [
    "LAST_COMMIT_TIME_SYNC",
    "HiveMetastoreClient",
    "HiveSync",
    "HiveTable",
    "PartitionChanges",
    "SyncResult",
    "SyncTarget",
    "hive_location",
    "hive_tables",
    "partition_changes",
]
