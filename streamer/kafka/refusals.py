"""A broker that refuses this client, or that this client refuses: told in one line that names
the broker, what was refused and which options to check, never a secret. librdkafka retries a
failed login or TLS handshake as it retries a broker that is down, but waiting cannot mend a
wrong password, a client certificate the broker does not accept (or none, where it asks for
one) or a certificate authority that did not sign the broker's certificate: the job fails at
once (`KafkaMetadata`)."""

from __future__ import annotations

import re

from streamer.errors import KafkaAuthenticationError
from streamer.kafka.options import SourceOptions
from streamer.logs.clients import CERTIFICATE_REFUSED

#: "sasl_ssl://127.0.0.1:9093/bootstrap: " (or "/1: ", by node id) before an event's text.
_BROKER_PREFIX = re.compile(r"^(?:[a-z_]+://)?(?P<broker>[^/\s]+)/(?:bootstrap|\d+): ")
#: " (after 311ms in state AUTH_REQ)" after it.
_TIMING = re.compile(r" \(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)$")


def refusal_error(opts: SourceOptions, code: int, text: str) -> KafkaAuthenticationError:
    """The error to fail with for a refusal event of a client (`ClientLog.refusal`: librdkafka's
    code and text)."""
    from confluent_kafka import KafkaError

    found = _BROKER_PREFIX.match(text)
    broker = found.group("broker") if found else opts.bootstrap_servers
    detail = opts.redact(_TIMING.sub("", text[found.end() :] if found else text))
    if "certificate verify failed" in text:
        return KafkaAuthenticationError(
            f"Kafka broker {broker} presented a TLS certificate this client does not trust ({detail}): "
            "the option kafka.ssl.ca.location must name the certificate authority that signed it"
        )
    if CERTIFICATE_REFUSED.search(text):
        params = opts.kafka_params
        presented = params.get("ssl.keystore.location") or params.get("ssl.certificate.location")
        what = (
            f"refused this client's TLS certificate ({presented})"
            if presented
            else "asks for a TLS client certificate, and this client has none"
        )
        return KafkaAuthenticationError(
            f"Kafka broker {broker} {what} ({detail}): the options kafka.ssl.keystore.location and "
            "kafka.ssl.keystore.password (or kafka.ssl.certificate.location and kafka.ssl.key.location) "
            "must name a certificate that the broker's certificate authority signed"
        )
    if code == KafkaError._SSL:
        return KafkaAuthenticationError(
            f"TLS with Kafka broker {broker} failed ({detail}): check the options kafka.ssl.*"
        )
    params = opts.kafka_params
    mechanism = params.get("sasl.mechanism") or params.get("sasl.mechanisms") or "GSSAPI"
    user = f" of user '{params['sasl.username']}'" if params.get("sasl.username") else ""
    return KafkaAuthenticationError(
        f"Kafka broker {broker} refused the {mechanism} login{user} ({detail}): check the options "
        "kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password (or kafka.sasl.jaas.config)"
    )
