"""Three writers of one table, killed at random: the stream (`streamer run --once`), a backfill
(`streamer backfill`) and a delete (`streamer delete`), each a process of its own under optimistic
concurrency, all three at once in every round.

Each round produces the stream's next events, backfills rows of new keys in partitions the stream
never writes, and deletes some of the keys the previous round backfilled (so what each writer
leaves is known whatever the order of their commits). Every lane runs until it exits 0: the
round's plan kills its first attempt, with SIGKILL to its whole process group at a random moment
(driver, JVM and Python workers, as a lost machine) or at a failure point
(`deltacommit.lock_held`: with the commit lock held). Each commit waits `HELD_SECONDS` with its
files written, so the writers' commits overlap and conflict.

Shared by tests/e2e/test_concurrent_writers.py (a few rounds) and `bench --scenario writers`
(20 rounds), which check the table against `expected()` after each round.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from table import MorTable
from table.failpoints import FAIL_ENV_VAR, PAUSE_ENV_VAR
from tests.support.ingestion import (
    ORDER_SCHEMA,
    expected_rows,
    order_config,
    produce_orders,
    settled_change_events,
    streamer_process,
    write_config,
)

LANES = ("stream", "backfill", "delete")
#: The failure point inside the commit lock.
LOCK_HELD = "deltacommit.lock_held"
#: How long each commit waits with its files written, before its commit lock.
HELD_SECONDS = 1
#: Partitions only the backfill and the delete write.
BACKFILL_REGIONS = ("backfill-east", "backfill-west")
#: Seconds an attempt may take before the lane fails.
ATTEMPT_TIMEOUT = 300


@dataclass(frozen=True)
class Kill:
    """How a lane's first attempt of a round dies: SIGKILLed `after` seconds from its start (if
    still running), or killed by itself at a failure point."""

    after: float | None = None
    failpoint: str | None = None


@dataclass
class LaneRun:
    """A lane's attempts in one round."""

    attempts: int = 0
    killed: int = 0  # attempts that died by the plan
    conflicts: int = 0  # commits refused for another writer's, written again
    outputs: list[str] = field(default_factory=list)


