"""The judge's server: one Spark 3.5 session with Apache Hudi's bundle, answering requests.

It runs in the judge's own virtual environment (pyspark 3.5, see `harness.hudi_judge`), so it
imports nothing of this project: only the standard library, pyspark and pyarrow. The client
starts it as `python hudi_judge_server.py --socket PATH --jars JAR[,JAR]` and talks over that
Unix socket (one client; the server ends when it leaves), one request at a time, in frames: an
8-byte big-endian length, then a JSON header; when the header has `"payload": n`, n bytes of
Arrow IPC stream follow it. Every answer is
`{"ok": true, ...}` (rows come back as an Arrow IPC payload) or `{"ok": false, "error": ...,
"trace": ...}`; a failed request leaves the session running.

Requests (`op`):
- `versions`: Spark's and Hudi's versions.
- `read`: `path`, `query` (snapshot | read_optimized | incremental | time_travel), `begin` and
  `end` (incremental: (begin, end]), `as_of` (time travel), `options` (more read options).
- `sql`: `sql`, any statement Spark with Hudi's extensions takes, procedures (`CALL ...`)
  included; its rows come back.
- `table`: `name`, a table of the session's catalog (a Hive Metastore when the session is
  started with `spark.sql.catalogImplementation=hive`), refreshed, then read whole.
- `write`: `path`, `options` (Hudi write configs), `mode` (append | overwrite), and the rows as
  payload, or `source`, the path of a Parquet file of the rows instead; written through
  `df.write.format("hudi")`.
- `stop`: answers, then exits.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import tempfile
import time
import traceback

import pyarrow as pa
import pyarrow.parquet as pq

_LENGTH = struct.Struct(">Q")

READ_QUERY_OPTIONS = {
    "snapshot": {"hoodie.datasource.query.type": "snapshot"},
    "read_optimized": {"hoodie.datasource.query.type": "read_optimized"},
    "incremental": {"hoodie.datasource.query.type": "incremental"},
    "time_travel": {"hoodie.datasource.query.type": "snapshot"},
}


#: A short-lived test session's settings (C1 only: a JVM that answers many small requests
#: soon); `--conf` overrides any of them, as the bench does to run with its own Spark settings.
TEST_SESSION_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djdk.attach.allowAttachSelf=true",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
}
#: What Hudi's Spark quick start sets; not overridable.
HUDI_SESSION_CONF = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
}


def spark_session(jars: str, driver_memory: str, conf: dict[str, str] | None = None):
    """local[2] with Hudi's Spark extensions, the way Hudi's quick start configures a session."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("hudi-judge")
        .config("spark.jars", jars)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="hudi-judge-warehouse-"))
    )
    for key, value in {**TEST_SESSION_CONF, **(conf or {}), **HUDI_SESSION_CONF}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class Judge:
    """What each request does, on one session."""

    def __init__(self, spark, scratch: str):
        self.spark = spark
        self.scratch = scratch
        self._writes = 0

    def versions(self, request: dict) -> tuple[dict, None]:
        source = self.spark.sparkContext._jvm.org.apache.hudi.DefaultSource()
        hudi_version = source.getClass().getPackage().getImplementationVersion()
        return {"spark": self.spark.version, "hudi": hudi_version, "format": source.shortName()}, None

    def read(self, request: dict) -> tuple[dict, pa.Table]:
        query = request.get("query", "snapshot")
        options = dict(READ_QUERY_OPTIONS[query])
        if query == "incremental":
            options["hoodie.datasource.read.begin.instanttime"] = request["begin"]
            if request.get("end"):
                options["hoodie.datasource.read.end.instanttime"] = request["end"]
        if query == "time_travel":
            options["as.of.instant"] = request["as_of"]
        options.update(request.get("options") or {})
        # Hudi's file index caches listings per path in the session: a table changed since the
        # last read must be listed again
        self.spark.catalog.clearCache()
        frame = self.spark.read.format("hudi").options(**options).load(request["path"])
        return {}, collect(frame)

    def sql(self, request: dict) -> tuple[dict, pa.Table]:
        self.spark.catalog.clearCache()
        return {}, collect(self.spark.sql(request["sql"]))

    def table(self, request: dict) -> tuple[dict, pa.Table]:
        # Spark keeps a catalog table's relation (and Hudi's file index in it) until refreshed
        self.spark.catalog.refreshTable(request["name"])
        return {}, collect(self.spark.table(request["name"]))

    def write(self, request: dict, payload: pa.Table | None) -> tuple[dict, None]:
        if request.get("source"):
            self._write(request, request["source"])
            return {}, None
        if payload is None:
            raise ValueError("a write needs its rows: a payload, or a Parquet file as `source`")
        self._writes += 1
        staged = os.path.join(self.scratch, f"batch-{self._writes}.parquet")
        pq.write_table(payload, staged)
        try:
            self._write(request, staged)
        finally:
            os.remove(staged)
        return {"rows": payload.num_rows}, None

    def _write(self, request: dict, parquet_path: str) -> None:
        frame = self.spark.read.parquet(parquet_path)
        if request.get("hold_until"):
            frame = held(frame, request["hold_until"])
        (
            frame.write.format("hudi")
            .options(**request.get("options", {}))
            .mode(request.get("mode", "append"))
            .save(request["path"])
        )


