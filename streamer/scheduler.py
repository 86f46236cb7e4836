"""A table's services between micro-batches: clustering, compaction, cleaning and archival.

Only the writer schedules (after a commit, on the sink's thread, holding the table's lease), in
that order: clustering (bucket splits, merges and sorts, `table.services.clustering.planner`) first, so
that compaction plans the file groups clustering leaves alone. `inline` executes right there,
before the next batch; `async` hands the plan to the application's background executor, which
runs one plan at a time and never holds up a batch. While a clustering plan is pending, batches
write the planned buckets twice (old and new file groups), so an `async` clustering costs
readers nothing. A plan left pending by a crash is executed again at the next start.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from streamer.checkpoint import CHECKPOINT_KEY
from streamer.config.choices import ServiceMode
from streamer.config.model import ClusteringSettings, IndexSettings, ServicesSettings
from streamer.metrics import TableMetrics
from table import (
    MIB,
    Action,
    ArchivePolicy,
    CleanPolicy,
    ClusteringPolicy,
    CompactionStrategy,
    MorTable,
    TableWriter,
    Timeline,
    WriteInProgressError,
    archive,
    execute_clean,
    execute_clustering,
    execute_compaction,
    pending_cleans,
    pending_clusterings,
    pending_compactions,
    schedule_clean,
    schedule_clustering,
    schedule_compaction,
)

log = logging.getLogger(__name__)

#: The io budget of a compaction the bound needs: every file group at the bound, whatever its size.
UNBOUNDED = 2**62


@dataclass(frozen=True)
class _Task:
    table: str
    service: str
    instant: str | None
    run: Callable[[], object]

    @property
    def label(self) -> str:
        return f"{self.table}: {self.service}" + (f" {self.instant}" if self.instant else "")


class BackgroundExecutor:
    """One daemon thread that runs service tasks in order, one at a time."""

    def __init__(self):
        self._queue: queue.Queue[_Task | None] = queue.Queue()
        self._queued: set[tuple[str, str, str | None]] = set()
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._idle = threading.Event()
        self._idle.set()
        self.failures = 0  # tasks that raised; each is logged with its error, none is kept
        self._thread = threading.Thread(target=self._work, name="table-services", daemon=True)
        self._thread.start()

    def submit(self, task: _Task) -> bool:
        """Queue a task unless the same one is queued or running; True when queued."""
        key = (task.table, task.service, task.instant)
        with self._lock:
            if key in self._queued:
                return False
            self._queued.add(key)
            self._idle.clear()
        self._queue.put(task)
        return True

    def busy_with(self, table: str, service: str) -> bool:
        with self._lock:
            return any(t == table and s == service for t, s, _ in self._queued)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def wait_for(self, table: str) -> None:
        """Until no task of `table` is queued or running."""
        with self._done:
            self._done.wait_for(lambda: not any(t == table for t, _, _ in self._queued))

    def shutdown(self) -> None:
        self._queue.put(None)

    def _work(self) -> None:
        while (task := self._queue.get()) is not None:
            started = time.monotonic()
            try:
                result = task.run()
                if result is not None:
                    log.info("%s done in %.1fs (background): %s", task.label, time.monotonic() - started, result)
            except BaseException as e:  # noqa: BLE001 - a failed plan stays pending and is retried later
                log.error("%s failed: %s: %s", task.label, type(e).__name__, e)
                self.failures += 1
            finally:
                with self._lock:
                    self._queued.discard((task.table, task.service, task.instant))
                    if not self._queued:
                        self._idle.set()
                    self._done.notify_all()


def clustering_policy(index: IndexSettings, clustering: ClusteringSettings) -> ClusteringPolicy:
    """The engine's policy from the index's resize settings and the clustering service's limits."""
    return ClusteringPolicy(
        split_threshold_bytes=int(index.split_threshold_mb * MIB),
        merge_threshold_bytes=int(index.merge_threshold_mb * MIB),
        min_buckets=index.bucket_floor,
        max_buckets=index.max_buckets,
        split_point=index.split_point,
        max_partitions=clustering.max_partitions,
        max_bytes=None if clustering.max_plan_mb is None else int(clustering.max_plan_mb * MIB),
        sort_columns=tuple(clustering.sort_columns),
    )


