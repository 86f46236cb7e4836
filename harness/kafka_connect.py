"""Kafka Connect for tests: one standalone worker from Apache Kafka's own Maven Central jars, with
Debezium's PostgreSQL and MySQL (binlog, MariaDB too) connectors as plugins, writing into the
broker the tests use.

    with KafkaConnect(bootstrap) as connect:
        connect.add_connector("pg", debezium_postgres_config(pg, "pg", "public.accounts"))
        connect.wait_running("pg")

The worker runs `org.apache.kafka.connect.cli.ConnectStandalone` with no connector; tests add
theirs through its REST API (standalone mode serves it too), each with a replication slot and
topic prefix of its own. Debezium's jars (`io.debezium:debezium-connector-postgres` and `-mysql`,
fetched by `streamer.sandbox.jars`) sit in a plugin directory each, isolated from the worker's
classpath as Connect loads any plugin; Apicurio's converters, for a connector that writes Avro through a schema
registry (`harness.schema_registry`), sit in another. Offsets go to a file and are flushed every
second, so that a test knows soon when Debezium has handed a change to Kafka (`PostgresServer`
shows it as the slot's confirmed LSN). `debezium_mirror_config` is the connector of a database
mirror: every table of a schema, new ones included, in types a table can take;
`debezium_mariadb_config` the same for a MariaDB database.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from harness.errors import HarnessError
from harness.schema_registry import converter_jars
from streamer.sandbox import jars
from streamer.sandbox.kafka_broker import KAFKA_VERSION, LOG4J_VERSION
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess, java_executable

DEBEZIUM_VERSION = "3.6.1.Final"
CONNECT_ARTIFACTS = (
    f"org.apache.kafka:connect-runtime:{KAFKA_VERSION}",
    f"org.apache.kafka:connect-json:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)
DEBEZIUM_POSTGRES = f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}"
#: Debezium's binlog connector, which reads MariaDB too: the MariaDB connector of its own
#: (`debezium-connector-mariadb`) is not on the Maven Central the tests reach.
DEBEZIUM_MYSQL = f"io.debezium:debezium-connector-mysql:{DEBEZIUM_VERSION}"
#: MariaDB's JDBC driver, beside that connector: MySQL's (Connector/J 9) asks every server for
#: `transaction_isolation`, a variable MariaDB 10.11 does not have.
MARIADB_JDBC = "org.mariadb.jdbc:mariadb-java-client:3.5.6"
#: The connector classes the worker must offer before it counts as started.
CONNECTOR_CLASSES = ("PostgresConnector", "MySqlConnector")
JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: stdout
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        ref: stdout
    Logger:
      - name: org.apache.kafka.common.config.AbstractConfig
        level: WARN
      - name: org.apache.kafka.clients
        level: WARN
      - name: org.reflections
        level: ERROR
"""


def connect_jars() -> jars.JarSet:
    return jars.fetch("kafka-connect", KAFKA_VERSION, CONNECT_ARTIFACTS)


def debezium_postgres_jars() -> jars.JarSet:
    return jars.fetch("debezium-postgres", DEBEZIUM_VERSION, [DEBEZIUM_POSTGRES])


def debezium_mysql_jars() -> jars.JarSet:
    return jars.fetch("debezium-mysql", DEBEZIUM_VERSION, [DEBEZIUM_MYSQL, MARIADB_JDBC])


