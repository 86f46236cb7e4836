"""Peer: plain Spark copy-on-write, what a team without a table format would write.

Each batch: read the whole Parquet table, union the batch, keep the latest version of each key
by `updated_at` (a window), drop deleted keys, and write the result as the next version of the
table (Spark cannot overwrite a path it reads from, so versions alternate directories and the
previous one is removed). Partitioned by region like the other tables.
"""

from __future__ import annotations

import shutil

from bench.measure import PathResult
from bench.peers import PeerInput, run_batches
from bench.workload import TABLE_SCHEMA, WorkloadFiles


def overwrite(peer: PeerInput) -> PathResult:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from bench.spark import session

    spark = session()
    latest = Window.partitionBy("order_id").orderBy(F.col("updated_at").desc())
    versions = [peer.table / "v0"]

    def load(table):
        spark.createDataFrame(table.drop_columns(["is_deleted"])).write.partitionBy("region").parquet(str(versions[0]))

    def upsert(batch):
        current = spark.read.parquet(str(versions[-1])).withColumn("is_deleted", F.lit(False))
        merged = (
            current.unionByName(spark.createDataFrame(batch))
            .withColumn("rank", F.row_number().over(latest))
            .where("rank = 1 AND NOT is_deleted")
            .select(*TABLE_SCHEMA.names)
        )
        versions.append(peer.table / f"v{len(versions)}")
        merged.write.partitionBy("region").parquet(str(versions[-1]))
        shutil.rmtree(versions[-2])

    return run_batches(
        "spark-cow",
        "spark copy-on-write (window, overwrite)",
        WorkloadFiles(peer.workload),
        load,
        upsert,
        lambda: spark.read.parquet(str(versions[-1])).count(),
    )
