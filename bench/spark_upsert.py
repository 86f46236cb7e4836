"""Bench: one Spark upsert of N rows (default 2 million) in local[2], time and peak memory.

    .venv/bin/python bench/spark_upsert.py [--rows 2000000]

Side by side in the same session: our distributed upsert into an empty table and into the
same table again (every key updated, so log files), and the ceiling, Spark writing the same
rows as plain Parquet. Peak RSS is sampled for the driver JVM and its Python workers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from table.mor_table import MorTable, TableSpec, WriteOptions  # noqa: E402
from table.spark_write import upsert_dataframe  # noqa: E402


class PeakRss:
    """Samples the RSS of a process tree (the JVM and its Python workers) every 200 ms."""

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.peak_jvm = 0
        self.peak_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            parents = {}
            rss = {}
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{pid}/statm") as f:
                        rss[int(pid)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                except OSError:
                    continue
            workers = [p for p in parents if self._descends(p, parents) and p != self.root_pid]
            self.peak_jvm = max(self.peak_jvm, rss.get(self.root_pid, 0))
            self.peak_workers = max(self.peak_workers, sum(rss.get(p, 0) for p in workers))

    def _descends(self, pid: int, parents: dict) -> bool:
        seen = 0
        while pid in parents and seen < 20:
            if pid == self.root_pid:
                return True
            pid = parents[pid]
            seen += 1
        return False


def orders(spark, rows: int, version: int):
    from pyspark.sql import functions as F

    return spark.range(rows).select(
        F.format_string("ord-%09d", F.col("id")).alias("order_id"),
        F.format_string("cust-%05d", (F.col("id") * 7919) % 20000).alias("customer"),
        F.element_at(F.array(*[F.lit(r) for r in ("emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia")]),
                     (F.col("id") % 8 + 1).cast("int")).alias("region"),
        ((F.col("id") % 100000) / 100.0).alias("amount"),
        F.lit("paid" if version else "created").alias("status"),
        F.lit("n" * 60).alias("note"),
        (F.col("id") + version * 10_000_000).alias("updated_at"),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "4g").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = spark.sparkContext._gateway.proc.pid
    work = Path(tempfile.mkdtemp(prefix="bench-upsert-"))
    schema = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("region", pa.string()),
                        ("amount", pa.float64()), ("status", pa.string()), ("note", pa.string()),
                        ("updated_at", pa.int64())])
    table = MorTable.create(str(work / "orders"), TableSpec("orders", schema, ("order_id",), "updated_at", ("region",)))
    results = []
    with table.writer(WriteOptions(initial_buckets=4)) as writer:
        for label, version in (("mor upsert, new table (base files)", 0), ("mor upsert, all keys again (log files)", 1)):
            df = orders(spark, args.rows, version)
            with PeakRss(jvm_pid) as rss:
                started = time.monotonic()
                upsert_dataframe(writer, df)
                seconds = time.monotonic() - started
            results.append((label, seconds, rss.peak_jvm, rss.peak_workers))
    with PeakRss(jvm_pid) as rss:
        started = time.monotonic()
        orders(spark, args.rows, 0).write.parquet(str(work / "plain"))
        results.append(("ceiling: spark plain parquet write", time.monotonic() - started, rss.peak_jvm, rss.peak_workers))
    assert table.snapshot(columns=["order_id"]).num_rows == args.rows
    spark.stop()
    shutil.rmtree(work)

    print(f"\n{args.rows:,} rows, local[2], {os.cpu_count()} cores")
    print(f"{'path':<42} {'seconds':>8} {'rows/s':>10} {'JVM peak MB':>12} {'workers peak MB':>16}")
    for label, seconds, jvm, workers in results:
        print(f"{label:<42} {seconds:>8.1f} {args.rows / seconds:>10,.0f} {jvm / 2**20:>12,.0f} {workers / 2**20:>16,.0f}")


if __name__ == "__main__":
    main()
