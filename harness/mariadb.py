"""MariaDB for tests: Debian's package, one server in a directory of its own on a free loopback
port, with a row-based binlog so that Debezium can stream its changes.

    with MariaDbServer() as db:
        db.sql("CREATE DATABASE shop")
        db.sql("CREATE TABLE t (id int PRIMARY KEY, name text)", "shop")

The binaries are installed when they are missing (`apt-get install mariadb-server`; Debian's
policy keeps the package's service from starting in a container, and nothing here uses it); the
server runs directly, never as a system service: `mariadb-install-db` into the work directory,
then `mariadbd` as a child process stopped by its pid. Under root the server keeps running as
root (`--user=root`), so the work directory needs no other owner. The binlog is what Debezium
reads (`log-bin`, row events with every column: `binlog_format=ROW`, `binlog_row_image=FULL`);
`root` connects through the server's socket, Debezium over TCP as `USER`. Durability is traded
for speed: the data lives as long as the test run.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from harness.errors import HarnessError
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess

PACKAGES = ("mariadb-server", "mariadb-client")
#: Where Debian puts the server, which is not on every PATH.
MARIADBD = Path("/usr/sbin/mariadbd")
#: The account Debezium connects as: the privileges its binlog connector asks for, no more.
USER, PASSWORD = "debezium", "debezium"
GRANTS = "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, LOCK TABLES"
SETTINGS = {
    # Debezium's MySqlConnector reads MariaDB's own version (10.11) as a MySQL newer than 8.4 and
    # asks for `SHOW BINARY LOG STATUS`, which MariaDB lacks; a 5.7-shaped version makes it use
    # `SHOW MASTER STATUS`, which MariaDB has. The server is unchanged; `version()` says both.
    "version": "5.7.99-10.11-MariaDB",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "server-id": "1",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_unicode_ci",
    "skip-name-resolve": "ON",
    "innodb-buffer-pool-size": "32M",
    "innodb-flush-log-at-trx-commit": "0",
    "sync-binlog": "0",
    "max-connections": "40",
}


def install_mariadb() -> None:
    """Debian's MariaDB server and client, unless `mariadbd` is there already."""
    if MARIADBD.exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "-o", "Dpkg::Options::=--force-confold", *PACKAGES],
    ):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-2000:]
            raise HarnessError(f"{' '.join(command)} failed (exit {done.returncode}):\n{output}")


class MariaDbServer(ServerProcess):
    """One MariaDB server as a child process; `sql` talks to it with the `mariadb` client."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, log_path, startup_timeout, die_with_parent, temp_prefix="mariadb-")
        self.user, self.password = USER, PASSWORD

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def socket(self) -> Path:
        return self.work_dir / "mariadb.sock"

    def start(self) -> MariaDbServer:
        if self.is_running():
            return self
        install_mariadb()
        first_start = self.port is None
        if first_start:
            self.port = free_port(self.host)
            self._init_data_dir()
        settings = {
            **SETTINGS,
            "datadir": self.data_dir,
            "port": self.port,
            "bind-address": self.host,
            "socket": self.socket,
            "pid-file": self.work_dir / "mariadb.pid",
            "tmpdir": self.work_dir,
            "log-bin": self.work_dir / "binlog" / "mariadb-bin",
        }
        run_as = ["--user=root"] if os.geteuid() == 0 else []
        self._spawn([str(MARIADBD), "--no-defaults", *run_as, *(f"--{k}={v}" for k, v in settings.items())])
        deadline = time.monotonic() + self.startup_timeout
        while not self._answers():
            if not self.is_running():
                raise HarnessError(f"MariaDB exited while starting; log {self.log_path}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise HarnessError(
                    f"MariaDB did not answer within {self.startup_timeout:.0f}s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        if first_start:
            self.sql(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT {GRANTS} ON *.* TO '{USER}'@'%';")
        return self

    # -- SQL -------------------------------------------------------------------------------------
    def sql(self, script: str, database: str | None = None) -> str:
        """Run a script as root (statements separated by semicolons; an error stops it and
        raises); the output is tab-separated rows without a header, NULL as `NULL`."""
        command = [
            "mariadb",
            "--no-defaults",
            f"--socket={self.socket}",
            "--user=root",
            "--batch",
            "--skip-column-names",
        ]
        done = subprocess.run(
            [*command, *([database] if database else [])],
            input=script,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise HarnessError(
                f"mariadb failed (exit {done.returncode}): {done.stderr.strip()}\nscript: {script[:500]}"
            )
        return done.stdout

    # -- internals -------------------------------------------------------------------------------
    def _answers(self) -> bool:
        ping = ["mariadb-admin", "--no-defaults", f"--socket={self.socket}", "--user=root", "ping"]
        return subprocess.run(ping, capture_output=True, stdin=subprocess.DEVNULL).returncode == 0

    def _init_data_dir(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "binlog").mkdir(exist_ok=True)
        run_as = ["--user=root"] if os.geteuid() == 0 else []
        command = [
            "mariadb-install-db",
            "--no-defaults",
            *run_as,
            f"--datadir={self.data_dir}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise HarnessError(
                f"mariadb-install-db failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}"
            )
