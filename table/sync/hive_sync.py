"""Keeping a table's registration in a Hive Metastore in step with its timeline, as Hudi's
`HiveSyncTool` does after each commit.

One `sync()` brings both tables (`_rt`, `_ro`) up to the table's last completed write:

1. the database is created when missing;
2. a table not registered yet is created; a registered one whose columns differ from the
   table's schema (a column added by schema evolution) gets the new columns, cascaded to its
   partitions, and the new Spark schema;
3. partitions the commits since the table's `last_commit_time_sync` wrote are added, those they
   dropped are removed (`table.sync.changes`; a first sync registers what is on storage, and drops
   registered partitions no longer there);
4. `last_commit_time_sync` is set to the last completed write.

A sync that fails part-way leaves `last_commit_time_sync` where it was, so the next one redoes
the same changes (each step is idempotent). Between syncs `HiveSync` keeps what it registered
(columns, partition names), so a sync after a commit that created no partition and changed no
column costs one read and one update of each table.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from table.errors import CatalogSyncError
from table.sync.changes import partition_changes
from table.sync.metastore import HiveMetastoreClient
from table.sync.registration import LAST_COMMIT_TIME_SYNC, HiveTable, hive_tables, partition_name, partition_values

if TYPE_CHECKING:
    from table.mor_table import MorTable
    from table.timeline.timeline import Timeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncTarget:
    """Where a table is registered: `<database>.<table_name>_rt` and `_ro`."""

    database: str
    table_name: str
    create_database: bool = True
    table_properties: Mapping[str, str] = field(default_factory=dict)  # set on both tables


@dataclass(frozen=True)
class SyncResult:
    instant: str | None  # the table's last completed write, now the catalog's `last_commit_time_sync`
    tables: tuple[str, ...]
    created: tuple[str, ...] = ()
    columns_changed: tuple[str, ...] = ()
    partitions_added: int = 0
    partitions_dropped: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.instant is None:
            return f"{', '.join(self.tables)}: nothing to sync (no commit yet)"
        parts = [f"{', '.join(self.tables)} synced to {self.instant} in {self.seconds:.2f}s"]
        if self.created:
            parts.append(f"created {', '.join(self.created)}")
        if self.columns_changed:
            parts.append(f"columns updated in {', '.join(self.columns_changed)}")
        if self.partitions_added or self.partitions_dropped:
            parts.append(f"{self.partitions_added} partition(s) added, {self.partitions_dropped} dropped")
        return "; ".join(parts)


def hive_location(base_uri: str) -> str:
    """The table's base path as Hadoop names it: a URI, `file://` for a local directory."""
    return base_uri if "://" in base_uri else f"file://{os.path.abspath(base_uri)}"


