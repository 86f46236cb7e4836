"""`streamer verify`: each table of a mirror against its source table, inside the database by SQL
on one side and by a snapshot read of the table on the other (`streamer.verify.compare`).

The last verdict of each table is kept with it (`.hoodie/.aux/streamer-verify.json`), where
`streamer status` and the job's metrics find it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from streamer.checkpoint import table_checkpoint
from streamer.config.loading import mirrored_table
from streamer.config.mirror import PATH_SHAPE, MirrorConfig, MirroredTopic
from streamer.config.model import JobConfig
from streamer.kafka.offsets import end_offsets
from streamer.verify.compare import TableVerdict, compare_table
from streamer.verify.postgres import PostgresSource
from streamer.verify.values import UncomparableColumnError
from streamer.verify.verdict import differing_rows, keep_verdict, read_verdict
from table import MorTable

__all__ = ["TableVerdict", "differing_rows", "read_verdict", "verify_mirror"]

log = logging.getLogger(__name__)

#: How long `verify` waits for a table to catch up before it reports what still differs.
CATCH_UP_SECONDS = 120.0


@dataclass(frozen=True)
class MirroredTable:
    """A source table and the config of the lake table that mirrors it."""

    schema: str
    name: str
    config: JobConfig


def verify_mirror(
    mirror: MirrorConfig, only: list[str] | None = None, catch_up_seconds: float = CATCH_UP_SECONDS
) -> list[TableVerdict]:
    """The verdict of every table the mirror includes (or of `only`: `schema.table` or the lake
    table's name), each kept with its table."""
    url = mirror.settings.database_url
    if mirror.settings.topic_prefix is None:
        raise ValueError(f"{mirror.config_path}: mirror.topic_prefix: required by verify, to name each table's topic")
    if url is None:
        raise ValueError(f"{mirror.config_path}: mirror.database_url: required by verify (the source database)")
    source = PostgresSource(url.get_secret_value())
    try:
        verdicts = []
        for table in _mirrored(mirror, source, only):
            verdict = _verify(mirror, source, table, catch_up_seconds)
            keep_verdict(table.config.table.path, table.config.table.storage_options, verdict)
            verdicts.append(verdict)
        return verdicts
    finally:
        source.close()


def _mirrored(mirror: MirrorConfig, source: PostgresSource, only: list[str] | None) -> list[MirroredTable]:
    prefix = mirror.settings.topic_prefix or ""
    found = []
    for schema, name in source.tables():
        topic = MirroredTopic(f"{prefix}.{schema}.{name}", prefix, schema, name)
        if not mirror.included(topic):
            continue
        config = mirrored_table(mirror, topic, PATH_SHAPE)
        if only is not None and topic.name not in only and config.table.name not in only:
            continue
        found.append(MirroredTable(schema, name, config))
    if only is not None:
        named = {t.config.table.name for t in found} | {f"{t.schema}.{t.name}" for t in found}
        unknown = [t for t in only if t not in named]
        if unknown:
            raise ValueError(f"{mirror.config_path}: no mirrored table {unknown} (name them as schema.table)")
    return found


def _verify(
    mirror: MirrorConfig, source: PostgresSource, table: MirroredTable, catch_up_seconds: float
) -> TableVerdict:
    t = table.config.table
    name = f"{table.schema}.{table.name}"
    try:
        described = source.table(table.schema, table.name)
    except UncomparableColumnError as e:
        return TableVerdict(name, t.path, note=str(e))
    if described.key and not MorTable.exists(t.path, t.storage_options):
        return TableVerdict(name, t.path, note="the lake has no such table")

    def caught_up(position: int) -> str | None:
        return _wait_caught_up(mirror, source, table.config, position, catch_up_seconds)

    return compare_table(source, described, t.path, t.storage_options, caught_up)


def _wait_caught_up(
    mirror: MirrorConfig, source: PostgresSource, config: JobConfig, position: int, seconds: float
) -> str | None:
    """Wait until the connector confirmed `position` and the table committed what Kafka then
    held of its topic; why not, when that did not happen within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        confirmed = source.confirmed_position(mirror.settings.replication_slot)
        if confirmed is None:
            return "no single logical replication slot to tell the connector's position (mirror.replication_slot)"
        if confirmed >= position:
            break
        if time.monotonic() > deadline:
            return f"the connector's slot did not confirm the source's position within {seconds:.0f}s"
        time.sleep(0.5)
    (topic,) = config.source.topics or ()
    ends = end_offsets(config.source, [topic]).get(topic, {})
    while True:
        table = MorTable.load(config.table.path, config.table.storage_options)
        checkpoint = table_checkpoint(table, checkpoint_id=config.source.checkpoint_id)
        committed = checkpoint.offsets.get(topic, {}) if checkpoint is not None else {}
        if all(committed.get(p, 0) >= end for p, end in ends.items()):
            return None
        if time.monotonic() > deadline:
            return f"the table did not commit Kafka's offsets {ends} of {topic} within {seconds:.0f}s"
        time.sleep(0.5)
