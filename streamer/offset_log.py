"""The offsets Spark planned for a micro-batch, read back from its write-ahead log.

Before a micro-batch runs, Spark writes `<checkpoint>/offsets/<batch id>`: a version line, a
line of batch metadata, then the end offsets of each source as its JSON. For a Kafka source
(`kafka-arrow` or Spark's own) that is `{"topic": {"partition": next offset to read}}`. These,
rather than the last offset of a record read plus one, are where the next batch starts: past
the control records that end each transaction, and past partitions that had nothing new.
"""

from __future__ import annotations

import json
import logging

from table.storage import Storage

log = logging.getLogger(__name__)

VERSION = "v1"


def planned_offsets(checkpoint_location: str, batch_id: int) -> dict[str, dict[int, int]] | None:
    """topic -> partition -> the offset the batch reads up to; None when the log cannot say."""
    try:
        lines = Storage(checkpoint_location).read_bytes(f"offsets/{batch_id}").decode("utf-8").splitlines()
        if len(lines) != 3 or lines[0] != VERSION:
            raise ValueError(f"expected '{VERSION}', batch metadata and one source's offsets")
        return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in json.loads(lines[2]).items()}
    except (OSError, ValueError, AttributeError, TypeError) as e:
        log.warning("could not read the offsets Spark planned for batch %d from %s (%s); the batch's "
                    "records say how far it read", batch_id, checkpoint_location, e)
        return None
