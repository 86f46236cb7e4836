"""What ``failOnDataLoss`` makes of offsets that cannot be read.

Offsets to read can be gone from Kafka (aged out by retention, a topic deleted or recreated, a
partition truncated): by default the query then fails with :class:`KafkaDataLossError`; with
``failOnDataLoss=false`` a warning is logged and the source goes on from what Kafka holds.
"""

from __future__ import annotations

import logging

from streamer.errors import KafkaDataLossError

log = logging.getLogger(__name__)


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
