"""Where the stream is: the checkpoint each deltacommit carries in its extraMetadata, and the
offsets Spark planned for a micro-batch, read back from its write-ahead log.

The table's commits are the stream's source of truth: each one records the offsets its batch
read up to (`StreamCheckpoint`, under `checkpoint_key(...)`), so a query without a Spark
checkpoint resumes where the table ends. Several jobs can feed one table under optimistic
concurrency: each names its checkpoint (`source.checkpoint_id`) and keeps it under a key of its
own, so each resumes from its own offsets whatever the others commit in between.

Before a micro-batch runs, Spark writes `<checkpoint>/offsets/<batch id>`: a version line, a
line of batch metadata, then the end offsets of each source as its JSON. For a Kafka source
(`kafka-arrow` or Spark's own) that is `{"topic": {"partition": next offset to read}}`. These,
rather than the last offset of a record read plus one, are where the next batch starts: past
the control records that end each transaction, and past partitions that had nothing new.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from streamer.kafka.planning import OffsetRange
from table import MorTable, Storage, Timeline

log = logging.getLogger(__name__)

#: extraMetadata key of the stream's checkpoint (JSON of `StreamCheckpoint`); a named one's
#: key adds its name (`checkpoint_key`), so every stream's key starts with this.
CHECKPOINT_KEY = "mor.streamer.checkpoint"
#: Spark's offset log format version.
VERSION = "v1"


def planned_offsets(checkpoint_location: str, batch_id: int) -> dict[str, dict[int, int]] | None:
    """topic -> partition -> the offset the batch reads up to; None when the log cannot say."""
    try:
        return _logged_offsets(checkpoint_location, batch_id)
    except (OSError, ValueError, AttributeError, TypeError) as e:
        log.warning(
            "could not read the offsets Spark planned for batch %d from %s (%s); the batch's records say how far it read",
            batch_id,
            checkpoint_location,
            e,
        )
        return None


def planned_ranges(
    checkpoint_location: str, batch_id: int, ends: dict[str, dict[int, int]]
) -> list[OffsetRange] | None:
    """The offset ranges of a batch that reads up to `ends`: each partition from where the batch
    before it ended. None when Spark's log alone cannot say them, and only the source's plan
    can: the query's first batch, a partition new to it, or one that went back (the source
    then reads from the earliest offset Kafka holds)."""
    if batch_id == 0:
        return None
    try:
        starts = _logged_offsets(checkpoint_location, batch_id - 1)
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    ranges = []
    for topic, partitions in sorted(ends.items()):
        for partition, end in sorted(partitions.items()):
            start = starts.get(topic, {}).get(partition)
            if start is None or end < start:
                return None
            if end > start:
                ranges.append(((topic, partition), start, end))
    return ranges


def _logged_offsets(checkpoint_location: str, batch_id: int) -> dict[str, dict[int, int]]:
    lines = Storage(checkpoint_location).read_bytes(f"offsets/{batch_id}").decode("utf-8").splitlines()
    if len(lines) != 3 or lines[0] != VERSION:
        raise ValueError(f"expected '{VERSION}', batch metadata and one source's offsets")
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in json.loads(lines[2]).items()}


#: extraMetadata key of Hudi's own streamer checkpoint ("topic,partition:offset,...").
HUDI_STREAMER_CHECKPOINT_KEY = "deltastreamer.checkpoint.key"


@dataclass(frozen=True)
class StreamCheckpoint:
    """What the table's last commit says about the stream: who wrote it and how far it read."""

    query_id: str
    batch_id: int
    offsets: dict[str, dict[int, int]]  # topic -> partition -> next offset to read

    def to_json(self) -> str:
        return json.dumps(
            {
                "queryId": self.query_id,
                "batchId": self.batch_id,
                "offsets": self.offsets_json_object(),
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(obj: dict) -> StreamCheckpoint:
        offsets = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in obj.get("offsets", {}).items()}
        return StreamCheckpoint(obj.get("queryId", ""), int(obj.get("batchId", -1)), offsets)

    def offsets_json_object(self) -> dict[str, dict[str, int]]:
        return {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(self.offsets.items())}

    def starting_offsets_json(self) -> str:
        """The source's `startingOffsets` that resumes where this checkpoint ends."""
        return json.dumps(self.offsets_json_object(), sort_keys=True)

    def hudi_streamer_checkpoint(self) -> str | None:
        """Hudi's streamer checkpoint string, which only has room for one topic."""
        if len(self.offsets) != 1:
            return None
        ((topic, parts),) = self.offsets.items()
        return ",".join([topic] + [f"{p}:{o}" for p, o in sorted(parts.items())])

    def advanced(self, query_id: str, batch_id: int, read: dict[str, dict[int, int]]) -> StreamCheckpoint:
        offsets = {t: dict(parts) for t, parts in self.offsets.items()}
        for topic, parts in read.items():
            offsets.setdefault(topic, {}).update(parts)
        return StreamCheckpoint(query_id, batch_id, offsets)

    def covers(self, query_id: str, batch_id: int) -> bool:
        """True when the batch was already committed by this same streaming query."""
        return self.query_id == query_id and self.batch_id >= batch_id


EMPTY_CHECKPOINT = StreamCheckpoint("", -1, {})


def checkpoint_key(checkpoint_id: str | None) -> str:
    """The extraMetadata key of one stream's checkpoint: the unnamed stream's is `CHECKPOINT_KEY`."""
    return f"{CHECKPOINT_KEY}.{checkpoint_id}" if checkpoint_id else CHECKPOINT_KEY


def table_checkpoint(
    table: MorTable, timeline: Timeline | None = None, checkpoint_id: str | None = None
) -> StreamCheckpoint | None:
    """The stream's checkpoint in the table's latest commit that has it (service commits, other
    writers' and other streams' commits have none)."""
    raw = table.latest_extra_metadata(checkpoint_key(checkpoint_id), timeline)
    return StreamCheckpoint.from_json(json.loads(raw)) if raw is not None else None
