"""PostgreSQL for tests: Debian's package, one server in a directory of its own on a free loopback
port, with `wal_level=logical` so that Debezium can stream its changes.

    with PostgresServer() as pg:
        pg.sql("CREATE TABLE t (id int PRIMARY KEY, name text)")
        pg.rows("SELECT * FROM t")     # [{"id": 1, "name": "a"}, ...]

The binaries are installed when they are missing (`apt-get install postgresql`, with Debian's
automatic cluster turned off, so that nothing else starts); the server runs directly, never as a
system service: `initdb` into the work directory, then `postgres` as a child process stopped by its
pid. PostgreSQL refuses to run as root, so under root both run as the `postgres` user the package
creates, which owns the work directory (the directories above it get search permission only, so
that it can reach it). Durability is traded for speed (`fsync=off`): the data lives as long as
the test run.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from harness.errors import HarnessError
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess

USER = "postgres"  # the superuser initdb makes, and the system user that runs the server under root
PACKAGE = "postgresql"
#: Debian's postgresql-common makes and starts a cluster of its own when installed unless told not to.
NO_MAIN_CLUSTER = Path("/etc/postgresql-common/createcluster.d/mor-streamer-tests.conf")
SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "40",
}


def postgres_bin_dir() -> Path:
    """The directory of `initdb`, `postgres` and `psql` of the newest PostgreSQL Debian installed;
    installed from Debian's packages when there is none."""
    found = _newest_bin_dir()
    if found is not None:
        return found
    NO_MAIN_CLUSTER.parent.mkdir(parents=True, exist_ok=True)
    NO_MAIN_CLUSTER.write_text("create_main_cluster = false\n")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "-o", "Dpkg::Options::=--force-confold", PACKAGE],
    ):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-2000:]
            raise HarnessError(f"{' '.join(command)} failed (exit {done.returncode}):\n{output}")
    found = _newest_bin_dir()
    if found is None:
        raise HarnessError(f"apt-get installed {PACKAGE} but no /usr/lib/postgresql/*/bin/postgres is there")
    return found


def _newest_bin_dir() -> Path | None:
    dirs = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")]
    return max(dirs, key=lambda d: int(d.parent.name)) if dirs else None


class PostgresServer(ServerProcess):
    """One PostgreSQL server as a child process; `sql` and `rows` talk to it with `psql`."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, log_path, startup_timeout, die_with_parent, temp_prefix="postgres-")
        self.bin_dir: Path | None = None

    def program(self, name: str) -> Path:
        """One of PostgreSQL's programs, from the binaries `start` found."""
        if self.bin_dir is None:
            raise HarnessError("PostgreSQL is not started")
        return self.bin_dir / name

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/postgres"

    def start(self) -> PostgresServer:
        if self.is_running():
            return self
        self.bin_dir = postgres_bin_dir()
        if self.port is None:
            self.port = free_port(self.host)
            self._init_data_dir()
        settings = [
            f"--{name}={value}"
            for name, value in {
                **SETTINGS,
                "port": self.port,
                "listen_addresses": self.host,
                "unix_socket_directories": str(self.work_dir),
            }.items()
        ]
        self._spawn(self._as_server_user([str(self.program("postgres")), "-D", str(self.data_dir), *settings]))
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.is_running():
                raise HarnessError(f"PostgreSQL exited while starting; log {self.log_path}:\n{self.log_tail()}")
            ready = subprocess.run(
                [str(self.program("pg_isready")), "-h", self.host, "-p", str(self.port), "-U", USER],
                capture_output=True,
                stdin=subprocess.DEVNULL,
            )
            if ready.returncode == 0:
                return self
            if time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise HarnessError(
                    f"PostgreSQL did not answer within {self.startup_timeout:.0f}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    # -- SQL -------------------------------------------------------------------------------------
    def sql(self, script: str, database: str = "postgres") -> str:
        """Run a script (statements separated by semicolons; an error stops it and raises)."""
        done = subprocess.run(
            [
                str(self.program("psql")),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                database,
            ],
            input=script,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise HarnessError(f"psql failed (exit {done.returncode}): {done.stderr.strip()}\nscript: {script[:500]}")
        return done.stdout

    def rows(self, query: str, database: str = "postgres") -> list[dict]:
        """The rows of a query as PostgreSQL's own JSON makes them."""
        out = self.sql(f"SELECT coalesce(json_agg(q), '[]') FROM ({query}) q", database)
        return json.loads(out)

    def value(self, query: str, database: str = "postgres") -> str:
        return self.sql(query, database).strip()

    # -- internals -------------------------------------------------------------------------------
    def _init_data_dir(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam(USER)
            for path in (self.work_dir, *self.work_dir.parents):
                if path == Path("/"):
                    break
                os.chmod(path, os.stat(path).st_mode | 0o011)  # the server's user passes through
            shutil.chown(self.work_dir, account.pw_uid, account.pw_gid)
        command = [
            str(self.program("initdb")),
            "-D",
            str(self.data_dir),
            "-U",
            USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(
            self._as_server_user(command), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise HarnessError(f"initdb failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")

    def _as_server_user(self, command: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return command
        return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--", *command]
