"""A table's catalog sync in the job (`sync:`), and what it records for `streamer status`.

After each deltacommit the sink calls `CatalogSync.after_commit`. When a sync is due (every
commit, or `every_delta_commits` / `every_seconds`), `inline` syncs there, before the next
micro-batch; `async` wakes the table's own sync thread, which syncs to whatever the table holds
by then (commits made meanwhile are taken in one sync). A sync that fails is logged once, with
how far the catalog is behind, and is retried after the next commit whatever the triggers say;
the commit stands. Each attempt is recorded in `.hoodie/.aux/catalog-sync.json` (what was
synced, since when it fails and why), which `streamer status` and `streamer doctor` read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from streamer.config.choices import ServiceMode
from streamer.config.model import JobConfig, SyncSettings
from streamer.errors import InvalidArgumentError
from streamer.metrics import TableMetrics
from table import (
    AUX_DIR,
    CatalogSyncError,
    HiveMetastoreClient,
    HiveSync,
    MorTable,
    Storage,
    SyncResult,
    SyncTarget,
    Timeline,
)

log = logging.getLogger(__name__)

SYNC_STATE_PATH = f"{AUX_DIR}/catalog-sync.json"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass
class SyncState:
    """The last sync attempt of a table, kept with the table."""

    tables: list[str]
    metastore: str | None = None
    synced_instant: str | None = None  # the catalog's last_commit_time_sync, as last set
    synced_at: str | None = None
    failing_since: str | None = None
    failures: int = 0  # consecutive failed attempts
    last_error: str | None = None

    def save(self, storage: Storage) -> None:
        storage.write_bytes(SYNC_STATE_PATH, json.dumps(asdict(self)).encode())

    @classmethod
    def load(cls, storage: Storage) -> SyncState | None:
        if not storage.exists(SYNC_STATE_PATH):
            return None
        return cls(**json.loads(storage.read_bytes(SYNC_STATE_PATH)))


def commits_behind(timeline: Timeline, synced_instant: str | None) -> int:
    """Completed writes after `synced_instant` (all of them when never synced)."""
    return sum(1 for i in timeline.completed_writes() if synced_instant is None or i.timestamp > synced_instant)


def sync_target(config: JobConfig) -> SyncTarget:
    s = config.sync
    if s is None:
        raise InvalidArgumentError(f"{config.config_path}: no sync: section names the catalog table")
    return SyncTarget(s.database, s.table_name or config.table.name, s.create_database, dict(s.table_properties))


def metastore_connector(settings: SyncSettings, jvm: Any, hadoop_conf: Any = None) -> Callable[[], HiveMetastoreClient]:
    """Makes clients of the configured metastore in this JVM (the job's Spark driver)."""
    return lambda: HiveMetastoreClient(
        jvm, settings.metastore_uris, hadoop_conf, dict(settings.hive_conf), settings.timeout_seconds
    )


class CatalogSync:
    """Decides after each commit whether a sync is due, and runs it as configured."""

    def __init__(self, settings: SyncSettings, table: MorTable, sync: HiveSync, metrics: TableMetrics | None = None):
        self.settings = settings
        self.table = table
        self._sync = sync
        self.metrics = metrics
        names = [f"{sync.target.database}.{n}" for n in sync.table_names]
        self.state = SyncState.load(table.storage) or SyncState(names, settings.metastore_uris)
        self.state.tables = names
        self._last_sync = time.monotonic()
        self._lock = threading.Lock()  # one sync at a time
        self._wanted = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        if settings.mode == ServiceMode.ASYNC:
            self._thread = threading.Thread(target=self._work, name=f"catalog-sync-{table.name}", daemon=True)
            self._thread.start()

    @property
    def name(self) -> str:
        return self.table.name

    def after_commit(self) -> None:
        """Called on the writer's thread after each deltacommit."""
        if not self._due():
            if self.metrics is not None:
                self.metrics.catalog_synced(
                    commits_behind(self.table.timeline(), self.state.synced_instant), None, False
                )
            return
        self._wake_or_sync()

    def catch_up(self) -> None:
        """At start: a catalog left behind (a stop before the last sync, a metastore that was down)
        is synced without waiting for the next commit."""
        if commits_behind(self.table.timeline(), self.state.synced_instant):
            self._wake_or_sync()

    def sync_now(self, repair: bool = False) -> SyncResult | None:
        """Sync here and now (`repair`: see `HiveSync.sync`); the result, or None when it failed
        (logged and recorded)."""
        with self._lock:
            started = time.monotonic()
            self._last_sync = started
            try:
                result = self._sync.sync(repair)
            except CatalogSyncError as e:
                self._failed(e, time.monotonic() - started)
                return None
            self._succeeded(result, time.monotonic() - started)
            return result

    def finish(self, timeout: float | None = None) -> None:
        """For `--once` and a clean stop: the background sync done, then one more if the catalog
        is behind the table."""
        self._stop_thread(timeout)
        if commits_behind(self.table.timeline(), self.state.synced_instant):
            self.sync_now()

    def close(self) -> None:
        self._stop_thread(10.0)
        self._sync.close()

    # -- internals ---------------------------------------------------------------------------

    def _wake_or_sync(self) -> None:
        if self._thread is not None:
            self._wanted.set()
        else:
            self.sync_now()

    def _due(self) -> bool:
        s = self.settings
        if self.state.failing_since is not None:  # a failed sync is retried at the next commit
            return True
        if s.every_delta_commits is None and s.every_seconds is None:
            return True
        if s.every_delta_commits is not None:
            synced = self.state.synced_instant
            done = [i for i in self.table.timeline().completed("deltacommit") if synced is None or i.timestamp > synced]
            if len(done) >= s.every_delta_commits:
                return True
        return s.every_seconds is not None and time.monotonic() - self._last_sync >= s.every_seconds

    def _succeeded(self, result: SyncResult, seconds: float) -> None:
        state = self.state
        if state.failing_since is not None:
            log.info(
                "%s: catalog sync of %s caught up after %d failed attempt(s) since %s: %s",
                self.name,
                ", ".join(state.tables),
                state.failures,
                state.failing_since,
                result,
            )
        elif result.created or result.columns_changed or result.partitions_added or result.partitions_dropped:
            log.info("%s: %s", self.name, result)
        else:
            log.debug("%s: %s", self.name, result)
        state.metastore = self._sync.metastore_uris or state.metastore
        state.synced_instant = result.instant or state.synced_instant
        state.synced_at = time.strftime(_TIME_FORMAT, time.gmtime())
        state.failing_since, state.failures, state.last_error = None, 0, None
        self._record(seconds, failed=False)

    def _failed(self, error: CatalogSyncError, seconds: float) -> None:
        state = self.state
        state.failures += 1
        state.failing_since = state.failing_since or time.strftime(_TIME_FORMAT, time.gmtime())
        state.last_error = str(error)
        behind = commits_behind(self.table.timeline(), state.synced_instant)
        log.warning(
            "%s: catalog sync of %s failed (attempt %d; the catalog is %d commit(s) behind the table, "
            "retried after the next commit): %s",
            self.name,
            ", ".join(state.tables),
            state.failures,
            behind,
            error,
        )
        self._record(seconds, failed=True)

    def _record(self, seconds: float, failed: bool) -> None:
        try:
            self.state.save(self.table.storage)
        except OSError as e:  # the record is for operators; the sync itself is what counts
            log.warning("%s: could not record the catalog sync's state in %s: %s", self.name, SYNC_STATE_PATH, e)
        if self.metrics is not None:
            self.metrics.catalog_synced(
                commits_behind(self.table.timeline(), self.state.synced_instant), seconds, failed
            )

    def _work(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stopping:
                return
            self.sync_now()

    def _stop_thread(self, timeout: float | None) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._stopping = True
            self._wanted.set()
            self._thread.join(timeout)
        self._thread = None


@dataclass
class CatalogStatus:
    """The catalog sync as `streamer status` shows it."""

    tables: list[str]
    synced_instant: str | None
    commits_behind: int
    failing_since: str | None = None
    failures: int = 0
    last_error: str | None = None
    never_synced: bool = field(default=False)

    def line(self) -> str:
        where = ", ".join(self.tables)
        if self.never_synced:
            text = f"{where}: not synced yet ({self.commits_behind} commit(s) to sync)"
        else:
            behind = "in step with the table" if self.commits_behind == 0 else f"{self.commits_behind} commit(s) behind"
            text = f"{where} synced to {self.synced_instant}, {behind}"
        if self.failing_since:
            text += f"; failing since {self.failing_since} ({self.failures} attempt(s)): {self.last_error}"
        return text


def catalog_status(config: JobConfig, table: MorTable, timeline: Timeline) -> CatalogStatus | None:
    """What the job last recorded of its catalog sync, and how far the table has moved since."""
    if config.sync is None:
        return None
    target = sync_target(config)
    state = SyncState.load(table.storage)
    names = [f"{target.database}.{target.table_name}_rt", f"{target.database}.{target.table_name}_ro"]
    if state is None:
        return CatalogStatus(names, None, commits_behind(timeline, None), never_synced=True)
    return CatalogStatus(
        names,
        state.synced_instant,
        commits_behind(timeline, state.synced_instant),
        state.failing_since,
        state.failures,
        state.last_error,
        never_synced=state.synced_instant is None,
    )
