"""The Kafka source's errors, and what ``failOnDataLoss`` makes of offsets that cannot be read.

Offsets to read can be gone from Kafka (aged out by retention, a topic deleted or recreated, a
partition truncated): by default the query then fails with :class:`KafkaDataLossError`; with
``failOnDataLoss=false`` a warning is logged and the source goes on from what Kafka holds.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class KafkaSourceError(Exception):
    """Misconfiguration or failure of the Kafka source."""


class KafkaDataLossError(KafkaSourceError):
    """Offsets to be read are no longer available (and ``failOnDataLoss`` is true)."""


class KafkaSourceTimeoutError(KafkaSourceError):
    """The broker did not answer / the partition made no progress within the time limit."""


def data_loss(fail_on_data_loss: bool, message: str) -> None:
    """Raise (failOnDataLoss=true) or log a warning."""
    if fail_on_data_loss:
        raise KafkaDataLossError(
            message + " Some data may have been lost because it is not available in Kafka any "
            "more (aged out by retention, or the topic was deleted or recreated) or the offsets "
            "are wrong. If you want the query to continue in such cases, set the source option "
            "'failOnDataLoss' to 'false' (source.fail_on_data_loss: false in a table config)."
        )
    log.warning("%s Continuing because failOnDataLoss is false.", message)