class KafkaConnect(ServerProcess):
    """A standalone Kafka Connect worker as a child process, its REST API on a free loopback port."""

    def __init__(
        self,
        bootstrap: str,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, log_path, startup_timeout, die_with_parent, temp_prefix="kafka-connect-")
        self.bootstrap = bootstrap

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> KafkaConnect:
        if self.is_running():
            return self
        classpath = connect_jars().classpath
        plugins = self.work_dir / "plugins"
        if self.port is None:
            self.port = free_port(self.host)
            plugins.mkdir(parents=True, exist_ok=True)
            (plugins / "debezium-connector-postgres").symlink_to(debezium_postgres_jars().directory)
            (plugins / "debezium-connector-mysql").symlink_to(debezium_mysql_jars().directory)
            (plugins / "apicurio-converter").symlink_to(converter_jars().directory)
            self._write_config(plugins)
        self._spawn(
            [
                java_executable(),
                *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.yaml'}",
                "-cp",
                classpath,
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(self.work_dir / "worker.properties"),
            ]
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.is_running():
                raise HarnessError(f"Kafka Connect exited while starting; log {self.log_path}:\n{self.log_tail()}")
            try:
                found = {p["class"].rsplit(".", 1)[-1] for p in self._call("GET", "/connector-plugins")}
                if found.issuperset(CONNECTOR_CLASSES):
                    return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise HarnessError(
                    f"Kafka Connect did not serve its REST API with Debezium's connectors within "
                    f"{self.startup_timeout:.0f}s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    # -- connectors ------------------------------------------------------------------------------
    def add_connector(self, name: str, config: Mapping[str, str]) -> None:
        self._call("POST", "/connectors", {"name": name, "config": dict(config)})

    def delete_connector(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{name}")

    def wait_running(self, name: str, timeout: float = 120.0) -> None:
        """Until the connector and its task run; a failed task raises with its trace."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self._call("GET", f"/connectors/{name}/status")
            except urllib.error.HTTPError:
                status = {}
            tasks = status.get("tasks", [])
            failed = [t for t in tasks if t.get("state") == "FAILED"]
            if failed:
                raise HarnessError(f"connector {name} failed: {failed[0].get('trace', '')[:3000]}")
            if (
                status.get("connector", {}).get("state") == "RUNNING"
                and tasks
                and all(t.get("state") == "RUNNING" for t in tasks)
            ):
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"connector {name} not running after {timeout:.0f}s: {status}\n{self.log_tail()}")
            time.sleep(0.5)

    def _call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        return json.loads(text) if text else None

    def _write_config(self, plugins: Path) -> None:
        settings = {
            "bootstrap.servers": self.bootstrap,
            "listeners": f"http://{self.host}:{self.port}",
            "plugin.path": str(plugins),
            "plugin.discovery": "hybrid_warn",
            "offset.storage.file.filename": str(self.work_dir / "offsets"),
            "offset.flush.interval.ms": "1000",
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "topic.creation.enable": "true",
        }
        (self.work_dir / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.work_dir / "log4j2.yaml").write_text(_LOG4J2)


def debezium_postgres_config(
    host: str,
    port: int,
    database: str,
    slot: str,
    topic_prefix: str,
    tables: str,
    partitions: int = 3,
    schemas: bool = True,
    **overrides: str,
) -> dict[str, str]:
    """A Debezium PostgreSQL connector with `pgoutput` (PostgreSQL's own plugin: nothing to install
    in the server), its own slot and publication, JSON keys and values (with Connect's schemas
    when `schemas`), tombstones after deletes, and topics of `partitions` partitions that Connect
    creates."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": "postgres",
        "database.password": "",
        "database.dbname": database,
        "slot.name": slot,
        "publication.name": f"{slot}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": tables,
        "topic.prefix": topic_prefix,
        "tombstones.on.delete": "true",
        "snapshot.mode": "initial",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "true" if schemas else "false",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "true" if schemas else "false",
        "topic.creation.default.partitions": str(partitions),
        "topic.creation.default.replication.factor": "1",
        "poll.interval.ms": "100",
        **overrides,
    }


def debezium_mirror_config(
    host: str,
    port: int,
    database: str,
    slot: str,
    topic_prefix: str,
    schema: str = "public",
    partitions: int = 1,
    **overrides: str,
) -> dict[str, str]:
    """`debezium_postgres_config` for a mirror of every table of `schema` (one partition a table),
    the tables created while the connector runs included.

    - The publication is `FOR ALL TABLES` (`all_tables`), and `table.include.list` picks the
      schema's tables out of it. `filtered` publishes only the tables that exist when the
      connector starts: a table created later has no topic and its changes are lost until a
      restart adds it. In a database with such a publication PostgreSQL refuses updates and
      deletes of a table without a primary key (or another replica identity).
    - Connect's schemas are on, so the mirror learns each table's columns. In Connect's JSON,
      smallint, integer and bigint are int16, int32 and int64; real and double precision are
      float and double; boolean and text are boolean and string; numeric(p,s) is a string
      (`decimal.handling.mode`: "-12.50"); bytea is a string of lowercase hex
      (`binary.handling.mode`: "00ff", "" when empty); json and jsonb are strings named
      io.debezium.data.Json (SQL's NULL is null, JSON's is "null"); date is int32 days since the
      epoch (io.debezium.time.Date); timestamp is int64 microseconds since the epoch
      (io.debezium.time.MicroTimestamp), or milliseconds (io.debezium.time.Timestamp) for
      timestamp(0) to timestamp(3); timestamp with time zone is an ISO string in UTC
      (io.debezium.time.ZonedTimestamp, "1969-12-31T18:29:59.999999Z"). `time.precision.mode`
      changes only `time`: microseconds (io.debezium.time.MicroTime) whatever its precision.
    - Heartbeats every second, and the driver confirming the positions of the server's
      keepalives (`lsn.flush.mode: connector_and_driver`), move the slot's confirmed LSN past
      every change within about a second (the worker's offset flush interval), changes of other
      databases of the server included: waiting for `confirmed_flush_lsn` to pass
      `pg_current_wal_lsn()` then tells when Kafka has everything.
    """
    return debezium_postgres_config(
        host,
        port,
        database,
        slot,
        topic_prefix,
        rf"{schema}\..*",
        partitions=partitions,
        schemas=True,
        **{
            "publication.autocreate.mode": "all_tables",
            "decimal.handling.mode": "string",
            "binary.handling.mode": "hex",
            "time.precision.mode": "adaptive_time_microseconds",
            "heartbeat.interval.ms": "1000",
            "lsn.flush.mode": "connector_and_driver",
            **overrides,
        },
    )


def debezium_mariadb_config(
    host: str,
    port: int,
    user: str,
    password: str,
    bootstrap: str,
    topic_prefix: str,
    databases: str,
    server_id: int,
    partitions: int = 1,
    **overrides: str,
) -> dict[str, str]:
    """Debezium's binlog connector (`MySqlConnector`) on a MariaDB server, for a mirror of every
    table of `databases` (a comma-separated list): topics `<prefix>.<database>.<table>`, JSON
    keys and values with Connect's schemas, an initial snapshot, then the binlog.

    - It joins the server as a replica, so `server_id` must differ from the server's and from
      other connectors'. The schemas it learns from the binlog's DDL are kept in a topic of the
      same Kafka (`schema-history.<prefix>`, which no mirror pattern matches); no schema change
      events are written: a mirror reads columns off each change event.
    - It queries MariaDB through MariaDB's JDBC driver (see `MARIADB_JDBC`), with TLS off
      (MySQL's default mode, `preferred`, is no mode to that driver) and a positive snapshot
      fetch size (the connector's default streams large tables with a negative one, which that
      driver refuses). That driver refuses how the connector reads DATE, DATETIME, TIMESTAMP and
      TIME columns in a snapshot ("Data type DATETIME cannot be decoded as Blob"): a table with
      one fails the snapshot, while the binlog carries them fine.
    - Types, as the binlog gives them: INT int32, DOUBLE double, VARCHAR string, BOOLEAN
      (TINYINT(1)) boolean, DECIMAL a string of its digits (`decimal.handling.mode`: "-0.01"),
      DATETIME(6) int64 microseconds since the epoch (io.debezium.time.MicroTimestamp), DATE
      int32 days since the epoch (io.debezium.time.Date); binary columns lowercase hex.
    """
    return {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "tasks.max": "1",
        "database.jdbc.driver": "org.mariadb.jdbc.Driver",
        "database.protocol": "jdbc:mariadb",
        "database.ssl.mode": "disabled",
        "snapshot.fetch.size": "1000",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.server.id": str(server_id),
        "database.include.list": databases,
        "topic.prefix": topic_prefix,
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        "schema.history.internal.kafka.topic": f"schema-history.{topic_prefix}",
        "include.schema.changes": "false",
        "tombstones.on.delete": "true",
        "snapshot.mode": "initial",
        "decimal.handling.mode": "string",
        "binary.handling.mode": "hex",
        "time.precision.mode": "adaptive_time_microseconds",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "true",
        "topic.creation.default.partitions": str(partitions),
        "topic.creation.default.replication.factor": "1",
        "poll.interval.ms": "100",
        **overrides,
    }
