"""An S3-compatible server for tests: S3Proxy, started from its Maven Central jars, one process
on a free loopback port, its buckets in a directory of its own (jclouds' filesystem backend).

    with S3Server() as s3:
        s3.create_bucket("tables")
        ... s3.endpoint_url, s3.storage_options, s3.environment ...
        mark = s3.requests.mark()
        ...
        s3.requests.since(mark, bucket="tables")   # Counter({"PUT": 12, "GET": 30, ...})
        s3.restart()      # same port, same data: the objects survive

No Docker and no mock: the jars come from `streamer.sandbox.jars` (fetched once into the clone's
`.cache/`), the server runs as `java -cp <jars> org.gaul.s3proxy.Main --properties ...` and is
stopped by its pid. It checks AWS signatures (v2 or v4) against its own random key pair. Its
request handler logs every request it receives; `RequestLog` counts them by kind from that log.
"""

from __future__ import annotations

import collections
import datetime
import os
import re
import secrets
import time
import urllib.error
import urllib.request

import pyarrow.fs as pafs

from harness.errors import HarnessError
from streamer.sandbox import jars
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess, java_executable

S3PROXY_VERSION = "4.1.0"
ARTIFACTS = (
    f"org.gaul:s3proxy:{S3PROXY_VERSION}",
    # Its Jackson 3 needs annotations newer than the 2.18 Maven's nearest-wins picks for it.
    "com.fasterxml.jackson.core:jackson-annotations:2.22",
)
JVM_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
REGION = "us-east-1"

_LOGBACK = """\
<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %level %logger{20} %msg%n</pattern></encoder>
  </appender>
  <!-- one line per request received: what RequestLog counts -->
  <logger name="org.gaul.s3proxy.S3ProxyHandler" level="DEBUG"/>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""

# "request: ...{GET@5ccf1935 http://127.0.0.1:19090/bucket/key?x=y HTTP/1.1}}}"
_REQUEST_LINE = re.compile(r"S3ProxyHandler request: .*\{([A-Z]+)@[0-9a-f]+ https?://[^/\s]+(/\S*) HTTP/")
KINDS = ("PUT", "GET", "LIST", "HEAD", "DELETE")


class S3ServerError(HarnessError):
    """The S3 server did not start or answer."""


def s3proxy_jars() -> jars.JarSet:
    """S3Proxy and its dependencies, fetched on first use."""
    return jars.fetch("s3proxy", S3PROXY_VERSION, ARTIFACTS)


def request_kind(method: str, target: str) -> str:
    """The kind of an S3 request (`KINDS`) from its method and path: a GET of a bucket lists it,
    a multipart upload's requests are PUTs, a bulk delete (POST ?delete) a DELETE."""
    path, _, query = target.partition("?")
    is_bucket = path.strip("/").count("/") == 0
    if method == "GET":
        return "LIST" if is_bucket else "GET"
    if method == "POST":
        return "DELETE" if query.split("&")[0] == "delete" else "PUT"
    return method


class RequestLog:
    """The requests the server logged, counted by kind; `mark()` then `since(mark)` counts those
    of a stretch of work."""

    def __init__(self, log_path: str):
        self._path = log_path

    def mark(self) -> int:
        try:
            return os.path.getsize(self._path)
        except OSError:
            return 0

    def since(self, mark: int = 0, bucket: str | None = None, key: str | None = None) -> collections.Counter:
        """Requests logged after `mark`, of one bucket if named (of one object, `key`, in it):
        Counter of KINDS."""
        return collections.Counter(kind for _, kind in self.timed(mark, bucket, key))

    def timed(
        self, mark: int = 0, bucket: str | None = None, key: str | None = None
    ) -> list[tuple[datetime.datetime, str]]:
        """Requests logged after `mark`, of one bucket if named (of one object, `key`, in it):
        (when logged, kind) in order, to share out among stretches of work that another process
        timed (a job's micro-batches)."""
        found = []
        with open(self._path, "rb") as f:
            f.seek(mark)
            for line in f.read().decode("utf-8", "replace").splitlines():
                match = _REQUEST_LINE.search(line)
                if match is None:
                    continue
                method, target = match.groups()
                target_bucket, _, target_key = target.lstrip("/").split("?")[0].partition("/")
                if (bucket is None or target_bucket == bucket) and (key is None or target_key == key):
                    logged = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                    found.append((logged, request_kind(method, target)))
        return found


class S3Server(ServerProcess):
    """One S3Proxy process. `start()` waits until it answers HTTP; `restart()` comes back on the
    same port with the same buckets; `hang()` and `wake()` freeze and thaw it (`ServerProcess`)."""

    STOP_TIMEOUT = 20.0

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 90.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, None, startup_timeout, die_with_parent, temp_prefix="s3-")
        self.access_key_id = "test-" + secrets.token_hex(6)
        self.secret_access_key = secrets.token_hex(20)
        self.requests = RequestLog(self.log_path)

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise HarnessError("S3 server not started")
        return f"http://{self.host}:{self.port}"

    @property
    def storage_options(self) -> dict[str, str]:
        """The table storage options (`table.storage.file_io.S3Options`) that reach this server."""
        return {
            "aws_endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
            "aws_region": REGION,
            "aws_allow_http": "true",
        }

    @property
    def environment(self) -> dict[str, str]:
        """The same, as the environment variables AWS tools read."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> S3Server:
        if self.is_running():
            return self
        classpath = s3proxy_jars().classpath
        if self.port is None:
            self.port = free_port(self.host)
            self._write_config()
        self._spawn(self._command(classpath))
        deadline = time.monotonic() + self.startup_timeout
        while not self._answers():
            if not self.is_running() or time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise S3ServerError(
                    f"S3Proxy {S3PROXY_VERSION} did not start on {self.endpoint_url}:\n"
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        return self

    # -- buckets -----------------------------------------------------------------------------------
    def filesystem(self) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(
            access_key=self.access_key_id,
            secret_key=self.secret_access_key,
            region=REGION,
            endpoint_override=f"{self.host}:{self.port}",
            scheme="http",
            allow_bucket_creation=True,
        )

    def create_bucket(self, name: str) -> str:
        """Create a bucket (nothing if it exists); returns its name."""
        self.filesystem().create_dir(name)
        return name

    # -- internals ---------------------------------------------------------------------------------
    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint_url + "/", timeout=2).close()
        except urllib.error.HTTPError:
            return True  # an S3 error document: the server is up
        except (TimeoutError, urllib.error.URLError, ConnectionError):
            return False
        return True

    def _write_config(self) -> None:
        (self.work_dir / "data").mkdir(parents=True, exist_ok=True)
        settings = {
            "s3proxy.endpoint": self.endpoint_url,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key_id,
            "s3proxy.credential": self.secret_access_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.work_dir / "data"),
        }
        (self.work_dir / "s3proxy.conf").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.work_dir / "logback.xml").write_text(_LOGBACK)

    def _command(self, classpath: str) -> list[str]:
        return [
            java_executable(),
            *JVM_OPTIONS,
            f"-Dlogback.configurationFile={self.work_dir / 'logback.xml'}",
            "-cp",
            classpath,
            "org.gaul.s3proxy.Main",
            "--properties",
            str(self.work_dir / "s3proxy.conf"),
        ]
