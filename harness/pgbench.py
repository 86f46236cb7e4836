"""pgbench against the harness's PostgreSQL: its four tables, and its TPC-B-like workload running
in the background while a test does something else (a mirror catching up, a connector restarted).

    initialize_pgbench(pg, "shop", scale=1)           # pgbench_accounts holds 100,000 rows a scale
    run = start_pgbench(pg, "shop", seconds=5, clients=2)
    run.wait()                                         # the transactions it made

pgbench comes with PostgreSQL's Debian package, beside `postgres`. Each TPC-B transaction updates
one row of pgbench_accounts, pgbench_tellers and pgbench_branches and inserts one into
pgbench_history, which has no primary key: Debezium's Kafka key of its changes is null, and only
inserts are allowed in it while a publication `FOR ALL TABLES` exists (PostgreSQL refuses updates
and deletes of a published table without a replica identity).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from harness.errors import HarnessError
from harness.postgres import USER, PostgresServer
from streamer.sandbox.server_process import stop_process

PGBENCH_TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
#: pgbench's initialization steps in an order of ours: drop, create tables, primary keys, then
#: generate rows and vacuum. pgbench's own order adds the keys last, so that every row loaded
#: would reach Debezium without a key.
INIT_STEPS = "dtpgv"
_PROCESSED = re.compile(r"number of transactions actually processed: (\d+)")


def initialize_pgbench(pg: PostgresServer, database: str, scale: int = 1) -> None:
    """`pgbench -i -s scale` into `database`: 100,000 accounts, 10 tellers and 1 branch a scale,
    and an empty history. The tables are logged (never `--unlogged-tables`: logical decoding
    leaves unlogged tables out)."""
    done = subprocess.run(
        [*_pgbench(pg), "-i", "-I", INIT_STEPS, "-s", str(scale), "-q", database],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    if done.returncode != 0:
        raise HarnessError(f"pgbench -i failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")


def start_pgbench(
    pg: PostgresServer,
    database: str,
    seconds: int,
    clients: int = 2,
    log_path: str | Path | None = None,
    seed: int | None = 1,
) -> PgbenchRun:
    """`pgbench -T seconds -c clients` on tables `initialize_pgbench` made, in the background.
    Without vacuuming first (`-n`): pgbench's vacuum step truncates pgbench_history, a change
    a mirror cannot follow row by row. `seed` seeds pgbench's random choices of rows (the
    clients' interleaving is the scheduler's)."""
    log = Path(log_path) if log_path is not None else pg.work_dir / f"pgbench-{database}.log"
    command = [*_pgbench(pg), "-n", "-T", str(seconds), "-c", str(clients), "-j", str(clients)]
    if seed is not None:
        command.append(f"--random-seed={seed}")
    if shutil.which("setpriv"):  # dies with the test run, as the servers do
        command = ["setpriv", "--pdeathsig", "KILL", "--", *command]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*command, database], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True
        )
    return PgbenchRun(process, log)


class PgbenchRun:
    """A pgbench workload running in the background; its output goes to `log_path`."""

    def __init__(self, process: subprocess.Popen, log_path: Path):
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Until pgbench ends; the transactions it committed. A client that failed raises, with
        pgbench's output."""
        code = self.process.wait(timeout)
        output = self.log_path.read_text(errors="replace")
        processed = _PROCESSED.search(output)
        if code != 0 or processed is None:
            raise HarnessError(f"pgbench failed (exit {code}); {self.log_path}:\n{output[-2000:]}")
        return int(processed.group(1))

    def stop(self, timeout: float = 10.0) -> int | None:
        """Ends pgbench before its time is up (SIGTERM, then SIGKILL); its exit code. The
        transactions committed so far stay."""
        return stop_process(self.process, timeout)


def _pgbench(pg: PostgresServer) -> list[str]:
    if pg.port is None:
        raise HarnessError("PostgreSQL is not started")
    return [str(pg.program("pgbench")), "-h", pg.host, "-p", str(pg.port), "-U", USER]