class ThreeWriters:
    """The table, its topic and config, and what the writers have written so far."""

    def __init__(
        self,
        work: Path,
        bootstrap: str,
        topic: str,
        seed: int,
        rounds: int,
        events_per_round: int = 400,
        backfill_rows: int = 200,
    ):
        self.work = work
        self.bootstrap = bootstrap
        self.topic = topic
        self.rng = random.Random(seed)
        self.events_per_round = events_per_round
        self.backfill_rows = backfill_rows
        self.stream_events = settled_change_events(rounds * events_per_round, seed=seed)
        self.backfilled: list[dict] = []
        self.deleted: set[str] = set()
        mapping = order_config(
            work,
            "orders",
            bootstrap,
            topic,
            table={"concurrency": "optimistic_concurrency_control", "conflict_retries": 20},
            source={"max_offsets_per_trigger": events_per_round // 2},
            services={"compaction": {"mode": "inline", "every_delta_commits": 2}},
        )
        self.path = mapping["table"]["path"]
        self.config = write_config(work / "configs", mapping)

    def random_kill(self, earliest: float = 4.0, latest: float = 14.0) -> Kill:
        return Kill(after=self.rng.uniform(earliest, latest))

    def random_plan(self, number: int) -> dict[str, Kill]:
        """Round `number`'s kills: each lane's first attempt killed at random more often than not,
        and every fourth round one lane (in turn) killed holding the commit lock."""
        lanes = [lane for lane in LANES if lane != "delete" or number > 1]
        plan = {lane: self.random_kill() for lane in lanes if self.rng.random() < 0.6}
        if number % 4 == 1:
            plan[lanes[(number // 4) % len(lanes)]] = Kill(failpoint=LOCK_HELD)
        return plan

    def round(self, number: int, kills: dict[str, Kill]) -> dict[str, LaneRun]:
        """Run round `number` (from 1) to its end: every lane exited 0."""
        first = (number - 1) * self.events_per_round
        produce_orders(self.bootstrap, self.topic, self.stream_events[first : first + self.events_per_round])
        rows = self._backfill_rows(number)
        dataset = self.work / "backfills" / f"round-{number}.parquet"
        dataset.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=ORDER_SCHEMA), dataset)
        commands = {
            "stream": ["run", str(self.config), "--once"],
            "backfill": ["backfill", str(self.config), "--from", str(dataset), "--master", "local[1]"],
        }
        doomed = set()
        if number > 1:
            where = f"order_id LIKE 'b{number - 1}-%' AND amount < {self.backfill_rows // 3}"
            commands["delete"] = ["delete", str(self.config), "--where", where, "--master", "local[1]"]
            doomed = {r["order_id"] for r in self.backfilled if _matches(r, number - 1, self.backfill_rows // 3)}
        runs = {lane: LaneRun() for lane in commands}
        failures: list[BaseException] = []

        def lane(name: str) -> None:
            try:
                while name != "stream" and not self._has_commits():  # a backfill needs the table
                    assert not failures, "the stream failed"
                    time.sleep(0.2)
                _run_until_done(commands[name], kills.get(name), runs[name])
            except (AssertionError, OSError, subprocess.SubprocessError) as e:
                failures.append(e)

        threads = [threading.Thread(target=lane, args=(name,), name=f"lane-{name}") for name in commands]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise failures[0]
        self.backfilled.extend(rows)
        self.deleted |= doomed
        return runs

    def _has_commits(self) -> bool:
        return MorTable.exists(self.path) and bool(MorTable.load(self.path).timeline().completed_writes())

    def expected(self, rounds_done: int) -> dict:
        """The rows the table must hold after `rounds_done` rounds."""
        events = self.stream_events[: rounds_done * self.events_per_round] + self.backfilled
        rows = expected_rows(events)
        for key in self.deleted:
            rows.pop(key, None)
        return rows

    def _backfill_rows(self, number: int) -> list[dict]:
        clock = 10_000_000 * number
        return [
            {
                "order_id": f"b{number}-{i:05d}",
                "customer": f"c-{i % 17}",
                "region": BACKFILL_REGIONS[i % len(BACKFILL_REGIONS)],
                "amount": float(i),
                "status": "backfilled",
                "note": "",
                "updated_at": clock + i,
                "deleted": False,
            }
            for i in range(self.backfill_rows)
        ]


def _matches(row: dict, backfill_round: int, below: int) -> bool:
    return row["order_id"].startswith(f"b{backfill_round}-") and row["amount"] < below


def _run_until_done(args: list[str], kill: Kill | None, run: LaneRun) -> None:
    """Start the command again until it exits 0; the first attempt dies as `kill` says."""
    while True:
        planned = kill if run.attempts == 0 else None
        env = {PAUSE_ENV_VAR: f"deltacommit.files_written={HELD_SECONDS}"}
        if planned is not None and planned.failpoint:
            env[FAIL_ENV_VAR] = planned.failpoint
        run.attempts += 1
        proc = streamer_process(args, env=env, start_new_session=True)
        killed = threading.Event()
        timer = None
        if planned is not None and planned.after is not None:
            timer = threading.Timer(planned.after, _kill_running, (proc, killed))
            timer.start()
        try:
            out, _ = proc.communicate(timeout=ATTEMPT_TIMEOUT)
        finally:
            if timer is not None:
                timer.cancel()
            _kill_group(proc.pid)  # what the driver left running: its JVM, Python workers
        run.outputs.append(out)
        run.conflicts += out.count("conflicts with")
        if proc.returncode == 0:
            return
        died_at_point = planned is not None and planned.failpoint and f"failpoint {planned.failpoint}:" in out
        if proc.returncode == -signal.SIGKILL and (killed.is_set() or died_at_point):
            run.killed += 1
            continue
        raise AssertionError(f"`streamer {' '.join(args[:1])}` exited {proc.returncode}:\n{out[-6000:]}")


def _kill_running(proc: subprocess.Popen, killed: threading.Event) -> None:
    if proc.poll() is None:
        killed.set()
        _kill_group(proc.pid)


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    time.sleep(0.1)