def held(frame, release: str):
    """The frame, its rows handed to the writer only once the file `release` exists: Hudi has
    put its instant on the timeline by then, so the write is held pending on purpose."""
    from pyspark.sql.functions import col, udf

    first = frame.schema.fields[0]

    def wait(value):
        while not os.path.exists(release):
            time.sleep(0.05)
        return value

    return frame.withColumn(first.name, udf(wait, first.dataType)(col(first.name)))


def collect(frame) -> pa.Table:
    """The frame's rows as Arrow, exactly as Spark holds them (no pandas in between)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema)
    batches = frame._collect_as_arrow()
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


# -- framing ---------------------------------------------------------------------------------


def read_exactly(conn: socket.socket, n: int) -> bytes:
    chunks, remaining = [], n
    while remaining:
        chunk = conn.recv(min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("the client closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(conn: socket.socket) -> tuple[dict, pa.Table | None]:
    (length,) = _LENGTH.unpack(read_exactly(conn, _LENGTH.size))
    header = json.loads(read_exactly(conn, length))
    payload = None
    if header.get("payload"):
        payload = pa.ipc.open_stream(read_exactly(conn, header["payload"])).read_all()
    return header, payload


def send(conn: socket.socket, header: dict, table: pa.Table | None = None) -> None:
    body = b""
    if table is not None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue().to_pybytes()
        header = {**header, "payload": len(body)}
    encoded = json.dumps(header).encode()
    conn.sendall(_LENGTH.pack(len(encoded)) + encoded + body)


def serve(judge: Judge, listener: socket.socket) -> None:
    """Answer the one client until it says stop or goes away (its process ended: no judge is
    left behind holding a JVM)."""
    handlers = {"versions": judge.versions, "read": judge.read, "sql": judge.sql, "table": judge.table}
    conn, _ = listener.accept()
    with conn:
        while True:
            try:
                request, payload = receive(conn)
            except EOFError:
                return
            op = request.get("op")
            if op == "stop":
                send(conn, {"ok": True})
                return
            try:
                if op == "write":
                    answer, rows = judge.write(request, payload)
                elif op in handlers:
                    answer, rows = handlers[op](request)
                else:
                    raise ValueError(f"unknown op {op!r}")
            except Exception as e:  # noqa: BLE001 - the session goes on; the client raises it
                print(f"request {op} failed: {e}", file=sys.stderr, flush=True)
                send(conn, {"ok": False, "error": java_message(e), "trace": traceback.format_exc()})
                continue
            send(conn, {"ok": True, **answer}, rows)


def java_message(error: Exception) -> str:
    """The Java exception's own message when Spark raised one, else the Python one."""
    java = getattr(error, "java_exception", None) or getattr(error, "desc", None)
    text = str(java) if java is not None else f"{type(error).__name__}: {error}"
    return text.splitlines()[0] if text else repr(error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--jars", required=True, help="comma-separated jar paths for spark.jars")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting over the test session's own (repeatable)",
    )
    args = parser.parse_args()
    spark = spark_session(args.jars, args.driver_memory, dict(c.split("=", 1) for c in args.conf))
    scratch = tempfile.mkdtemp(prefix="hudi-judge-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket + ".tmp")
    listener.listen(1)
    os.rename(args.socket + ".tmp", args.socket)  # the socket appears once the session is up
    try:
        serve(Judge(spark, scratch), listener)
    finally:
        listener.close()
        spark.stop()


if __name__ == "__main__":
    main()
