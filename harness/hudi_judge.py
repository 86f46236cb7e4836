"""Apache Hudi itself as the judge: its 0.15 Spark bundle on a pyspark 3.5 of its own.

Our runtime is Spark 4; Hudi 0.15 (the last release that writes table version 6) runs on
Spark 3.5 only, so the judge lives in a virtual environment of its own,
`.cache/hudi-judge/venv` in the clone, with Hudi's bundles (0.15, and 1.0.2 for the second
judge) fetched from Maven Central by `mvn` into `.cache/hudi-judge/jars/<version>`. `install()` builds both once (`python -m harness.hudi_judge
install`, which `make test` runs) and is a no-op afterwards.

`HudiJudge.start()` launches `hudi_judge_server.py` in that environment: one long-lived Spark
session that answers reads, SQL and writes over a Unix socket, so a test session (or a bench
script timing Hudi's own upserts) pays for the JVM once:

    judge = HudiJudge.start(work_dir)
    rows = judge.snapshot(path)                        # spark.read.format("hudi")
    judge.upsert(path, batch, {"hoodie.table.name": ...})
    judge.sql("CALL run_compaction(op => 'run', path => '...')")
    judge.stop()
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from harness.errors import HarnessError
from harness.hudi_judge_server import receive, send

REPO = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).resolve().with_name("hudi_judge_server.py")

SPARK_VERSION = "3.5.1"  # what Hudi 0.15 is built and tested against (apache/hudi#12099)
HUDI_BUNDLE = ("org.apache.hudi", "hudi-spark3.5-bundle_2.12", "0.15.0")
#: The second judge: Apache Hudi 1.x, whose writers upgrade a table to version 8 unless told not to
#: (`tests/hudi/test_hudi_1x.py`). Its Spark 3.5 bundle runs on the same pyspark.
HUDI_1X_BUNDLE = ("org.apache.hudi", "hudi-spark3.5-bundle_2.12", "1.0.2")
BUNDLES = (HUDI_BUNDLE, HUDI_1X_BUNDLE)
JUDGE_REQUIREMENTS = (f"pyspark=={SPARK_VERSION}", "pyarrow>=15,<21")
START_TIMEOUT_SECONDS = 300.0

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.mor-streamer</groupId>
  <artifactId>hudi-judge-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
  </dependencies>
</project>
"""


class HudiJudgeError(HarnessError):
    """Hudi (or Spark) refused a request; the message is the Java exception's."""

    def __init__(self, message: str, trace: str = ""):
        super().__init__(message)
        self.trace = trace


