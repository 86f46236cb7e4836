"""A Hive Metastore for tests: Apache Hive's standalone metastore, started from its Maven Central
jars, one process on a free loopback port, its catalog in an embedded Derby database of its own.

    with HiveMetastore() as metastore:
        ... metastore.uri ...          # thrift://127.0.0.1:<port>
        metastore.stop()               # down: clients get connection refused
        metastore.start()              # back on the same port, with the same catalog

No Docker and no tarball: the jars come from `streamer.sandbox.jars` (fetched once into the clone's
`.cache/`), and the server runs as `java -cp <conf>:<jars> org.apache.hadoop.hive.metastore.HiveMetaStore`,
configured by a `metastore-site.xml` in its work directory. DataNucleus creates the schema in
Derby on first start (no schematool run). The settings leave out the two parts of the standalone
3.1 release that need Hive's query engine (`hive-exec`): the partition-expression proxy (the
string-filter one instead) and the replication dump cleaner.
"""

from __future__ import annotations

import os
import time
from xml.sax.saxutils import escape

from harness.errors import HarnessError
from streamer.sandbox import jars
from streamer.sandbox.ports import free_port, port_answers
from streamer.sandbox.server_process import ServerProcess, java_executable

HIVE_VERSION = "3.1.3"
ARTIFACTS = (f"org.apache.hive:hive-standalone-metastore:{HIVE_VERSION}",)
#: Hadoop 2's annotations depend on the JDK 8 `tools.jar`, which Java 9+ no longer has.
EXCLUSIONS = ("jdk.tools:jdk.tools",)
JVM_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"


class MetastoreError(HarnessError):
    """The metastore did not start or answer."""


def metastore_jars() -> jars.JarSet:
    """The standalone metastore and its dependencies, fetched on first use."""
    return jars.fetch("hive-metastore", HIVE_VERSION, ARTIFACTS, exclusions=EXCLUSIONS)


class HiveMetastore(ServerProcess):
    """One metastore process. `start()` waits until its Thrift port accepts connections;
    `restart()` comes back on the same port with the same catalog (`ServerProcess`)."""

    STOP_TIMEOUT = 20.0

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 120.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, None, startup_timeout, die_with_parent, temp_prefix="hive-metastore-")

    @property
    def uri(self) -> str:
        """The metastore's Thrift URI, as `hive.metastore.uris` takes it."""
        if self.port is None:
            raise HarnessError("metastore not started")
        return f"thrift://{self.host}:{self.port}"

    @property
    def warehouse(self) -> str:
        """Where the metastore puts the databases it creates without a location."""
        return str(self.work_dir / "warehouse")

    def start(self) -> HiveMetastore:
        if self.is_running():
            return self
        classpath = metastore_jars().classpath
        if self.port is None:
            self.port = free_port(self.host)
            self._write_config()
        self._spawn(
            [
                java_executable(),
                *JVM_OPTIONS,
                "-cp",
                f"{self.work_dir / 'conf'}{os.pathsep}{classpath}",
                MAIN_CLASS,
                "-p",
                str(self.port),
            ]
        )
        deadline = time.monotonic() + self.startup_timeout
        while not self.answers():
            if not self.is_running() or time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise MetastoreError(
                    f"Hive Metastore {HIVE_VERSION} did not start on {self.uri}:\n"
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        return self

    def answers(self) -> bool:
        """Whether the Thrift port accepts a connection."""
        return self.port is not None and port_answers(self.host, self.port)

    def _write_config(self) -> None:
        conf = self.work_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.work_dir / 'derby'};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            "datanucleus.schema.autoCreateAll": "true",
            "metastore.schema.verification": "false",
            "metastore.warehouse.dir": self.warehouse,
            "metastore.thrift.port": str(self.port),
            "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
            "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
        }
        properties = "".join(
            f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in settings.items()
        )
        (conf / "metastore-site.xml").write_text(f"<configuration>\n{properties}</configuration>\n")
        (conf / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\n"
            "appender.out.type = Console\nappender.out.name = out\n"
            "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = %d %p %c{1} %m%n\n"
        )