class HiveSync:
    """Syncs one table to one metastore. `connect` makes a client when one is needed: after a
    failure the connection is dropped and made again at the next sync."""

    def __init__(self, table: MorTable, target: SyncTarget, connect: Callable[[], HiveMetastoreClient]):
        self.table = table
        self.target = target
        self._connect = connect
        self._client: HiveMetastoreClient | None = None
        self._columns: dict[str, tuple[Any, ...]] = {}  # table name -> the columns and properties it has
        self._partitions: dict[str, set[str]] = {}  # table name -> partition names it has

    @property
    def table_names(self) -> tuple[str, str]:
        return f"{self.target.table_name}_rt", f"{self.target.table_name}_ro"

    @property
    def metastore_uris(self) -> str | None:
        """The URIs of the metastore connected to, None while not connected."""
        return self._client.uris if self._client is not None else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def sync(self, repair: bool = False) -> SyncResult:
        """Bring the registration up to the table's last completed write; CatalogSyncError when
        the metastore refuses or does not answer (nothing is left half-recorded). `repair`
        rewrites both tables' formats, serde and properties (and their columns where they
        differ) and reconciles their partitions with the table's, whatever
        `last_commit_time_sync` says."""
        started = time.monotonic()
        names = tuple(f"{self.target.database}.{n}" for n in self.table_names)
        timeline = self.table.timeline()
        last = timeline.last_completed_write()
        if last is None:
            return SyncResult(None, names)
        if repair:
            self._forget()
        try:
            client = self._client or self._connect()
            self._client = client
            if self.target.create_database and not self._columns and not client.database_exists(self.target.database):
                client.create_database(self.target.database)
                log.info("created database %s in the metastore at %s", self.target.database, client.uris)
            definitions = hive_tables(
                self.table.config,
                self.table.schema(timeline),
                hive_location(self.table.base_uri),
                self.target.database,
                self.target.table_name,
            )
            created, changed, added, dropped = [], [], 0, 0
            for definition in definitions:
                outcome = self._sync_table(client, definition, timeline, last.timestamp, repair)
                created += [definition.qualified_name] if outcome[0] else []
                changed += [definition.qualified_name] if outcome[1] else []
                added, dropped = added + outcome[2], dropped + outcome[3]
        except CatalogSyncError:
            self._forget()
            raise
        except Exception as e:  # py4j's own errors: the gateway or the connection to it broke
            self._forget()
            raise CatalogSyncError(f"sync of {', '.join(names)}: {type(e).__name__}: {e}") from e
        return SyncResult(
            last.timestamp, names, tuple(created), tuple(changed), added, dropped, time.monotonic() - started
        )

    def _sync_table(
        self, client: HiveMetastoreClient, definition: HiveTable, timeline: Timeline, instant: str, repair: bool
    ) -> tuple[bool, bool, int, int]:
        """(created, columns changed, partitions added, partitions dropped) for one table."""
        name = definition.name
        shape = (definition.columns, definition.partition_keys, tuple(sorted(definition.table_properties.items())))
        j_table = client.get_table(definition.database, name)
        created = j_table is None
        if created:
            client.create_table(definition, self.target.table_properties)
            log.info("registered %s in the metastore at %s", definition.qualified_name, client.uris)
            j_table = client.get_table(definition.database, name)
            self._columns[name] = shape
            self._partitions[name] = set()
        synced = client.parameter(j_table, LAST_COMMIT_TIME_SYNC)
        columns_changed = rewrite = False
        if not created and (repair or self._columns.get(name) != shape):
            columns_changed = client.columns(j_table) != list(definition.columns)
            rewrite = (
                repair
                or columns_changed
                or any(client.parameter(j_table, k) != v for k, v in definition.table_properties.items())
            )
        if name not in self._partitions:
            self._partitions[name] = (
                client.partition_names(definition.database, name) if definition.partition_keys else set()
            )
        registered = self._partitions[name]
        added = dropped = 0
        if definition.partition_keys:
            changes = partition_changes(self.table.storage, timeline, None if repair else synced)
            by_name = {
                partition_name(self.table.config, partition_values(self.table.config, p)): p for p in changes.written
            }
            new = {n: p for n, p in by_name.items() if n not in registered}
            if changes.complete:  # a first sync: what is registered but not on storage goes
                gone = {n for n in registered if n not in by_name}
            else:
                gone = {
                    partition_name(self.table.config, partition_values(self.table.config, p)) for p in changes.dropped
                } & registered
            base = hive_location(self.table.base_uri)
            client.add_partitions(
                definition, j_table, [(partition_values(self.table.config, p), f"{base}/{p}") for p in new.values()]
            )
            registered.update(new)
            for partition in sorted(gone):
                client.drop_partition(definition, partition)
                registered.discard(partition)
            added, dropped = len(new), len(gone)
        properties = {**definition.table_properties, **self.target.table_properties, LAST_COMMIT_TIME_SYNC: instant}
        client.alter_table(
            definition,
            j_table,
            properties if rewrite or created else {LAST_COMMIT_TIME_SYNC: instant},
            formats=rewrite,
            columns=columns_changed,
        )
        if columns_changed:
            log.info(
                "updated the columns of %s: %s",
                definition.qualified_name,
                ", ".join(f"{c} {t}" for c, t in definition.columns),
            )
        self._columns[name] = shape
        return created, columns_changed, added, dropped

    def _forget(self) -> None:
        """After a failure nothing cached is trusted: the next sync reads the metastore again."""
        self.close()
        self._columns.clear()
        self._partitions.clear()
