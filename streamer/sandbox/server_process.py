"""A server run as a child process (a JVM, mostly): its output in a log file, stopped by its pid
(SIGTERM, then SIGKILL), frozen and thawed to play a hung server, and killed by the kernel with
the process that started it (`die_with_parent`), so a crashed test run leaves nothing behind; or
`detach`ed, to outlive it (`streamer kafka start`).

`KafkaBroker` and the tests' `S3Server` are such servers; each says how to start and when it answers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TypeVar

from streamer.errors import BrokerStartError, ServerNotRunningError

Server = TypeVar("Server", bound="ServerProcess")


def java_executable() -> str:
    """`$JAVA_HOME/bin/java`, else the `java` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on the PATH"
        raise BrokerStartError(
            f"{where}: install Java 17 or 21 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    return java


class ServerProcess(ABC):
    """The lifecycle shared by the servers; subclasses define `start()`."""

    #: Seconds `stop()` waits after SIGTERM before SIGKILL.
    STOP_TIMEOUT = 30.0

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None,
        host: str,
        log_path: str | os.PathLike[str] | None,
        startup_timeout: float,
        die_with_parent: bool | None,
        temp_prefix: str,
    ):
        self.host = host
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix=temp_prefix))
        self._owns_work_dir = work_dir is None
        self.log_path = str(log_path) if log_path is not None else str(self.work_dir / "server.log")
        self.startup_timeout = startup_timeout
        self.die_with_parent = (
            threading.current_thread() is threading.main_thread() if die_with_parent is None else die_with_parent
        )
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None

    @abstractmethod
    def start(self: Server) -> Server:
        """Start the server and wait until it answers; nothing when it runs already."""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 64 * 1024))
                data = f.read()
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code."""
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return stop_process(proc, timeout or self.STOP_TIMEOUT) if proc is not None else None

    def restart(self: Server, timeout: float | None = None) -> Server:
        """Stop, then start again on the same ports with the same data."""
        self.stop(timeout)
        return self.start()

    def hang(self) -> None:
        """Freeze the process (SIGSTOP): connections are accepted or stay open, nothing is answered."""
        os.kill(self.running_pid(), signal.SIGSTOP)

    def wake(self) -> None:
        os.kill(self.running_pid(), signal.SIGCONT)

    def detach(self) -> None:
        """Let the server outlive this process: it is no longer stopped when this object goes."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._proc = None

    def close(self) -> None:
        """Stop, and remove the work directory if this object made it."""
        self.stop()
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self: Server) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.is_running() else "stopped"
        return f"{type(self).__name__}({self.host}:{self.port}, {state}, log={self.log_path})"

    def running_pid(self) -> int:
        """The process id, which only a running server has."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise ServerNotRunningError(f"{self!r} is not running")
        return proc.pid

    def _spawn(self, command: list[str]) -> None:
        """Start `command` with its output appended to the log, after the command line itself. A
        server that does not die with its parent gets a session of its own: closing the terminal
        it was started from does not stop it."""
        if self.die_with_parent and shutil.which("setpriv"):
            command = ["setpriv", "--pdeathsig", "KILL", "--", *command]
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
                start_new_session=not self.die_with_parent,
            )
        # Stop the server when this object is collected or at interpreter exit, if nobody did.
        self._finalizer = weakref.finalize(self, stop_process, self._proc, 10.0)


def stop_process(proc: subprocess.Popen, timeout: float) -> int | None:
    if proc.poll() is not None:
        return proc.returncode
    try:
        proc.send_signal(signal.SIGCONT)  # a frozen server handles SIGTERM only once woken
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout)
