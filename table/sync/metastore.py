"""A Hive Metastore client: Hive's own Thrift client (`IMetaStoreClient`), in a JVM reached
through py4j.

The JVM is the job's Spark driver (`spark._jvm`): PySpark ships Hive's metastore client, so
nothing is added, and the client reads the Hadoop and Hive settings users already give Spark
(`hive-site.xml`, `spark.hadoop.hive.metastore.*`: Kerberos, SASL, timeouts). Each client is
Hive's `HiveMetaStoreClient` behind its retrying proxy, with a connection of its own, never an
embedded metastore. A call the metastore refuses, or a metastore that does not answer within
`timeout_seconds`, raises `CatalogSyncError` naming the operation and Hive's message.
"""

from __future__ import annotations

import contextlib
import getpass
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from table.errors import CatalogSyncError
from table.sync.registration import HiveTable

T = TypeVar("T")

URIS = "hive.metastore.uris"


class HiveMetastoreClient:
    """One connection to the metastore; `close()` ends it."""

    def __init__(
        self,
        jvm: Any,
        uris: str | None = None,
        hadoop_conf: Any = None,
        settings: Mapping[str, str] | None = None,
        timeout_seconds: float = 30.0,
    ):
        self._jvm = jvm
        hive_conf_class = jvm.org.apache.hadoop.hive.conf.HiveConf
        conf = hive_conf_class(hadoop_conf, hive_conf_class._java_lang_class) if hadoop_conf else hive_conf_class()
        if uris:
            conf.set(URIS, uris)
        if not conf.get(URIS):
            raise CatalogSyncError(
                "no metastore to sync to: set sync.metastore_uris, or hive.metastore.uris in "
                "hive-site.xml or as spark.hadoop.hive.metastore.uris"
            )
        # fail within the timeout instead of Hive's default retries (minutes) while the metastore is down
        conf.set("hive.metastore.client.socket.timeout", f"{int(timeout_seconds)}s")
        conf.set("hive.metastore.connect.retries", "1")
        conf.set("hive.metastore.failure.retries", "0")
        for key, value in (settings or {}).items():
            conf.set(key, str(value))
        self.uris = conf.get(URIS)
        # a connection of its own (Hive's `Hive.get` caches one per thread, which a close would share)
        self._client = self._call(
            "connect", lambda: jvm.org.apache.hadoop.hive.metastore.RetryingMetaStoreClient.getProxy(conf, False)
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a dead connection closes as well as it can
            self._client.close()

    # -- databases ---------------------------------------------------------------------------

    def database_exists(self, database: str) -> bool:
        return database.lower() in {d.lower() for d in self._call("list databases", self._client.getAllDatabases)}

    def create_database(self, database: str) -> None:
        db = self._jvm.org.apache.hadoop.hive.metastore.api.Database(
            database, "created by mor-streamer's catalog sync", None, None
        )
        self._call(f"create database {database}", lambda: self._client.createDatabase(db))

    # -- tables ------------------------------------------------------------------------------

    def get_table(self, database: str, name: str) -> Any | None:
        """The Thrift Table, or None when there is none."""
        try:
            return self._call(f"get table {database}.{name}", lambda: self._client.getTable(database, name))
        except _MissingError:
            return None

    def create_table(self, table: HiveTable, extra_properties: Mapping[str, str]) -> None:
        api = self._jvm.org.apache.hadoop.hive.metastore.api
        j = api.Table()
        j.setDbName(table.database)
        j.setTableName(table.name)
        j.setOwner(getpass.getuser())
        j.setCreateTime(int(time.time()))
        j.setTableType("EXTERNAL_TABLE")
        j.setPartitionKeys(self._fields(table.partition_keys))
        j.setParameters(self._map({**table.table_properties, **extra_properties}))
        sd = api.StorageDescriptor()
        sd.setCols(self._fields(table.columns))
        sd.setInputFormat(table.input_format)
        sd.setOutputFormat(table.output_format)
        sd.setLocation(table.location)
        sd.setSerdeInfo(api.SerDeInfo(None, table.serde, self._map(table.serde_properties)))
        j.setSd(sd)
        self._call(f"create table {table.qualified_name}", lambda: self._client.createTable(j))

    def columns(self, j_table: Any) -> list[tuple[str, str]]:
        return [(f.getName(), f.getType()) for f in j_table.getSd().getCols()]

    def parameter(self, j_table: Any, key: str) -> str | None:
        return j_table.getParameters().get(key)

    def alter_table(
        self,
        table: HiveTable,
        j_table: Any,
        properties: Mapping[str, str],
        formats: bool = False,
        columns: bool = False,
    ) -> None:
        """Update the stored table: `properties` set; with `formats` its formats, serde and serde
        properties as `table` has them; with `columns` its columns, cascaded to every partition
        (new columns then read as null in partitions registered before them)."""
        for key, value in properties.items():
            j_table.putToParameters(key, value)
        context = self._jvm.org.apache.hadoop.hive.metastore.api.EnvironmentContext()
        sd = j_table.getSd()
        if formats:
            sd.setInputFormat(table.input_format)
            sd.setOutputFormat(table.output_format)
            sd.getSerdeInfo().setSerializationLib(table.serde)
            sd.getSerdeInfo().setParameters(self._map(table.serde_properties))
        if columns:
            sd.setCols(self._fields(table.columns))
            if table.partition_keys:
                context.putToProperties("CASCADE", "true")
        self._call(
            f"alter table {table.qualified_name}",
            lambda: self._client.alter_table_with_environmentContext(table.database, table.name, j_table, context),
        )

    # -- partitions --------------------------------------------------------------------------

    def partition_names(self, database: str, name: str) -> set[str]:
        """The names (`field=value/...`) of a table's registered partitions."""
        return set(
            self._call(
                f"list partitions of {database}.{name}", lambda: self._client.listPartitionNames(database, name, -1)
            )
        )

    def add_partitions(self, table: HiveTable, j_table: Any, partitions: Iterable[tuple[list[str], str]]) -> None:
        """Register partitions given as (values, location), with the table's storage descriptor;
        those already there are left as they are."""
        api = self._jvm.org.apache.hadoop.hive.metastore.api
        sd = j_table.getSd()
        batch = self._jvm.java.util.ArrayList()
        for values, location in partitions:
            partition_sd = api.StorageDescriptor(sd)
            partition_sd.setLocation(location)
            batch.add(api.Partition(self._list(values), table.database, table.name, 0, 0, partition_sd, None))
        if batch.size():
            self._call(
                f"add partitions to {table.qualified_name}", lambda: self._client.add_partitions(batch, True, False)
            )

    def drop_partition(self, table: HiveTable, name: str) -> None:
        """Unregister a partition by name (`field=value/...`); its files stay. None there is fine."""
        with contextlib.suppress(_MissingError):
            self._call(
                f"drop partition {name} of {table.qualified_name}",
                lambda: self._client.dropPartition(table.database, table.name, name, False),
            )

    # -- helpers -----------------------------------------------------------------------------

    def _fields(self, columns: Iterable[tuple[str, str]]) -> Any:
        schema = self._jvm.org.apache.hadoop.hive.metastore.api.FieldSchema
        return self._list(schema(name, hive_type, "") for name, hive_type in columns)

    def _list(self, items: Iterable[Any]) -> Any:
        j = self._jvm.java.util.ArrayList()
        for item in items:
            j.add(item)
        return j

    def _map(self, entries: Mapping[str, str]) -> Any:
        j = self._jvm.java.util.HashMap()
        for key, value in entries.items():
            j.put(key, value)
        return j

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as e:
            java = getattr(e, "java_exception", None)
            if java is None:
                raise CatalogSyncError(f"{what}: {type(e).__name__}: {e}") from e
            if java.getClass().getSimpleName() == "NoSuchObjectException":
                raise _MissingError(what) from e
            raise CatalogSyncError(f"{what} on {getattr(self, 'uris', 'the metastore')}: {_java_message(java)}") from e


class _MissingError(CatalogSyncError):
    """The metastore has no such object."""


def _java_message(java: Any) -> str:
    """The innermost cause's class and message: a refused connection, not Hive's wrapper."""
    cause = java
    while cause.getCause() is not None and cause.getCause() != cause:
        cause = cause.getCause()
    outer = java.toString()
    inner = cause.toString()
    return outer if inner == outer else f"{outer} (cause: {inner})"
