"""Apache Kafka itself, started from its Maven Central jars: one KRaft process that is both broker
and controller, on a loopback port, with its data in a directory of its own.

    with KafkaBroker() as kafka:
        kafka.create_topic("orders", partitions=3, config={"retention.ms": "1000"})
        ... kafka.bootstrap ...
        kafka.restart()      # same port, same data: topics and offsets survive

    with KafkaBroker(sasl_ssl=True) as kafka:    # a second listener, for clients that must log in
        Consumer({**kafka.secured.librdkafka_config(), "group.id": ...})

    with KafkaBroker(mutual_tls=True) as kafka:  # a listener for clients with a certificate
        Consumer({**kafka.mutual.librdkafka_config(), "group.id": ...})

No Docker and no tarball: the jars come from `streamer.sandbox.jars` (fetched once with Maven),
the storage is formatted with Kafka's own StorageTool, and the server runs as
`java -cp <jars> kafka.Kafka server.properties`. Its settings suit one node that is started and
stopped at will: one replica for every internal topic, no rebalance delay, records kept whatever
their age unless a topic says otherwise, retention checked every second. A directory that holds
a broker's data already is started again on the ports it was made with.

The SASL_SSL listener (`sasl_ssl=True`) is a secured broker as clients meet one: TLS with a
certificate that a certificate authority of the broker's own signed (`streamer.sandbox.tls`), and
a SCRAM-SHA-512 user with a random password, created when the storage is formatted. Its
certificates are made while the storage is formatted, and kept in the work directory.

The SSL listener (`mutual_tls=True`) asks each client for a certificate and lets in only those
its certificate authority signed (`ssl.client.auth=required`): the client's certificate, made
beside the server's, is its login.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from streamer.errors import BrokerStartError, ServerNotRunningError
from streamer.sandbox import jars
from streamer.sandbox.ports import free_port
from streamer.sandbox.server_process import ServerProcess, java_executable
from streamer.sandbox.tls import ServerCertificates, client_certificate, server_certificates
from streamer.sandbox.topics import create_topic, wait_for_broker

KAFKA_VERSION = "4.4.0"
LOG4J_VERSION = "2.25.5"  # the log4j-api Kafka depends on; its slf4j binding must match
ARTIFACTS = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",  # brings server, metadata, raft, storage, clients
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",  # Kafka logs through slf4j 1.x
)
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # small, short-lived: start fast on 2 cores
    "-Djava.awt.headless=true",
)

# Settings for one node started and stopped at will (`overrides` replace any of them).
SINGLE_NODE_SETTINGS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Records are kept whatever their timestamps (tests produce some from years ago) unless a
    # topic's retention.ms says otherwise; then retention and deletion happen within seconds.
    "log.retention.ms": "-1",
    "log.initial.task.delay.ms": "500",
    "log.retention.check.interval.ms": "1000",
    "log.segment.delete.delay.ms": "1000",
    "file.delete.delay.ms": "1000",
}

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: stdout
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        ref: stdout
    Logger:
      - name: org.apache.kafka.common.config.AbstractConfig  # every config in full, at each start
        level: WARN
      - name: kafka.request.logger
        level: WARN
      - name: state.change.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
      - name: org.apache.kafka.image.loader
        level: WARN
"""


SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "streamer"


@dataclass(frozen=True)
class SecuredListener:
    """The SASL_SSL listener as a client sees it: where it listens, who logs in, which
    certificate authority to trust (as PEM for librdkafka, in a truststore for Java)."""

    bootstrap: str
    username: str
    password: str = field(repr=False)
    ca_location: str
    truststore_location: str
    truststore_password: str = field(repr=False)
    mechanism: str = SCRAM_MECHANISM

    def librdkafka_config(self) -> dict[str, str]:
        """A librdkafka client's settings (confluent-kafka; the `kafka-arrow` source's `kafka.*`)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.location": self.ca_location,
        }

    def java_config(self) -> dict[str, str]:
        """A Java client's settings (Spark's `kafka` source's `kafka.*`)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.username}" password="{self.password}";',
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": self.truststore_location,
            "ssl.truststore.password": self.truststore_password,
        }


