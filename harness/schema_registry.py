"""Apicurio Registry for tests: a real schema registry server, its distribution from Maven Central,
one process on a free loopback port, its schemas in memory.

    with ApicurioRegistry() as registry:
        registry.url             # Confluent's REST API: what the streamer's decoder talks to
        registry.converter_config("value")   # Kafka Connect's Avro converter writing through it

Its Confluent-compatible API (`/apis/ccompat/v7`) serves the subjects and ids the streamer reads,
and Apicurio's own Avro converter for Kafka Connect (`io.apicurio:apicurio-registry-utils-converter`,
also on Maven Central, where Confluent's is not) writes Confluent's wire format: a zero byte, the
schema's 4-byte id, then the Avro record. Version 2.6 runs on Java 17; 3.x needs Java 21.
"""

from __future__ import annotations

import os
import time
import urllib.request

from harness.errors import HarnessError
from streamer.sandbox import jars
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess, java_executable

APICURIO_VERSION = "2.6.13.Final"
DISTRIBUTION = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
CONVERTER = f"io.apicurio:apicurio-registry-utils-converter:{APICURIO_VERSION}"
#: Kafka's own classes come from the Connect worker, never from a plugin.
CONVERTER_EXCLUSIONS = (
    "org.apache.kafka:kafka-clients",
    "org.apache.kafka:connect-api",
    "org.apache.kafka:connect-json",
)
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
JVM_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


def converter_jars() -> jars.JarSet:
    """Apicurio's converters for Kafka Connect, as a plugin directory."""
    return jars.fetch("apicurio-converter", APICURIO_VERSION, [CONVERTER], exclusions=CONVERTER_EXCLUSIONS)


class ApicurioRegistry(ServerProcess):
    """Apicurio Registry as a child process, with in-memory storage: a restart forgets its schemas."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
        die_with_parent: bool | None = None,
    ):
        super().__init__(work_dir, host, log_path, startup_timeout, die_with_parent, temp_prefix="apicurio-")

    @property
    def url(self) -> str:
        """The Confluent-compatible API, as `decode.schema_registry.url` takes it."""
        return f"http://{self.host}:{self.port}/apis/ccompat/v7"

    def converter_config(self, side: str) -> dict[str, str]:
        """A connector's settings for its `side` ("key" or "value") to be Avro through this registry
        in Confluent's wire format: ids in the payload, not in headers, and the content ids the
        Confluent-compatible API hands out; schemas registered under `<topic>-<side>`."""
        prefix = f"{side}.converter"
        return {
            prefix: AVRO_CONVERTER,
            f"{prefix}.apicurio.registry.url": f"http://{self.host}:{self.port}/apis/registry/v2",
            f"{prefix}.apicurio.registry.auto-register": "true",
            f"{prefix}.apicurio.registry.find-latest": "true",
            f"{prefix}.apicurio.registry.as-confluent": "true",
            f"{prefix}.apicurio.registry.use-id": "contentId",
            f"{prefix}.apicurio.registry.headers.enabled": "false",
        }

    def start(self) -> ApicurioRegistry:
        if self.is_running():
            return self
        home = jars.unpacked("apicurio-registry", APICURIO_VERSION, DISTRIBUTION)
        [runner] = home.glob("*-runner.jar")
        if self.port is None:
            self.port = free_port(self.host)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            [
                java_executable(),
                *JVM_OPTIONS,
                f"-Dquarkus.http.host={self.host}",
                f"-Dquarkus.http.port={self.port}",
                "-jar",
                str(runner),
            ]
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.is_running():
                raise HarnessError(f"Apicurio Registry exited while starting; log {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=5) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop(timeout=5.0)
                raise HarnessError(
                    f"Apicurio Registry did not answer within {self.startup_timeout:.0f}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)
