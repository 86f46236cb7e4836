"""Hudi's metadata table, left on our table by a Hudi writer, removed before our next commit.

We neither write nor update the metadata table (`.hoodie/metadata`, a Hudi table of its own
that lists the data table's files). A Hudi writer running with its defaults creates it on a
table it writes and records its partitions in `hoodie.table.metadata.partitions`; readers that
find that property list files through it. After a commit of ours it would be stale: those
readers would miss what we wrote, and Hudi writers that list through it would build on a view
without our files. So our writer does what Hudi's own writer does when it runs with the metadata
table off (`HoodieTable.maybeDeleteMetadataTable`): it clears the property first, so that no
reader uses the metadata table from then on, then deletes the directory, and logs why.

The writer checks when it opens, and before a deltacommit when writes made outside this process
(Apache Hudi's, an offline command's) completed since its last check: the test the writer's
file-system view applies too (`table.timeline.timeline.JOURNAL`), so that a job's own commits
and services cost no extra request.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from table.config.properties import PROPERTIES_PATH, TableConfig
from table.storage.file_io import Storage
from table.storage.layout import METADATA_DIR
from table.timeline.timeline import JOURNAL, Timeline

if TYPE_CHECKING:
    from table.mor_table import MorTable

log = logging.getLogger(__name__)

METADATA_TABLE_DIR = f"{METADATA_DIR}/metadata"
#: hoodie.properties keys that point readers at the metadata table (HoodieTableConfig).
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
BACKUP_PATH = f"{PROPERTIES_PATH}.backup"  # what Hudi's readers fall back to while the file is rewritten
CHECKSUM_PATH = f"{METADATA_DIR}/.hoodie.properties.crc"  # Hadoop's local checksum of hoodie.properties


def drop_metadata_table(table: MorTable) -> bool:
    """Remove the metadata table if the table has one (property or directory); True if it had."""
    storage = table.storage
    config = TableConfig.load(storage)
    listed = {k: config.extra[k] for k in (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT) if k in config.extra}
    has_dir = storage.exists(METADATA_TABLE_DIR)
    if not listed and not has_dir:
        return False
    log.warning(
        "%s: removing Hudi's metadata table (%s%s) before this writer's commit: this writer does not "
        "update it, and readers that list files through it would miss what it writes (Hudi's writer "
        "does the same when it runs with hoodie.metadata.enable=false)",
        table.base_uri,
        ", ".join(f"{k}={v}" for k, v in listed.items()) or "no partitions listed",
        f", {METADATA_TABLE_DIR}" if has_dir else "",
    )
    if listed:
        cleared = dataclasses.replace(config, extra={k: v for k, v in config.extra.items() if k not in listed})
        _rewrite_properties(storage, cleared)
        table.config = cleared
    storage.delete_dir(METADATA_TABLE_DIR)
    return True


def _rewrite_properties(storage: Storage, config: TableConfig) -> None:
    """hoodie.properties rewritten as Hudi's `HoodieTableConfig.modify` does: a backup first,
    then the file, then the backup removed. On a local disk Hadoop keeps a checksum beside each
    file it wrote (`.hoodie.properties.crc`) and refuses a file that no longer matches it, so the
    stale checksum goes first."""
    storage.write_bytes(BACKUP_PATH, storage.read_bytes(PROPERTIES_PATH))
    storage.delete(CHECKSUM_PATH)
    config.save(storage, overwrite=True)
    storage.delete(BACKUP_PATH)


class MetadataTableGuard:
    """One writer's check for a metadata table, run when someone else may have made one."""

    def __init__(self, table: MorTable):
        self.table = table
        self._seen: frozenset[str] | None = None  # the completed writes at the last check (None: never checked)

    def check(self, timeline: Timeline | None = None) -> bool:
        """Drop the metadata table if writes made outside this process completed since the last
        check (always at the first); True if one was dropped. A write counts by its instant
        time, not by being the newest: another writer's instant may be older than one of ours
        and complete after it."""
        storage = self.table.storage
        writes = (timeline or Timeline.load(storage)).completed_writes()
        foreign = self._seen is None or any(
            i.timestamp not in self._seen and not JOURNAL.made_here(storage, i) for i in writes
        )
        self._seen = frozenset(i.timestamp for i in writes)
        return drop_metadata_table(self.table) if foreign else False