@dataclass(frozen=True)
class MutualTlsListener:
    """The SSL listener that asks clients for a certificate, as a client sees it: where it
    listens, which certificate authority to trust, and the client's own key and certificate
    (PKCS12, for librdkafka and Java alike)."""

    bootstrap: str
    ca_location: str
    truststore_location: str
    keystore_location: str
    password: str = field(repr=False)  # of both stores and the key

    def librdkafka_config(self) -> dict[str, str]:
        """A librdkafka client's settings (confluent-kafka; the `kafka-arrow` source's `kafka.*`)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": self.ca_location,
            "ssl.keystore.location": self.keystore_location,
            "ssl.keystore.password": self.password,
        }

    def java_config(self) -> dict[str, str]:
        """A Java client's settings (Spark's `kafka` source's `kafka.*`)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": self.truststore_location,
            "ssl.truststore.password": self.password,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": self.keystore_location,
            "ssl.keystore.password": self.password,
            "ssl.key.password": self.password,
        }


def kafka_jars() -> jars.JarSet:
    """Apache Kafka's server jars and a log4j binding, fetched on first use."""
    return jars.fetch("kafka", KAFKA_VERSION, ARTIFACTS)


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, as `kafka-storage
    random-uuid` prints (without starting a JVM for it). Like Kafka's own `Uuid.randomUuid`, never
    one that starts with "-": the storage tool would take it for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBroker(ServerProcess):
    """One Apache Kafka node (`process.roles=broker,controller`) as a child process.

    `start()` formats the storage the first time (on `port`, else a free one), starts the server
    and waits until it answers metadata requests; `stop()` is a controlled shutdown (SIGTERM),
    `restart()` comes back on the same ports and data, `hang()` and `wake()` freeze and thaw it
    (`ServerProcess`). Topics are created on demand only with `auto_create_topics`. With
    `sasl_ssl`, a listener that only lets in clients who trust its certificate and log in
    with SCRAM-SHA-512: `secured` tells them how. With `mutual_tls`, a listener that only lets in
    clients with a certificate its authority signed: `mutual` tells them how, and has one.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        die_with_parent: bool | None = None,
        port: int | None = None,
        auto_create_topics: bool = False,
        sasl_ssl: bool = False,
        mutual_tls: bool = False,
    ):
        super().__init__(work_dir, host, log_path, startup_timeout, die_with_parent, temp_prefix="kafka-")
        self.overrides = {"auto.create.topics.enable": str(auto_create_topics).lower(), **(overrides or {})}
        self.port = port
        self.controller_port: int | None = None
        self.sasl_ssl = sasl_ssl
        self.secured: SecuredListener | None = None
        self.mutual_tls = mutual_tls
        self.mutual: MutualTlsListener | None = None
        self.startup_seconds: float | None = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise ServerNotRunningError("broker not started")
        return f"{self.host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> KafkaBroker:
        if self.is_running():
            return self
        java_executable()  # before fetching jars it could not run
        classpath = kafka_jars().classpath
        if self.has_data:  # started before, maybe by another process: its ports
            port, self.controller_port = self._stored_ports()
            if self.port not in (None, port):
                raise BrokerStartError(
                    f"the broker data in {self.work_dir} was made for port {port}, not {self.port}: "
                    "start it on its port, or delete the directory for a new broker"
                )
            self.port = port
            self.secured = self._stored_secured_listener()
            self.mutual = self._stored_mutual_listener()
            for wanted, made, name in (
                (self.sasl_ssl, self.secured, "SASL_SSL"),
                (self.mutual_tls, self.mutual, "SSL"),
            ):
                if wanted and made is None:
                    raise BrokerStartError(
                        f"the broker data in {self.work_dir} was made without a {name} listener: "
                        "start it without one, or delete the directory for a new broker"
                    )
        else:  # first start: new storage
            self.port = self.port or free_port(self.host)
            self.controller_port = free_port(self.host)
            self._format(classpath)
        self._spawn(self._command(classpath, "kafka.Kafka", str(self._properties)))
        try:
            self.startup_seconds = wait_for_broker(self.bootstrap, self.startup_timeout, is_alive=self.is_running)
            for listener in (self.secured, self.mutual):
                if listener is not None:
                    self.startup_seconds += wait_for_broker(
                        listener.bootstrap,
                        self.startup_timeout,
                        is_alive=self.is_running,
                        client=listener.librdkafka_config(),
                    )
        except BrokerStartError as exc:
            self.stop(timeout=5.0)
            raise BrokerStartError(
                f"Apache Kafka {KAFKA_VERSION}: {exc}\nlog {self.log_path}:\n{self.log_tail()}"
            ) from None
        return self

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        """Create a topic with topic-level `config` (e.g. retention.ms) and wait for its leaders."""
        return create_topic(self.bootstrap, name, partitions=partitions, config=config)

    @property
    def has_data(self) -> bool:
        """Whether the work directory holds a formatted broker already."""
        return (self.work_dir / "data" / "meta.properties").is_file() and self._properties.is_file()

    # -- internals ---------------------------------------------------------------------------------
    @property
    def _properties(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def _secured_listener_file(self) -> Path:
        return self.work_dir / "sasl_ssl.json"

    @property
    def _mutual_listener_file(self) -> Path:
        return self.work_dir / "mutual_tls.json"

    @property
    def _tls_directory(self) -> Path:
        return self.work_dir / "tls"

    def _format(self, classpath: str) -> None:
        """Write the settings and format the storage; with a secured listener, make the
        certificates meanwhile, and with `sasl_ssl` create the SCRAM user."""
        if not (self.sasl_ssl or self.mutual_tls):
            self._write_config()
            self._format_storage(classpath)
            return
        certificates = ServerCertificates.of(self._tls_directory, secrets.token_hex(16))
        secured = self.secured = self._new_secured_listener(certificates) if self.sasl_ssl else None
        mutual = self.mutual = self._new_mutual_listener(certificates) if self.mutual_tls else None
        scram = (
            ("--add-scram", f"{secured.mechanism}=[name={secured.username},password={secured.password}]")
            if secured is not None
            else ()
        )
        with ThreadPoolExecutor(max_workers=1) as meanwhile:
            made = meanwhile.submit(self._make_certificates, certificates.password)
            self._write_config()
            self._format_storage(classpath, *scram)
        made.result()
        for listener, file in ((secured, self._secured_listener_file), (mutual, self._mutual_listener_file)):
            if listener is not None:
                file.write_text(json.dumps(asdict(listener), indent=2) + "\n")

    def _make_certificates(self, password: str) -> None:
        server_certificates(self._tls_directory, password, (self.host,))
        if self.mutual_tls:
            client_certificate(self._tls_directory, password, SCRAM_USER)

    def _format_storage(self, classpath: str, *options: str) -> None:
        self._java(
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            random_cluster_id(),
            "--config",
            str(self._properties),
            "--ignore-formatted",
            *options,
        )

    def _new_secured_listener(self, certificates: ServerCertificates) -> SecuredListener:
        return SecuredListener(
            bootstrap=f"{self.host}:{free_port(self.host)}",
            username=SCRAM_USER,
            password=secrets.token_hex(16),
            ca_location=str(certificates.ca_pem),
            truststore_location=str(certificates.truststore),
            truststore_password=certificates.password,
        )

    def _new_mutual_listener(self, certificates: ServerCertificates) -> MutualTlsListener:
        return MutualTlsListener(
            bootstrap=f"{self.host}:{free_port(self.host)}",
            ca_location=str(certificates.ca_pem),
            truststore_location=str(certificates.truststore),
            keystore_location=str(self._tls_directory / f"client-{SCRAM_USER}.p12"),
            password=certificates.password,
        )

    def _stored_mutual_listener(self) -> MutualTlsListener | None:
        if not self._mutual_listener_file.is_file():
            return None
        return MutualTlsListener(**json.loads(self._mutual_listener_file.read_text()))

    def _stored_secured_listener(self) -> SecuredListener | None:
        if not self._secured_listener_file.is_file():
            return None
        return SecuredListener(**json.loads(self._secured_listener_file.read_text()))

    def _stored_ports(self) -> tuple[int, int]:
        """The broker and controller ports of the stored `listeners`."""
        settings = dict(line.split("=", 1) for line in self._properties.read_text().splitlines() if "=" in line)
        ports = dict(re.findall(r"(PLAINTEXT|CONTROLLER)://[^,]*:(\d+)", settings.get("listeners", "")))
        return int(ports["PLAINTEXT"]), int(ports["CONTROLLER"])

    def _write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        listeners = [f"PLAINTEXT://{self.host}:{self.port}", f"CONTROLLER://{self.host}:{self.controller_port}"]
        advertised = [f"PLAINTEXT://{self.host}:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        if self.secured is not None:
            listeners.append(f"SASL_SSL://{self.secured.bootstrap}")
            advertised.append(f"SASL_SSL://{self.secured.bootstrap}")
            protocols.append("SASL_SSL:SASL_SSL")
        if self.mutual is not None:
            listeners.append(f"SSL://{self.mutual.bootstrap}")
            advertised.append(f"SSL://{self.mutual.bootstrap}")
            protocols.append("SSL:SSL")
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.work_dir / "data"),
            **(self._secured_listener_settings(self.secured) if self.secured is not None else {}),
            **(self._mutual_listener_settings(self.mutual) if self.mutual is not None else {}),
            **SINGLE_NODE_SETTINGS,
            **self.overrides,
        }
        self._properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.work_dir / "log4j2.yaml").write_text(_LOG4J2)

    def _secured_listener_settings(self, secured: SecuredListener) -> dict[str, str]:
        """SCRAM over TLS on the SASL_SSL listener, its users those of the cluster's metadata."""
        certificates = ServerCertificates.of(self._tls_directory, secured.truststore_password)
        listener = "listener.name.sasl_ssl."
        return {
            "sasl.enabled.mechanisms": secured.mechanism,
            f"{listener}{secured.mechanism.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            f"{listener}ssl.keystore.type": "PKCS12",
            f"{listener}ssl.keystore.location": str(certificates.keystore),
            f"{listener}ssl.keystore.password": certificates.password,
        }

    def _mutual_listener_settings(self, mutual: MutualTlsListener) -> dict[str, str]:
        """TLS on the SSL listener, with a certificate its authority signed required of each client."""
        certificates = ServerCertificates.of(self._tls_directory, mutual.password)
        listener = "listener.name.ssl."
        return {
            f"{listener}ssl.client.auth": "required",
            f"{listener}ssl.keystore.type": "PKCS12",
            f"{listener}ssl.keystore.location": str(certificates.keystore),
            f"{listener}ssl.keystore.password": certificates.password,
            f"{listener}ssl.truststore.type": "PKCS12",
            f"{listener}ssl.truststore.location": str(certificates.truststore),
            f"{listener}ssl.truststore.password": certificates.password,
        }

    def _command(self, classpath: str, main: str, *args: str) -> list[str]:
        return [
            java_executable(),
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.yaml'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _java(self, classpath: str, main: str, *args: str) -> None:
        done = subprocess.run(
            self._command(classpath, main, *args), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            shown = " ".join(args)
            if self.secured is not None:
                shown = shown.replace(self.secured.password, "***")
            raise BrokerStartError(
                f"{main} {shown} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}"
            )
