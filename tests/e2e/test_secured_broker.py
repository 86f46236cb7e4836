"""The job against a broker that demands SASL_SSL: SCRAM-SHA-512 logins over TLS, on the second
listener of an Apache Kafka this module starts (`KafkaBroker(sasl_ssl=True)`), and mutual TLS, a
client certificate its authority signed, on the third (`mutual_tls=True`). Records are
produced through its PLAINTEXT listener and read through the secured one, by the `kafka-arrow`
source (librdkafka, trusting the broker's certificate authority as PEM; the job with its default
reader, and each reader alone) and by Spark's own
`kafka` source (the Java client: a JAAS line and a truststore). A wrong password, or a
certificate authority that did not sign the broker's certificate, or no client certificate where
the broker asks for one, stops the table at once with one line that names the broker and what
was refused, and leaves the table untouched."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from harness.spark import kafka_connector
from streamer import app
from streamer.config.loading import config_from_mapping
from streamer.errors import KafkaAuthenticationError
from streamer.kafka.options import SourceOptions
from streamer.kafka.reader import read_partition
from streamer.sandbox.kafka_broker import KafkaBroker
from streamer.sandbox.tls import ClientCertificate, certificate_authority, client_certificate
from table.mor_table import MorTable
from tests.support.ingestion import (
    assert_table_matches,
    committed_offsets,
    end_offsets,
    order_config,
    produce_orders,
    run_streamer,
    settled_change_events,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spark_jars() -> tuple[str, ...]:
    return tuple(str(jar) for jar in kafka_connector().jars)


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory) -> Iterator[KafkaBroker]:
    """Apache Kafka with a SASL_SSL and a mutual TLS listener beside its PLAINTEXT one. Its own, not
    the session's: making its certificates takes a few keytool runs, which the session's brokers
    need not wait for."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka-secured"), sasl_ssl=True, mutual_tls=True) as broker:
        yield broker


#: Both readers of `kafka-arrow` (`streamer.kafka.consumer`).
READERS = pytest.mark.parametrize("reader", ["native", "python"])


def source_options(client_config: dict[str, str]) -> dict[str, str]:
    """A client's settings as the source's `kafka.*` options (the brokers have a key of their own)."""
    return {f"kafka.{name}": value for name, value in client_config.items() if name != "bootstrap.servers"}


def read_ranges(reader: str, bootstrap: str, options: dict[str, str], topic: str, ends: dict[int, int]) -> pa.Table:
    """Every partition of the topic up to its end, read by `reader` range by range, as a task reads."""
    opts = SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "reader": reader, **options})
    return pa.Table.from_batches(
        batch for partition, end in sorted(ends.items()) for batch in read_partition(opts, topic, partition, 0, end)
    )


def secured_orders(secured_kafka: KafkaBroker, unique_topic, events: list[dict]) -> str:
    """A topic of `events`, produced through the PLAINTEXT listener."""
    topic = secured_kafka.create_topic(unique_topic("orders"), partitions=2)
    produce_orders(secured_kafka.bootstrap, topic, events)
    return topic


def test_the_job_reads_a_topic_through_sasl_ssl_with_a_scram_sha_512_login(
    spark, secured_kafka, unique_topic, tmp_path
):
    secured = secured_kafka.secured
    events = settled_change_events(2_000, seed=301)
    topic = secured_orders(secured_kafka, unique_topic, events)
    options = source_options(secured.librdkafka_config())
    mapping = order_config(tmp_path, "orders", secured.bootstrap, topic, source={"options": options})

    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(events)
    assert_table_matches(mapping["table"]["path"], events)
    assert committed_offsets(mapping["table"]["path"], topic) == end_offsets(secured_kafka.bootstrap, topic)


@READERS
@pytest.mark.parametrize("listener", ["secured", "mutual"])
def test_each_reader_reads_through_each_secured_listener_what_the_plaintext_listener_serves(
    secured_kafka, unique_topic, reader, listener
):
    """The job above reads with the default reader; here each reader alone, range by range, through
    SASL_SSL and through mutual TLS with a client certificate."""
    chosen = getattr(secured_kafka, listener)
    topic = secured_orders(secured_kafka, unique_topic, settled_change_events(500, seed=302))
    ends = end_offsets(secured_kafka.bootstrap, topic)

    through_tls = read_ranges(reader, chosen.bootstrap, source_options(chosen.librdkafka_config()), topic, ends)

    assert through_tls.num_rows == sum(ends.values()) > 0
    assert through_tls.equals(read_ranges(reader, secured_kafka.bootstrap, {}, topic, ends))


def test_sparks_kafka_source_reads_through_mutual_tls_with_a_keystore(spark, secured_kafka, unique_topic):
    mutual = secured_kafka.mutual
    events = settled_change_events(300, seed=309)
    topic = secured_orders(secured_kafka, unique_topic, events)
    read = (
        spark.read.format("kafka")
        .options(**source_options(mutual.java_config()))
        .option("kafka.bootstrap.servers", mutual.bootstrap)
        .option("subscribe", topic)
        .load()
    )
    plaintext = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", secured_kafka.bootstrap)
        .option("subscribe", topic)
        .load()
    )

    through_mutual_tls = sorted(row.value for row in read.select("value").collect())
    assert through_mutual_tls == sorted(row.value for row in plaintext.select("value").collect())
    assert len(through_mutual_tls) == len(events)


