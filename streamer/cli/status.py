"""`streamer status`: where each configured table stands, whatever else is down.

What the table says is read from its storage alone: its last commit and that commit's age, the
Kafka offsets the commit recorded, the instants still pending, and the last error a job recorded
(`streamer.last_error`). Only the lag needs Kafka: brokers that do not
answer within the timeout leave it unknown, naming them and why, and the rest is shown anyway.

The exit code says the worst state found: 0 all well, `EXIT_KAFKA_UNREACHABLE` when some lag is
unknown, `EXIT_TABLE_PROBLEM` when a table cannot be read or its job stopped with an error
after its last commit (this one wins: the table is what an operator fixes first).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from streamer.catalog import catalog_status
from streamer.checkpoint import table_checkpoint
from streamer.config.model import JobConfig
from streamer.errors import BrokersUnreachableError
from streamer.kafka.offsets import KafkaProgress
from streamer.last_error import error_time, read_last_error
from streamer.verify.verdict import differing_rows, read_verdict
from table import MorTable, UnsupportedTableVersionError, parse_instant_time

#: Seconds the brokers have to answer before the lag is reported unknown.
DEFAULT_KAFKA_TIMEOUT_SECONDS = 5.0
EXIT_OK = 0
EXIT_TABLE_PROBLEM = 3
EXIT_KAFKA_UNREACHABLE = 4
_OFFSETS_SHOWN = 6  # partitions per topic on the offsets line


@dataclass
class TableStatus:
    name: str
    path: str
    exists: bool
    last_commit: str | None = None
    last_commit_time: str | None = None  # ISO 8601, UTC
    last_commit_age_seconds: float | None = None
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> next offset
    lag: dict[str, int] | None = field(default_factory=dict)  # topic -> records behind; None: unknown
    lag_unknown: str | None = None  # why the lag is unknown: "<brokers> unreachable (<cause>)"
    pending: list[str] = field(default_factory=list)  # "<instant> <action> <state>"
    last_error: dict | None = None  # {"time", "message"}
    catalog: dict | None = None  # the catalog sync (`streamer.catalog.CatalogStatus`), with `sync:`
    catalog_line: str | None = None
    verified: dict | None = None  # the last verdict of `streamer verify` (`streamer.verify.verdict`)
    problem: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        if self.problem and not self.exists:
            return [f"{self.name}: problem: {self.problem}"]
        if not self.exists:
            return [f"{self.name}: no table yet at {self.path}"]
        if self.last_commit and self.last_commit_age_seconds is not None:
            out = [
                f"{self.name}: last commit {self.last_commit} at {self.last_commit_time} "
                f"({_age(self.last_commit_age_seconds)} ago)"
            ]
        else:
            out = [f"{self.name}: no commit yet"]
        out += [f"  offsets  {topic} {_offsets(parts)}" for topic, parts in sorted(self.offsets.items())]
        if self.lag_unknown or self.lag is None:
            out.append(f"  lag      unknown: {self.lag_unknown}")
        elif self.offsets:
            out.append("  lag      " + ", ".join(f"{t} {n:,} behind" for t, n in sorted(self.lag.items())))
        else:
            out.append("  lag      no offsets committed yet")
        out += [f"  pending  {p}" for p in self.pending]
        if self.catalog_line:
            out.append(f"  catalog  {self.catalog_line}")
        if self.verified:
            out.append(f"  verified {_verdict_line(self.verified)}")
        if self.last_error:
            message = self.last_error["message"].splitlines()[0] if self.last_error["message"] else ""
            out.append(f"  last error at {self.last_error['time']}: {message}")
        if self.problem:
            out.append(f"  problem  {self.problem}")
        return out


def exit_code(found: list[TableStatus]) -> int:
    """The exit code of `streamer status` (see the module's doc)."""
    if any(s.problem for s in found):
        return EXIT_TABLE_PROBLEM
    return EXIT_KAFKA_UNREACHABLE if any(s.lag_unknown for s in found) else EXIT_OK


def statuses(configs: list[JobConfig], kafka_timeout: float = DEFAULT_KAFKA_TIMEOUT_SECONDS) -> list[TableStatus]:
    """The status of each table. Brokers that did not answer for one table are not asked again
    for the next, so a broker outage costs one timeout, not one per table."""
    down: dict[str, str] = {}
    return [table_status(config, kafka_timeout, down) for config in configs]


def table_status(
    config: JobConfig, kafka_timeout: float = DEFAULT_KAFKA_TIMEOUT_SECONDS, down: dict[str, str] | None = None
) -> TableStatus:
    """One table's status; `down` maps the bootstrap servers found unreachable so far to why."""
    path = config.table.path
    status = TableStatus(config.table.name, path, exists=False)
    try:
        status.exists = MorTable.exists(path, config.table.storage_options)
        if status.exists:
            table = MorTable.load(path, config.table.storage_options)
            _read_table(status, table, config.source.checkpoint_id)
            _read_catalog(status, config, table)
    except UnsupportedTableVersionError as e:
        status.problem = str(e)
        return status
    except (OSError, ValueError) as e:  # unreadable storage, a torn or foreign .hoodie
        status.problem = f"cannot read the table at {path}: {e}"
        return status
    if status.offsets:
        _read_lag(status, config, kafka_timeout, {} if down is None else down)
    return status


def _read_table(status: TableStatus, table: MorTable, checkpoint_id: str | None) -> None:
    timeline = table.timeline()
    last = timeline.last_completed_write()
    if last is not None:
        committed = parse_instant_time(last.timestamp)
        status.last_commit = last.timestamp
        status.last_commit_time = committed.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        status.last_commit_age_seconds = round((datetime.now(UTC) - committed).total_seconds(), 1)
    status.pending = [f"{i.timestamp} {i.action} {i.state}" for i in timeline.pending()]
    checkpoint = table_checkpoint(table, checkpoint_id=checkpoint_id)
    if checkpoint is not None:
        status.offsets = checkpoint.offsets
    status.verified = read_verdict(table.storage)
    if status.verified is not None and differing_rows(status.verified):
        status.problem = "streamer verify found rows that differ from the source table"
    status.last_error = read_last_error(table.storage)
    if status.last_error is not None:
        failed = error_time(status.last_error)
        if last is None or failed >= parse_instant_time(last.timestamp).replace(microsecond=0):
            status.problem = "the job stopped with the last error, and nothing was committed since"


def _read_catalog(status: TableStatus, config: JobConfig, table: MorTable) -> None:
    """How far the catalog's registration is behind the table, as the job last recorded it."""
    found = catalog_status(config, table, table.timeline())
    if found is not None:
        status.catalog, status.catalog_line = asdict(found), found.line()


def _read_lag(status: TableStatus, config: JobConfig, timeout: float, down: dict[str, str]) -> None:
    from confluent_kafka import KafkaException

    servers = config.source.bootstrap_servers
    if servers in down:
        status.lag, status.lag_unknown = None, down[servers]
        return
    progress = KafkaProgress(config.source, timeout)
    try:
        status.lag = progress.lag(status.offsets)
    except BrokersUnreachableError as e:
        status.lag, status.lag_unknown = None, down.setdefault(servers, str(e))
    except KafkaException as e:  # answered, but not with offsets: authorization, a broken topic
        status.lag, status.lag_unknown = None, f"{servers} refused the offsets request ({e.args[0].str()})"
    finally:
        progress.close()


def _verdict_line(verdict: dict) -> str:
    when = f"at {verdict['time']}: "
    if differing_rows(verdict):
        return (
            f"{when}DIFFERS: {verdict['missing']:,} missing, {verdict['extra']:,} extra, "
            f"{verdict['different']:,} different"
        )
    if verdict.get("note"):
        return f"{when}not compared: {verdict['note']}"
    return f"{when}equal ({verdict['rows']:,} rows)"


def _offsets(parts: dict[int, int]) -> str:
    shown = [f"{p}:{o}" for p, o in sorted(parts.items())[:_OFFSETS_SHOWN]]
    more = len(parts) - _OFFSETS_SHOWN
    return " ".join(shown) + (f" (+{more} partitions)" if more > 0 else "")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"