@dataclass(frozen=True)
class JudgeInstall:
    """Where the judge's environment and jars live, and whether they are complete."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def jars_dir(self) -> Path:
        return self.root / "jars"

    @property
    def stamp(self) -> Path:
        return self.root / ".installed"

    @property
    def identity(self) -> str:
        """What the stamp records: a change of pinned versions reinstalls."""
        return json.dumps({"requirements": JUDGE_REQUIREMENTS, "bundles": BUNDLES})

    def jars(self, bundle: tuple[str, str, str] = HUDI_BUNDLE) -> list[Path]:
        return sorted((self.jars_dir / bundle[2]).glob("*.jar"))

    def is_complete(self) -> bool:
        return self.stamp.exists() and self.stamp.read_text() == self.identity and all(map(self.jars, BUNDLES))


def default_install() -> JudgeInstall:
    return JudgeInstall(Path(os.environ.get("HUDI_JUDGE_HOME", REPO / ".cache" / "hudi-judge")))


def install(target: JudgeInstall | None = None, log=print) -> JudgeInstall:
    """Create the judge's venv and fetch Hudi's bundle, once; later calls only check the stamp.

    A lock file serialises concurrent callers (two test processes starting at once)."""
    target = target or default_install()
    target.root.mkdir(parents=True, exist_ok=True)
    with open(target.root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_complete():
            return target
        bundles = " and ".join(":".join(bundle) for bundle in BUNDLES)
        log(f"hudi-judge: installing pyspark {SPARK_VERSION} and {bundles} in {target.root}")
        target.stamp.unlink(missing_ok=True)
        if not target.python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(target.venv)], check=True)
        subprocess.run(
            [str(target.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *JUDGE_REQUIREMENTS],
            check=True,
        )
        shutil.rmtree(target.jars_dir, ignore_errors=True)
        for bundle in BUNDLES:
            _fetch_bundle(target, bundle)
        target.stamp.write_text(target.identity)
    return target


def _fetch_bundle(target: JudgeInstall, bundle: tuple[str, str, str]) -> None:
    """`mvn dependency:copy-dependencies` of the bundle alone (it shades what it needs)."""
    group, artifact, version = bundle
    if shutil.which("mvn") is None:
        raise HudiJudgeError(
            f"fetching {group}:{artifact}:{version} needs Maven: mvn is not on PATH (Debian: apt-get install maven)"
        )
    pom = target.root / "pom.xml"
    pom.write_text(_POM.format(group=group, artifact=artifact, version=version))
    fetched = subprocess.run(
        [
            "mvn",
            "--batch-mode",
            "--quiet",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={target.jars_dir / version}",
        ],
        capture_output=True,
        text=True,
    )
    if fetched.returncode != 0 or not target.jars(bundle):
        raise HudiJudgeError(
            f"mvn could not fetch {':'.join(bundle)} (exit {fetched.returncode}):\n"
            f"{fetched.stdout[-3000:]}{fetched.stderr[-3000:]}"
        )


class HudiJudge:
    """A client of one running judge server; `stop()` ends it by its pid."""

    def __init__(self, process: subprocess.Popen, conn: socket.socket, log_path: Path):
        self.process = process
        self.log_path = log_path
        self._conn = conn
        self.versions: dict = self._call({"op": "versions"})[0]

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        work_dir: Path,
        target: JudgeInstall | None = None,
        driver_memory: str = "1g",
        spark_conf: dict[str, str] | None = None,
        bundle: tuple[str, str, str] = HUDI_BUNDLE,
    ) -> HudiJudge:
        """Start a judge server of `bundle` (Hudi 0.15 unless told); `spark_conf` overrides its test
        session's Spark settings."""
        target = install(target)
        work_dir.mkdir(parents=True, exist_ok=True)
        sock_path = work_dir / "judge.sock"
        log_path = work_dir / "judge.log"
        sock_path.unlink(missing_ok=True)
        env = {
            **os.environ,
            "PYSPARK_PYTHON": str(target.python),
            "PYSPARK_DRIVER_PYTHON": str(target.python),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        for leaked in ("SPARK_HOME", "PYTHONPATH", "VIRTUAL_ENV"):  # ours point at Spark 4
            env.pop(leaked, None)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [
                    str(target.python),
                    str(SERVER),
                    "--socket",
                    str(sock_path),
                    "--jars",
                    ",".join(str(j) for j in target.jars(bundle)),
                    "--driver-memory",
                    driver_memory,
                    *(arg for key, value in (spark_conf or {}).items() for arg in ("--conf", f"{key}={value}")),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(work_dir),
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not sock_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                raise HudiJudgeError(
                    f"the judge did not start (exit {process.returncode}); its log ends with:\n{_tail(log_path)}"
                )
            time.sleep(0.2)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(sock_path))
        return cls(process, conn, log_path)

    # -- reads -------------------------------------------------------------------------------

    def snapshot(self, path: str | Path, options: dict | None = None) -> pa.Table:
        return self.read(path, "snapshot", options=options)

    def read_optimized(self, path: str | Path, options: dict | None = None) -> pa.Table:
        return self.read(path, "read_optimized", options=options)

    def incremental(
        self, path: str | Path, begin: str, end: str | None = None, options: dict | None = None
    ) -> pa.Table:
        """Records written by commits in (begin, end], as Hudi's incremental query."""
        return self.read(path, "incremental", begin=begin, end=end, options=options)

    def time_travel(self, path: str | Path, as_of: str, options: dict | None = None) -> pa.Table:
        return self.read(path, "time_travel", as_of=as_of, options=options)

    def read(self, path: str | Path, query: str, **request) -> pa.Table:
        return self._call({"op": "read", "path": str(path), "query": query, **request})[1]

    def sql(self, statement: str) -> pa.Table:
        return self._call({"op": "sql", "sql": statement})[1]

    def table(self, name: str) -> pa.Table:
        """Every row of a catalog table, read by name (`db.table`) after a refresh."""
        return self._call({"op": "table", "name": name})[1]

    # -- writes ------------------------------------------------------------------------------

    def write(
        self,
        path: str | Path,
        rows: pa.Table,
        options: dict[str, str],
        mode: str = "append",
        hold_until: Path | None = None,
    ) -> None:
        """`df.write.format("hudi").options(options).mode(mode).save(path)` of these rows; with
        `hold_until`, Hudi's write stays pending (its instant on the timeline, its rows not yet
        given to it) until that file exists."""
        request = {"op": "write", "path": str(path), "options": options, "mode": mode}
        self._call(request | ({"hold_until": str(hold_until)} if hold_until else {}), rows)

    def write_parquet(
        self, path: str | Path, source: str | Path, options: dict[str, str], mode: str = "append"
    ) -> None:
        """As `write`, of the rows of the Parquet file `source` (read by the judge's Spark)."""
        self._call({"op": "write", "path": str(path), "options": options, "mode": mode, "source": str(source)})

    def upsert(self, path: str | Path, rows: pa.Table, options: dict[str, str], hold_until: Path | None = None) -> None:
        self.write(path, rows, {**options, "hoodie.datasource.write.operation": "upsert"}, hold_until=hold_until)

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the server to stop its session; kill it by its pid if it does not exit in time."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError, EOFError, HudiJudgeError):
                self._call({"op": "stop"})
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait()
        self._conn.close()

    def _call(self, header: dict, rows: pa.Table | None = None) -> tuple[dict, pa.Table | None]:
        if self.process.poll() is not None:
            raise HudiJudgeError(f"the judge has exited ({self.process.returncode}); log:\n{_tail(self.log_path)}")
        send(self._conn, header, rows)
        answer, payload = receive(self._conn)
        if not answer.get("ok"):
            raise HudiJudgeError(answer.get("error", "failed"), answer.get("trace", ""))
        return answer, payload


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["install"]:
        raise SystemExit("usage: python -m harness.hudi_judge install")
    print(f"hudi-judge: ready in {install().root}")


if __name__ == "__main__":
    main()
