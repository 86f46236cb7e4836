"""A real Prometheus server for tests: Debian's `prometheus` package, run as a child process.

    with PrometheusServer(["127.0.0.1:9108"], work_dir) as prometheus:
        prometheus.query('mor_streamer_records_read_total{table="orders"}')

The binary is installed when it is missing (`apt-get update` once, then `apt-get install
prometheus` without its recommendations); it runs directly, never as a system service, with its
own config and storage directory, on a free loopback port, scraping the targets every
`SCRAPE_SECONDS`, and is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError
from streamer.sandbox.ports import free_port

SCRAPE_SECONDS = 2  # a scrape may take this long: the lag is asked of Kafka when scraped
BINARY = "prometheus"


def prometheus_binary() -> str:
    """The path of `prometheus`, installed from Debian's packages when it is missing."""
    found = shutil.which(BINARY)
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", BINARY]):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise HarnessError(
                f"{' '.join(command)} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}"
            )
    found = shutil.which(BINARY)
    if not found:
        raise HarnessError("apt-get installed the prometheus package but no `prometheus` is on the PATH")
    return found


class PrometheusServer:
    """One Prometheus scraping `targets` (host:port, path /metrics) as the job `mor-streamer`,
    evaluating the alerting rules of `rule_files`."""

    def __init__(
        self,
        targets: list[str],
        work_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        rule_files: Sequence[str | os.PathLike[str]] = (),
    ):
        self.targets = targets
        self.rule_files = [str(Path(f).resolve()) for f in rule_files]
        self.work_dir = Path(work_dir)
        self.host = host
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "prometheus.log"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        binary = prometheus_binary()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        config.write_text(
            json.dumps(
                {  # YAML is a superset of JSON
                    "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                    "rule_files": self.rule_files,
                    "scrape_configs": [{"job_name": "mor-streamer", "static_configs": [{"targets": self.targets}]}],
                }
            )
        )
        self.port = free_port(self.host)
        command = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.work_dir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HarnessError(f"prometheus exited {self._proc.returncode}:\n{self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise HarnessError(f"prometheus not ready after {timeout:.0f}s:\n{self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to its pid, then SIGKILL after 30 s."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def query(self, expression: str) -> list[dict]:
        """The instant vector of a PromQL expression: [{"metric": {labels}, "value": [time, "v"]}]."""
        return self._api("query", query=expression)

    def metric_names(self) -> list[str]:
        return self._api("label/__name__/values")

    def rules(self) -> list[dict]:
        """Every rule loaded, with its `health` ("ok" once evaluated without error)."""
        return [rule for group in self._api("rules")["groups"] for rule in group["rules"]]

    def _api(self, endpoint: str, **params: str):
        url = f"{self.url}/api/v1/{endpoint}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise HarnessError(f"{url}: {body}")
        return body["data"] if endpoint != "query" else body["data"]["result"]

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