class TableServices:
    """Decides after each commit which services are due, and runs them as configured."""

    def __init__(
        self,
        settings: ServicesSettings,
        table: MorTable,
        writer: TableWriter,
        executor: BackgroundExecutor,
        index: IndexSettings = IndexSettings(),
        metrics: TableMetrics | None = None,
    ):
        self.settings = settings
        self.metrics = metrics
        self.index = index
        self.table = table
        self.writer = writer
        self.executor = executor
        self._last_run: dict[str, float] = {}
        self._started = time.monotonic()
        # the latest deltacommit when clustering last found nothing to plan: the count starts again there
        self._clustering_found_nothing_at: str | None = None
        self._waiting_for: dict[str, str] = {}  # service -> the pending deltacommit it was last told to wait for

    @property
    def name(self) -> str:
        return self.table.name

    # ---- policies ------------------------------------------------------------------------------

    def clustering_policy(self) -> ClusteringPolicy:
        return clustering_policy(self.index, self.settings.clustering)

    def compaction_strategy(self) -> CompactionStrategy:
        c = self.settings.compaction
        return CompactionStrategy(
            kind=c.strategy,
            min_log_files=c.min_log_files,
            min_log_bytes=c.min_log_bytes,
            max_io_bytes=c.max_io_mb * MIB,
            recent_partitions=c.recent_partitions,
        )

    def clean_policy(self) -> CleanPolicy:
        return CleanPolicy(kind=self.settings.clean.policy, retained=self.settings.clean.retained)

    def archive_policy(self) -> ArchivePolicy:
        a = self.settings.archive
        return ArchivePolicy(min_instants=a.min_instants, max_instants=a.max_instants)

    # ---- the writer's hooks --------------------------------------------------------------------

    def resume(self) -> None:
        """At start: plans a crashed run left pending are executed again (unless the service is
        off: then the offline command executes them)."""
        for instant in pending_clusterings(self.table) if self.settings.clustering.mode != ServiceMode.OFF else ():
            self._execute(
                "clustering",
                instant,
                partial(execute_clustering, self.table, instant),
                self.settings.clustering.mode,
            )
        for instant in pending_compactions(self.table) if self.settings.compaction.mode != ServiceMode.OFF else ():
            self._execute(
                "compaction",
                instant,
                partial(execute_compaction, self.table, instant),
                self.settings.compaction.mode,
            )
        for instant in pending_cleans(self.table) if self.settings.clean.mode != ServiceMode.OFF else ():
            self._execute("clean", instant, partial(execute_clean, self.table, instant), self.settings.clean.mode)

    def after_commit(self) -> None:
        """Called on the writer's thread after each deltacommit."""
        timeline = self.table.timeline()
        self._clustering(timeline)
        self._compaction(timeline)
        self._hold_to_bound()
        self._clean(timeline)
        self._archive(timeline)
        if self.metrics is not None:
            timeline = self.table.timeline()
            self.metrics.plans_pending(
                len(pending_compactions(self.table, timeline)), len(pending_clusterings(self.table, timeline))
            )

    def finish(self, timeout: float | None = None) -> bool:
        """For `--once`: wait for background plans, then execute what is still pending."""
        idle = self.executor.wait_idle(timeout)
        if idle:
            self._run_pending(("clustering", "compaction", "clean"))
        return idle

    def _run_pending(self, services: tuple[str, ...]) -> None:
        """Execute the pending plans of `services` (those not `off`) here and now."""
        for service, pending, execute in (
            ("clustering", pending_clusterings, execute_clustering),
            ("compaction", pending_compactions, execute_compaction),
            ("clean", pending_cleans, execute_clean),
        ):
            if service in services and getattr(self.settings, service).mode != ServiceMode.OFF:
                for instant in pending(self.table):
                    self._run_now(service, instant, partial(execute, self.table, instant))

    # ---- backpressure --------------------------------------------------------------------------

    def _hold_to_bound(self) -> None:
        """`compaction.max_log_files_per_group`: when a file group holds that many log files, the
        next batch would give it one more, so it waits (the sink has not returned) until the
        pending plans are executed, the background thread's included, and the groups still at the
        bound are compacted. The layout the commit's routing listed, plus its writes, says when a
        group may be there; the table is listed to be sure, as a compaction may have completed
        since."""
        bound = self.settings.compaction.max_log_files_per_group
        layout = self.writer.last_layout
        if bound is None or layout is None or layout.log_files() < bound:
            return
        most = self._most_log_files()
        if most < bound:
            return
        started = time.monotonic()
        log.warning(
            "%s: a file group holds %d log files, services.compaction.max_log_files_per_group is %d: "
            "the next batch waits for compaction",
            self.name,
            most,
            bound,
        )
        self.executor.wait_for(self.name)
        self._run_pending(("clustering", "compaction"))
        if self._most_log_files() >= bound:
            strategy = CompactionStrategy(min_log_files=bound, max_io_bytes=UNBOUNDED)
            instant = self._schedule("compaction", lambda: schedule_compaction(self.writer, strategy))
            if instant:
                log.info("%s: compaction %s scheduled", self.name, instant)
                self._run_now("compaction", instant, lambda: execute_compaction(self.table, instant))
        seconds = time.monotonic() - started
        log.info(
            "%s: the stream waited %.1fs for compaction to bring log files per file group under %d",
            self.name,
            seconds,
            bound,
        )
        if self.metrics is not None:
            self.metrics.held_back(seconds)

    def _most_log_files(self) -> int:
        view = self.writer.file_system_view(self.table.timeline())
        return max((len(s.log_files) for s in view.latest_slices()), default=0)

    # ---- each service --------------------------------------------------------------------------

    def _clustering(self, timeline: Timeline) -> None:
        c = self.settings.clustering
        if c.mode == ServiceMode.OFF:
            return
        pending = pending_clusterings(self.table, timeline)
        if pending:  # a plan whose execution failed is retried, never two at once
            if c.mode == ServiceMode.ASYNC and not self.executor.busy_with(self.name, "clustering"):
                first = pending[0]
                self._execute("clustering", first, partial(execute_clustering, self.table, first), c.mode)
            return
        last = max((i.timestamp for i in timeline.instants if i.action == Action.REPLACE_COMMIT), default=None)
        since = max(filter(None, (last, self._clustering_found_nothing_at)), default=None)
        if not self._due("clustering", c, timeline, since=since):
            return
        instant = self._schedule("clustering", lambda: schedule_clustering(self.writer, self.clustering_policy()))
        if instant is False:
            return
        self._last_run["clustering"] = time.monotonic()
        if instant is None:
            latest = timeline.completed("deltacommit")
            self._clustering_found_nothing_at = latest[-1].timestamp if latest else None
            return
        log.info("%s: clustering %s scheduled", self.name, instant)
        self._execute("clustering", instant, lambda: execute_clustering(self.table, instant), c.mode)

    def _compaction(self, timeline: Timeline) -> None:
        c = self.settings.compaction
        if c.mode == ServiceMode.OFF:
            return
        pending = pending_compactions(self.table, timeline)
        if pending:  # a plan whose execution failed is retried, never two at once
            if c.mode == ServiceMode.ASYNC and not self.executor.busy_with(self.name, "compaction"):
                first = pending[0]
                self._execute("compaction", first, partial(execute_compaction, self.table, first), c.mode)
            return
        last = max(
            (
                i.timestamp
                for i in timeline.instants
                if i.action == "compaction" or (i.action == "commit" and i.state == "completed")
            ),
            default=None,
        )
        if not self._due("compaction", c, timeline, since=last):
            return
        instant = self._schedule("compaction", lambda: schedule_compaction(self.writer, self.compaction_strategy()))
        if instant is False:
            return
        self._last_run["compaction"] = time.monotonic()
        if instant is not None:
            log.info("%s: compaction %s scheduled", self.name, instant)
            self._execute("compaction", instant, lambda: execute_compaction(self.table, instant), c.mode)

    def _clean(self, timeline: Timeline) -> None:
        c = self.settings.clean
        if (
            c.mode == ServiceMode.OFF
            or self.executor.busy_with(self.name, "clean")
            or pending_cleans(self.table, timeline)
        ):
            return
        last = max((i.timestamp for i in timeline.instants if i.action == "clean"), default=None)
        if not self._due("clean", c, timeline, since=last):
            return
        instant = schedule_clean(self.writer, self.clean_policy())
        self._last_run["clean"] = time.monotonic()
        if instant is not None:
            self._execute("clean", instant, lambda: execute_clean(self.table, instant), c.mode)

    def _archive(self, timeline: Timeline) -> None:
        a = self.settings.archive
        if a.mode == ServiceMode.OFF or self.executor.busy_with(self.name, "archive"):
            return
        if not self._due("archive", a, timeline, since=None):
            return
        self._last_run["archive"] = time.monotonic()
        self._execute("archive", None, self._archive_now, a.mode)

    def _archive_now(self) -> None:
        """Archival is due after most commits and usually finds nothing: only moves are logged."""
        result = archive(self.table, self.archive_policy(), keep_latest_with_metadata_prefix=CHECKPOINT_KEY)
        if result.archived:
            log.info("%s: %s", self.name, result)

    def _schedule(self, service: str, plan: Callable[[], str | None]) -> str | Literal[False] | None:
        """`plan()`'s instant (None: nothing to plan), or False while another writer's deltacommit
        is pending: the round is skipped, as Hudi's own scheduling does, and the service stays due,
        so the first round after that write completes (or is rolled back) plans it."""
        try:
            return plan()
        except WriteInProgressError as e:
            if self._waiting_for.get(service) != e.instant:
                self._waiting_for[service] = e.instant
                log.info(
                    "%s: %s waits: deltacommit %s of another writer is pending; it is planned after that",
                    self.name,
                    service,
                    e.instant,
                )
            return False

    def _due(self, service: str, settings, timeline: Timeline, since: str | None) -> bool:
        """Every commit when no trigger is set; else after N deltacommits or T seconds."""
        by_count = settings.every_delta_commits
        by_time = settings.every_seconds
        if by_count is None and by_time is None:
            return True
        if by_count is not None:
            done = [i for i in timeline.completed("deltacommit") if since is None or i.timestamp > since]
            if len(done) >= by_count:
                return True
        if by_time is not None:
            last = self._last_run.get(service, self._started)
            if time.monotonic() - last >= by_time:
                return True
        return False

    def _execute(self, service: str, instant: str | None, run: Callable[[], object], mode: ServiceMode) -> None:
        if mode == ServiceMode.ASYNC:
            self.executor.submit(_Task(self.name, service, instant, self._measured(service, run)))
        else:
            self._run_now(service, instant, run)

    def _run_now(self, service: str, instant: str | None, run: Callable[[], object]) -> None:
        started = time.monotonic()
        result = self._measured(service, run)()
        if result is not None:
            label = f"{service} {instant}" if instant else service
            log.info("%s: %s done in %.1fs: %s", self.name, label, time.monotonic() - started, result)

    def _measured(self, service: str, run: Callable[[], object]) -> Callable[[], object]:
        """`run`, reporting its duration and whether it failed to the table's metrics."""
        metrics = self.metrics
        if metrics is None:
            return run

        def measured() -> object:
            started = time.monotonic()
            try:
                result = run()
            except BaseException:
                metrics.service_ran(service, time.monotonic() - started, failed=True)
                raise
            metrics.service_ran(service, time.monotonic() - started, failed=False)
            return result

        return measured
