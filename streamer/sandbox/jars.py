"""Maven Central artifacts and their dependencies, fetched once into a cache.

    jars = fetch("kafka", "4.4.0", ["org.apache.kafka:kafka_2.13:4.4.0"])
    subprocess.run(["java", "-cp", jars.classpath, ...])

`fetch` writes a one-off pom naming the artifacts and runs Maven's `dependency:copy-dependencies`
(runtime scope) with the Maven of the machine, as configured there (its settings and local
repository). The jars land in `<cache>/<name>-<version>/`, where a later call finds them: the
cache is `.cache/jars/` at the top of a clone when the package runs from one (an editable install,
the tests), else `~/.cache/mor-streamer/jars/` (`$XDG_CACHE_HOME` when set). Two processes that
fetch the same set at once do the work once: a lock file serialises them, and the directory
appears by an atomic rename, so a fetch killed half-way leaves nothing that looks complete.

`unpacked` does the same for a server published as an archive (a zip or tar.gz of its
distribution): Maven's `dependency:unpack` lays it out in `<cache>/<name>-<version>/`.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from streamer.errors import InvalidArgumentError, MavenFetchError

__all__ = ["JarSet", "MavenFetchError", "default_cache", "fetch", "unpacked"]

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MANIFEST = "artifacts.txt"  # the coordinates a directory was fetched for
MVN_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class JarSet:
    """The jars of one fetched artifact set."""

    directory: Path

    @property
    def jars(self) -> list[Path]:
        return sorted(self.directory.glob("*.jar"))

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)


def default_cache() -> Path:
    """`.cache/jars/` of the clone this package runs from, else the user's cache directory."""
    clone = Path(__file__).resolve().parents[2]
    if (clone / "pyproject.toml").is_file() and (clone / "streamer").is_dir():
        return clone / ".cache" / "jars"
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(user_cache) / "mor-streamer" / "jars"


def fetch(
    name: str, version: str, artifacts: Sequence[str], cache: Path | None = None, exclusions: Sequence[str] = ()
) -> JarSet:
    """The jars of `artifacts` ("group:artifact:version" each) and of their runtime dependencies,
    in `cache/<name>-<version>/` (`default_cache()` unless given); fetched with Maven unless
    already there for the same artifacts. `exclusions` ("group:artifact" each) are left out of
    every artifact's dependencies (a dependency that cannot resolve on this JDK, such as Hadoop's
    `jdk.tools`)."""
    cache = default_cache() if cache is None else cache
    for coordinate in artifacts:
        if len(coordinate.split(":")) != 3:
            raise InvalidArgumentError(f"{coordinate!r}: expected group:artifact:version")
    for excluded in exclusions:
        if len(excluded.split(":")) != 2:
            raise InvalidArgumentError(f"{excluded!r}: expected group:artifact")
    manifest = "\n".join(sorted(artifacts)) + "\n" + "".join(f"exclude {e}\n" for e in sorted(exclusions))
    return JarSet(
        _cached(
            name,
            version,
            manifest,
            cache,
            lambda work: _run_maven(
                work,
                artifacts,
                f"jar set {name}-{version}",
                ["-f", str(work / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime"],
                pom=_pom(name, version, artifacts, exclusions),
            ),
        )
    )


def unpacked(name: str, version: str, archive: str, cache: Path | None = None) -> Path:
    """The directory of `archive` ("group:artifact:version[:type[:classifier]]", a jar, zip or
    tar.gz) unpacked: `cache/<name>-<version>/` (`default_cache()` unless given), fetched with
    Maven and unpacked unless already there."""
    cache = default_cache() if cache is None else cache
    if not 3 <= len(archive.split(":")) <= 5:
        raise InvalidArgumentError(f"{archive!r}: expected group:artifact:version[:type[:classifier]]")
    return _cached(
        name,
        version,
        archive + "\n",
        cache,
        lambda work: _run_maven(
            work, [archive], f"archive {name}-{version}", [f"{DEPENDENCY_PLUGIN}:unpack", f"-Dartifact={archive}"]
        ),
    )


def _cached(name: str, version: str, manifest: str, cache: Path, fill: Callable[[Path], None]) -> Path:
    """`cache/<name>-<version>/`, filled by `fill(work)` into `work/jars` unless it holds
    `manifest` already; one process fills it at a time, and it appears whole or not at all."""
    target = cache / f"{name}-{version}"
    if _is_complete(target, manifest):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if _is_complete(target, manifest):  # another process fetched it while we waited
            return target
        for stale in cache.glob(f".{name}-{version}-*"):  # left by a fetch that was killed
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-{version}-", dir=cache))
        try:
            fill(work)
            (work / "jars" / MANIFEST).write_text(manifest)
            if target.exists():  # fetched before for other artifacts
                shutil.rmtree(target)
            os.rename(work / "jars", target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _is_complete(directory: Path, manifest: str) -> bool:
    try:
        return (directory / MANIFEST).read_text() == manifest
    except OSError:
        return False


def _run_maven(work: Path, artifacts: Sequence[str], what: str, goal: list[str], pom: str | None = None) -> None:
    """Run Maven's `goal` in `work`, its output into `work/jars`; a failure names the artifacts."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenFetchError(
            f"cannot fetch {', '.join(artifacts)} from Maven Central: no `mvn` on the PATH; "
            "install Apache Maven (Debian/Ubuntu: apt-get install maven)"
        )
    if pom is not None:
        (work / "pom.xml").write_text(pom)
    command = [mvn, "-B", "-q", *goal, f"-DoutputDirectory={work / 'jars'}"]
    try:
        done = subprocess.run(
            command, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=MVN_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        raise MavenFetchError(f"mvn did not fetch {', '.join(artifacts)} within {MVN_TIMEOUT_SECONDS}s") from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        named = [a for a in artifacts if ":".join(a.split(":")[:2]) in output] or list(artifacts)
        errors = [line for line in output.splitlines() if "ERROR" in line][:8] or output.splitlines()[-8:]
        raise MavenFetchError(
            f"mvn could not fetch {', '.join(named)} ({what}, exit {done.returncode}):\n" + "\n".join(errors)
        )


def _pom(name: str, version: str, artifacts: Sequence[str], exclusions: Sequence[str] = ()) -> str:
    excluded = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in (e.split(":") for e in exclusions)
    )
    excluded = f"<exclusions>{excluded}</exclusions>" if excluded else ""
    dependencies = "".join(
        f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>"
        f"<version>{escape(v)}</version>{excluded}</dependency>"
        for g, a, v in (coordinate.split(":") for coordinate in artifacts)
    )
    artifact_id = re.sub(r"[^A-Za-z0-9_.-]", "-", name)
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>local.sandbox</groupId><artifactId>{artifact_id}</artifactId>"
        f"<version>{escape(version)}</version><packaging>pom</packaging>"
        f"<dependencies>{dependencies}</dependencies></project>\n"
    )
