"""A class-data-sharing archive of Spark's driver JVM, so that each JVM the tests start maps
Spark's classes from one file instead of loading and verifying them from its jars again.

A `streamer run` in a test spends about half its wall time starting the JVM and Spark's SQL
layer, most of it loading classes; the crash matrix alone starts two dozen of them.
`share_with_spark_jvms()` makes the archive once (Java's dynamic CDS: `-XX:ArchiveClassesAtExit`
in a warm-up JVM) and puts `-XX:SharedArchiveFile` in `SPARK_SUBMIT_OPTS`, which Spark's launcher
gives every driver JVM that this process and its children start: the tests' own session, each
`streamer` they run, `spark-submit`. A JVM whose Java or jars differ from the archive's (Apache
Hudi's Spark) checks that itself and runs without it, as it would have anyway; a warm-up that
fails leaves the JVMs as they were.

The archive is kept in `.cache/class-data/` of the clone, named after the Java, PySpark and jars
it was made from.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

log = logging.getLogger(__name__)

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "class-data"
#: A warm-up JVM loads Spark's classes and writes the archive at its exit in about a minute.
WARM_UP_SECONDS = 300
#: The driver JVM options of the tests' Spark sessions and jobs, and of the warm-up: the C1
#: compiler alone warms up far sooner for short jobs (about 40% less wall time for a small suite
#: on 2 cores).
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def share_with_spark_jvms() -> None:
    """Name the archive, made when missing, in `SPARK_SUBMIT_OPTS`; leave it be if it cannot be made."""
    archive = _archive()
    if archive is None:
        return
    # A JVM that cannot map the archive says so on stdout, where the job's own lines go.
    mapped = f"-XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"
    given = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if mapped not in given:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{given} {mapped}".strip()


def _archive() -> Path | None:
    archive = CACHE / f"spark-driver-{_fingerprint()}.jsa"
    if archive.exists():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{archive.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be making it
        if archive.exists():
            return archive
        work = Path(tempfile.mkdtemp(prefix=".warm-up-", dir=CACHE))
        try:
            made = work / archive.name
            done = subprocess.run(
                [sys.executable, "-m", "harness.class_data", str(made), str(work)],
                cwd=Path(__file__).resolve().parent.parent,
                capture_output=True,
                text=True,
                timeout=WARM_UP_SECONDS,
            )
            if done.returncode != 0 or not made.exists():
                log.warning("no class-data archive (warm-up exit %s): %s", done.returncode, done.stderr[-2000:])
                return None
            os.replace(made, archive)
            return archive
        except subprocess.TimeoutExpired:
            log.warning("no class-data archive: the warm-up took over %ss", WARM_UP_SECONDS)
            return None
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _fingerprint() -> str:
    """What the archive depends on: the JVM binary, PySpark's version and Spark's jars."""
    java = Path(shutil.which("java", path=_java_path()) or "java").resolve()
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    text = "\n".join([str(java), str(java.stat().st_mtime_ns if java.exists() else 0), pyspark.__version__, *jars])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _java_path() -> str:
    """Where PySpark looks for `java`: `$JAVA_HOME/bin`, then the PATH."""
    home = os.environ.get("JAVA_HOME")
    return os.pathsep.join([*([os.path.join(home, "bin")] if home else []), os.environ.get("PATH", "")])


def _warm_up(archive: Path, work: Path) -> None:
    """Start Spark's driver with `-XX:ArchiveClassesAtExit`, run what a `streamer run` runs (SQL
    with a shuffle, Arrow batches to Python, a Python data source, a streaming query into
    `foreachBatch`), and end the JVM so that it writes the archive."""
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

    class Numbers(DataSource):
        @classmethod
        def name(cls):
            return "warm_up_numbers"

        def schema(self):
            return "n long"

        def reader(self, schema):
            return NumbersReader()

        def streamReader(self, schema):
            return NumbersStream()

    class NumbersReader(DataSourceReader):
        def read(self, partition):
            yield pa.RecordBatch.from_pydict({"n": list(range(100))})

    class NumbersStream(DataSourceStreamReader):
        def initialOffset(self):
            return {"n": 0}

        def latestOffset(self, start=None, limit=None):
            return {"n": 100}

        def partitions(self, start, end):
            return [InputPartition(0)]

        def read(self, partition):
            yield pa.RecordBatch.from_pydict({"n": list(range(100))})

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"{TEST_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={archive}")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.dataSource.register(Numbers)
    frame = spark.read.format("warm_up_numbers").load()
    frame.groupBy((frame.n % 7).alias("k")).count().mapInArrow(lambda batches: batches, "k long, count long").collect()
    frame.write.parquet(str(work / "numbers"))
    spark.read.parquet(str(work / "numbers")).toArrow()
    query = (
        spark.readStream.format("warm_up_numbers")
        .load()
        .writeStream.foreachBatch(_count)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    gateway = SparkContext._gateway
    assert gateway is not None
    gateway.shutdown()
    gateway.proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive then
    gateway.proc.wait(WARM_UP_SECONDS)


def _count(batch, _batch_id: int) -> None:
    batch.count()


if __name__ == "__main__":
    if sys.argv[1:]:  # the warm-up JVM's process
        _warm_up(Path(sys.argv[1]), Path(sys.argv[2]))
    else:  # `make test`, beside the judge's install: the archive made before the tests need it
        print(f"class-data archive: {_archive() or 'none (see the warning above)'}")