def test_sparks_kafka_source_reads_a_topic_through_sasl_ssl_with_a_jaas_login_and_a_truststore(
    spark, secured_kafka, unique_topic, tmp_path, caplog
):
    secured = secured_kafka.secured
    events = settled_change_events(2_000, seed=303)
    topic = secured_orders(secured_kafka, unique_topic, events)
    # Spark's Java client trusts the truststore; the job's own clients (offsets, lag) the PEM.
    options = source_options(secured.java_config()) | {"kafka.ssl.ca.location": secured.ca_location}
    mapping = order_config(tmp_path, "orders", secured.bootstrap, topic, source={"format": "kafka", "options": options})

    (outcome,) = app.run([config_from_mapping(mapping)], spark, once=True).tables

    assert outcome.error is None and outcome.records == len(events)
    assert "could not read the Kafka lag" not in caplog.text
    assert_table_matches(mapping["table"]["path"], events)
    assert committed_offsets(mapping["table"]["path"], topic) == end_offsets(secured_kafka.bootstrap, topic)


def test_a_wrong_password_an_untrusted_certificate_or_no_client_certificate_stops_the_table_at_once_in_one_line(
    secured_kafka, unique_topic, tmp_path
):
    secured = secured_kafka.secured
    topic = secured_orders(secured_kafka, unique_topic, settled_change_events(100, seed=305))
    stranger = certificate_authority(tmp_path / "stranger-ca", "stranger-secret")
    wrong_password = "not-the-password-" + secured.password[:4]
    mutual = secured_kafka.mutual
    no_certificate = {k: v for k, v in mutual.librdkafka_config().items() if not k.startswith("ssl.keystore")}
    refused = {
        "wrong_password": (
            secured.bootstrap,
            source_options(secured.librdkafka_config() | {"sasl.password": wrong_password}),
        ),
        "untrusted": (
            secured.bootstrap,
            source_options(secured.librdkafka_config() | {"ssl.ca.location": str(stranger.pem)}),
        ),
        "no_certificate": (mutual.bootstrap, source_options(no_certificate)),
    }
    configs = tmp_path / "configs"
    for name, (bootstrap, options) in refused.items():
        write_config(configs, order_config(tmp_path, name, bootstrap, topic, source={"options": options}))

    # Taken for an outage, either would be retried for source.max_broker_outage_seconds (300 s).
    code, out = run_streamer(["run", str(configs), "--once"], timeout=240)

    assert code == 1, out[-5000:]
    assert secured.password not in out and wrong_password not in out
    lines = out.splitlines()
    assert len([line for line in lines if secured.bootstrap in line]) == 4, out  # per table: its error, its summary
    assert len([line for line in lines if mutual.bootstrap in line]) == 2, out
    for name, told in (
        ("wrong_password", f"Kafka broker {secured.bootstrap} refused the SCRAM-SHA-512 login of user 'streamer'"),
        ("untrusted", f"Kafka broker {secured.bootstrap} presented a TLS certificate this client does not trust"),
        (
            "no_certificate",
            f"Kafka broker {mutual.bootstrap} asks for a TLS client certificate, and this client has none",
        ),
    ):
        (summary,) = [line for line in lines if line.startswith(f"{name}: ")]
        assert f"FAILED: KafkaAuthenticationError: {told}" in summary, summary
        table = str(tmp_path / "tables" / name)
        assert not MorTable.exists(table) or not MorTable.load(table).timeline().instants  # nothing begun


@READERS
def test_a_reader_refused_by_the_broker_fails_at_once_naming_it(secured_kafka, unique_topic, reader):
    """In a Spark task, where no retry of the driver's is in the way: a wrong password fails the
    range's read at once, naming the broker and the login, not after the task timeout."""
    secured = secured_kafka.secured
    topic = secured_orders(secured_kafka, unique_topic, settled_change_events(100, seed=307))
    options = source_options(secured.librdkafka_config() | {"sasl.password": "not-the-password"})
    opts = SourceOptions.parse(
        {"kafka.bootstrap.servers": secured.bootstrap, "subscribe": topic, "reader": reader, **options}
    )

    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as refused:
        list(read_partition(opts, topic, 0, 0, 50))

    assert time.monotonic() - started < 30
    assert f"Kafka broker {secured.bootstrap} refused the SCRAM-SHA-512 login of user 'streamer'" in str(refused.value)
    assert "not-the-password" not in str(refused.value)


@pytest.fixture(scope="module")
def strangers_certificate(tmp_path_factory) -> ClientCertificate:
    """A client certificate for user `streamer` that another certificate authority signed."""
    return client_certificate(tmp_path_factory.mktemp("stranger"), "stranger-secret", "streamer")


@READERS
def test_a_reader_whose_certificate_the_broker_does_not_accept_fails_at_once_naming_it(
    secured_kafka, unique_topic, reader, strangers_certificate
):
    """A client certificate that another authority signed, under mutual TLS: refused by the broker
    at the handshake, which librdkafka reports as a transport error, as if the broker were down."""
    mutual = secured_kafka.mutual
    topic = secured_orders(secured_kafka, unique_topic, settled_change_events(100, seed=310))
    stranger = strangers_certificate
    options = source_options(
        mutual.librdkafka_config()
        | {"ssl.keystore.location": str(stranger.keystore), "ssl.keystore.password": stranger.password}
    )
    opts = SourceOptions.parse(
        {"kafka.bootstrap.servers": mutual.bootstrap, "subscribe": topic, "reader": reader, **options}
    )

    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as refused:
        list(read_partition(opts, topic, 0, 0, 50))

    assert time.monotonic() - started < 30
    assert f"Kafka broker {mutual.bootstrap} refused this client's TLS certificate ({stranger.keystore})" in str(
        refused.value
    )
    assert "stranger-secret" not in str(refused.value)
