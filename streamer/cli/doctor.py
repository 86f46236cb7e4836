"""`streamer doctor`: everything a table job needs, checked one by one, each with its fix.

It is what an operator runs when a pipeline stopped, so no single fault may stop it: each check
catches its own failure and reports it as a problem; a check that depends on a failed one is left
out (no brokers answering: no topics to look at). The checks follow the order a job meets them:
the configs (every problem of every file, as `streamer run` finds them before Spark starts:
`streamer.preflight`), Java and Spark, Spark's Kafka connector (`format: kafka`); then, per
table, the brokers, topics, partitions and the retention of the table's offsets, the schema
registry, the change events of a Debezium topic against the config, the table's storage, its
writer lease, pending instants, the timeline and archival, compaction debt and the quarantine
table.

Nothing is changed: no lease is taken, no Spark session started; the only write is a probe file
in the table's `.hoodie/.aux/` (or the directory that would hold a new table), removed at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from streamer import preflight
from streamer.catalog import catalog_status
from streamer.checkpoint import table_checkpoint
from streamer.cli.describe import file_groups
from streamer.cli.output import human_bytes
from streamer.config.choices import BadRecordPolicy, Envelope, EnvelopeField, RecordFormat, SourceFormat
from streamer.config.loading import read_all
from streamer.config.mirror import MirrorConfig
from streamer.config.model import JobConfig, SchemaRegistrySettings, SyncSettings
from streamer.decode.avro import parse_avro, read_avro
from streamer.decode.ddl import parse_ddl
from streamer.decode.decoded import UndecodableRecordError
from streamer.decode.registry import CONFLUENT_HEADER_SIZE, SchemaRegistryClient, confluent_schema_id
from streamer.errors import BrokersUnreachableError, ConfigError, ConfigValueError, SchemaRegistryError
from streamer.kafka.consumer import NATIVE_REMEDY, describe_reader, native_available
from streamer.kafka.offsets import KafkaProgress, TopicRanges
from streamer.kafka.options import SourceOptions
from streamer.logs.clients import client_config
from streamer.mirror import RefusedTableError, mirror_source_options, mirrored_topics, table_config
from table import (
    AUX_DIR,
    COMMIT_TIME,
    METADATA_DIR,
    PARTITION_PATH,
    RECORD_KEY,
    Action,
    Instant,
    MorTable,
    Storage,
    UnsupportedTableVersionError,
    read_archived_instants,
)

DEFAULT_TIMEOUT_SECONDS = 5.0
#: Java releases Spark 4 runs on.
SUPPORTED_JAVA = (17, 21)
QUARANTINE_ENTRIES_SHOWN = 3
#: Records read back from the end of each partition to find its newest change event.
SAMPLED_PER_PARTITION = 3
PENDING_SHOWN = 4
KEYS_SHOWN = 3
#: The largest table (its latest file slices) whose keys `doctor` reads to find keys in two partitions.
KEY_CHECK_MAX_BYTES = 2 * 1024**3


class Verdict(StrEnum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked (of which table), what was found, what to do."""

    subject: str
    verdict: Verdict
    found: str
    fix: str | None = None
    table: str = ""
    more: tuple[str, ...] = ()  # lines under it (the quarantine's newest entries)


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if any(c.verdict is Verdict.PROBLEM for c in self.checks) else 0

    def lines(self) -> list[str]:
        table_width = max((len(c.table) for c in self.checks), default=0)
        subject_width = max((len(c.subject) for c in self.checks), default=0)
        out = []
        for c in self.checks:
            head = f"{c.verdict.value:<7}  " + (f"{c.table:<{table_width}}  " if table_width else "")
            text = f"{head}{c.subject:<{subject_width}}  {c.found}" + (f"; fix: {c.fix}" if c.fix else "")
            out.append(text)
            out += [" " * (len(head) + subject_width + 2) + line for line in c.more]
        counts = {v: sum(c.verdict is v for c in self.checks) for v in Verdict}
        out.append(
            f"{counts[Verdict.PROBLEM]} problem(s), {counts[Verdict.WARNING]} warning(s), {counts[Verdict.OK]} ok"
        )
        return out


def diagnose(config_or_dir: str | Path, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Report:
    """Every check for the tables of a config file or directory; `timeout` bounds each wait for
    the brokers and for the schema registry."""
    configs, mirrors, problems = read_all(config_or_dir)
    report = Report([Check("config", Verdict.PROBLEM, problem, "correct the config") for problem in problems])
    for config in configs:
        report.checks += _config_checks(config, timeout)
    for mirror in mirrors:
        report.checks += mirror_checks(mirror, timeout)
    if not configs and not mirrors:
        return report
    if not report.checks:
        names = ", ".join(f"{c.table.name} ({c.config_path})" for c in configs)
        report.checks.append(Check("config", Verdict.OK, f"valid: {names}"))
    report.checks += [
        java_check(),
        spark_check(),
        shadowing_check(
            [Path.cwd(), *(c.config_path.parent for c in configs), *(m.config_path.parent for m in mirrors)]
        ),
    ]
    if any(c.source.format == SourceFormat.KAFKA for c in configs):
        report.checks.append(connector_check())
    if mirrors or any(c.source.format == SourceFormat.KAFKA_ARROW for c in configs):
        report.checks.append(reader_check())
    for config in configs:
        report.checks += TableDoctor(config, timeout).checks()
    return report


def _config_checks(config: JobConfig, timeout: float) -> list[Check]:
    """The problems `streamer run` finds in a config before Spark starts."""
    try:
        found = preflight.check(config, timeout)
    except Exception as e:  # noqa: BLE001 - a check that broke is a problem to report, not a crash
        return [
            Check(
                "config",
                Verdict.PROBLEM,
                f"{config.config_path}: cannot be checked: {type(e).__name__}: {e}",
                "correct the config",
                config.table.name,
            )
        ]
    return [Check("config", Verdict.PROBLEM, f"{p.file}: {p.key}: {p.text}", p.fix, config.table.name) for p in found]


def mirror_checks(mirror: MirrorConfig, timeout: float) -> list[Check]:
    """Each table the mirror would make of the topics there now, checked as `run` checks it, by
    the table's name (`schema.table`); a topic that cannot be a table, by name and why."""
    subject = f"mirror {mirror.name}"
    options = mirror_source_options(mirror, timeout)
    try:
        topics = mirrored_topics(mirror, options)
    except BrokersUnreachableError as e:
        return [Check(subject, Verdict.PROBLEM, str(e), "start the brokers or correct source.bootstrap_servers")]
    checks, ready = [], []
    for topic in topics:
        try:
            config = table_config(mirror, topic, options)
        except RefusedTableError as e:
            checks.append(Check(subject, Verdict.WARNING, f"not mirrored: {e}", None, topic.name))
            continue
        except ConfigError as e:
            checks += [Check(subject, Verdict.PROBLEM, p, "correct the mirror config", topic.name) for p in e.problems]
            continue
        if config is None:
            checks.append(
                Check(subject, Verdict.OK, "no change event yet: its table is made when one comes", None, topic.name)
            )
            continue
        found = _config_checks(config, timeout)
        checks += found
        if not found:
            ready.append(topic.name)
    checks.append(
        Check(subject, Verdict.OK, f"{len(ready)} of {len(topics)} topic(s) make valid tables: {', '.join(ready)}")
        if topics
        else Check(subject, Verdict.WARNING, f"no topic matches /{mirror.settings.pattern}/ yet", None)
    )
    return checks


# -- change events -------------------------------------------------------------------------------


def newest_values(source, found: TopicRanges, timeout: float) -> list[tuple[str, bytes]]:
    """("topic[partition]@offset", value) of the newest record with a value in each partition
    (looking back a few records past tombstones), oldest partition first."""
    from confluent_kafka import Consumer, TopicPartition

    options = SourceOptions.parse(source.reader_options())
    conf = {
        **options.consumer_config(),
        "group.id": f"mor-streamer-doctor-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(client_config(conf, f"doctor's consumer at {source.bootstrap_servers}")[0])
    try:
        wanted = {
            (t, p): held for t, parts in found.ranges.items() for p, held in parts.items() if held.end > held.earliest
        }
        consumer.assign(
            [
                TopicPartition(t, p, max(held.earliest, held.end - SAMPLED_PER_PARTITION))
                for (t, p), held in wanted.items()
            ]
        )
        newest: dict[tuple[str, int], tuple[int, str, bytes]] = {}
        deadline = time.monotonic() + timeout
        remaining = set(wanted)
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            topic, partition, offset, value = message.topic(), message.partition(), message.offset(), message.value()
            if topic is None or partition is None or offset is None:
                continue  # a consumed record has all three; the client's types allow None for other messages
            tp = (topic, partition)
            if value is not None:
                newest[tp] = (message.timestamp()[1], f"{topic}[{partition}]@{offset}", value)
            if offset >= wanted[tp].end - 1:
                remaining.discard(tp)
        return [(where, value) for _, where, value in sorted(newest.values())]
    finally:
        consumer.close()


def change_event(config: JobConfig, value: bytes, timeout: float) -> dict:
    """A record's value read as the config's format says, without the table's schema: a dict."""
    fmt = config.decode.value.format
    if fmt == RecordFormat.JSON:
        record = json.loads(value)
        return record["payload"] if isinstance(record, dict) and "schema" in record and "payload" in record else record
    if fmt == RecordFormat.CONFLUENT_AVRO:
        settings = config.decode.required_registry()
        schema_id = confluent_schema_id(value)
        text = SchemaRegistryClient(settings.url, settings.auth, timeout=timeout).schema_by_id(schema_id)
        if text is None:
            raise UndecodableRecordError(f"schema id {schema_id} is not in the registry")
        return read_avro(value, CONFLUENT_HEADER_SIZE, parse_avro(text), None)
    schema_file = config.schema_file(config.decode.value)
    if schema_file is None:
        raise ConfigValueError("decode.value.schema_file: required with format avro")
    return read_avro(value, 0, parse_avro(schema_file.read_text()), None)


def declared_columns(config: JobConfig) -> list[str] | None:
    """The column names of a declared Spark DDL schema (`name TYPE, ...`); None otherwise."""
    ddl = config.decode.value.schema
    return None if ddl is None else parse_ddl(ddl)[0].names


# -- the environment -----------------------------------------------------------------------------


def java_check() -> Check:
    """The Java that Spark launches: `$JAVA_HOME/bin/java`, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    fix = f"install Java {' or '.join(map(str, SUPPORTED_JAVA))} and set JAVA_HOME"
    if not java or not os.path.exists(java):
        return Check(
            "java", Verdict.PROBLEM, f"no java found ({'JAVA_HOME=' + home if home else 'none on the PATH'})", fix
        )
    try:
        answer = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("java", Verdict.PROBLEM, f"{java} -version failed: {e}", fix)
    match = re.search(r'version "(\d+)(?:\.(\d+))?[^"]*"', answer)
    if match is None:
        return Check("java", Verdict.PROBLEM, f"{java} -version said {answer.strip()[:80]!r}", fix)
    version = match.group(0).split('"')[1]
    major = int(match.group(1)) if match.group(1) != "1" else int(match.group(2))
    if major < SUPPORTED_JAVA[0]:
        return Check(
            "java", Verdict.PROBLEM, f"{version} at {java}: Spark 4 needs Java {SUPPORTED_JAVA[0]} or later", fix
        )
    if major not in SUPPORTED_JAVA:
        return Check(
            "java",
            Verdict.WARNING,
            f"{version} at {java}: Spark 4 is tested on Java {' and '.join(map(str, SUPPORTED_JAVA))}",
            fix,
        )
    return Check("java", Verdict.OK, f"{version} at {java}")


#: The project's top-level packages: a folder or `.py` file of one of these names in a directory
#: that Python puts first on its path is imported in their place.
OUR_PACKAGES = ("table", "streamer", "harness", "bench")


def shadowing_check(directories: list[Path]) -> Check:
    """Entries named like our packages in the working directory or a config's. The job's own
    processes never import them (they run in Python's safe-path mode), but a Python the user
    starts there with the directory on its path does: `python -m`, a notebook, a script."""
    found = []
    for directory in dict.fromkeys(d.resolve() for d in directories):
        for name in OUR_PACKAGES:
            found += [str(directory / entry) for entry in (name, f"{name}.py") if (directory / entry).exists()]
    if not found:
        return Check("working directory", Verdict.OK, "nothing named like mor-streamer's packages")
    return Check(
        "working directory",
        Verdict.WARNING,
        f"{', '.join(found)}: named like mor-streamer's packages ({', '.join(OUR_PACKAGES)}); the job's processes "
        "import the installed ones, but a Python started there with the directory on its path (python -m, a "
        "notebook, a script) imports these instead",
        "run the `streamer` command or spark-submit there, or rename them",
    )


def spark_check() -> Check:
    try:
        import pyspark
    except ImportError as e:
        return Check("spark", Verdict.PROBLEM, f"pyspark cannot be imported: {e}", "pip install mor-streamer again")
    major = int(pyspark.__version__.split(".")[0])
    if major != 4:
        return Check(
            "spark",
            Verdict.PROBLEM,
            f"pyspark {pyspark.__version__}: the job needs Spark 4",
            "pip install 'pyspark>=4.2,<5'",
        )
    return Check("spark", Verdict.OK, f"pyspark {pyspark.__version__}")


def reader_check() -> Check:
    """Which reader the `kafka-arrow` source reads with here (`streamer.kafka.consumer`): the
    python one works everywhere, the native one is faster."""
    found = describe_reader()
    if native_available():
        return Check("kafka reader", Verdict.OK, found)
    return Check("kafka reader", Verdict.WARNING, found, f"for the faster native reader: {NATIVE_REMEDY}")


def connector_check() -> Check:
    """Spark's Kafka connector, which `streamer run` has Spark fetch (`streamer.kafka.connector`):
    cached, or on Maven Central for Spark to fetch at start."""
    import pyspark

    from streamer.kafka import connector as kc

    published = kc.published_versions()
    version = kc.connector_version(pyspark.__version__, published)
    coordinate = kc.coordinate(version)
    cached = kc.cached_jar(version)
    if cached is not None:
        return Check("kafka connector", Verdict.OK, f"{coordinate} cached at {cached}")
    if published is not None and version in published:
        return Check(
            "kafka connector",
            Verdict.OK,
            f"{coordinate} not cached yet; Spark fetches it from Maven Central at the first start",
        )
    why = "Maven Central did not answer" if published is None else "Maven Central does not have it"
    return Check(
        "kafka connector",
        Verdict.PROBLEM,
        f"{coordinate} is not cached and {why}",
        "give a repository that has it (--conf spark.jars.repositories=<url>) or its jars "
        "(--conf spark.jars=<paths>), or read with source.format: kafka-arrow",
    )


# -- one table -------------------------------------------------------------------------------------


class TableDoctor:
    """The checks of one table config, in order; each catches its own failure."""

    def __init__(self, config: JobConfig, timeout: float):
        self.config = config
        self.timeout = timeout
        self.path = config.table.path
        self.storage = Storage(self.path, config.table.storage_options)
        self.table: MorTable | None = None
        self.offsets: dict[str, dict[int, int]] = {}
        self.live_writer = False

    def checks(self) -> list[Check]:
        checks = []
        unreadable = False
        try:
            if MorTable.exists(self.path, self.storage.options):
                self.table = MorTable.load(self.path, self.storage.options)
                checkpoint = table_checkpoint(self.table, checkpoint_id=self.config.source.checkpoint_id)
                self.offsets = checkpoint.offsets if checkpoint else {}
        except UnsupportedTableVersionError:
            unreadable = True  # the config's check names it, with the remedy (`streamer.preflight`)
        except (OSError, ValueError) as e:
            unreadable = True
            checks.append(
                self._check(
                    "table",
                    Verdict.PROBLEM,
                    f"cannot read the table at {self.path}: {e}",
                    "make the storage readable by this user, or correct table.path",
                )
            )
        checks += self.kafka()
        if self.config.decode.schema_registry is not None:
            checks.append(self.registry(self.config.decode.schema_registry))
        if not unreadable:
            checks.append(self.storage_access())
        if self.table is not None:
            checks += [
                self._guarded("writer lease", self.lease, self.table),
                self._guarded("pending", self.pending, self.table),
                self._guarded("timeline", self.timeline, self.table),
                self._guarded("compaction", self.compaction_debt, self.table),
            ]
            if self.config.table.partition_by:
                checks.append(self._guarded("keys", self.keys_across_partitions, self.table))
        if self.config.decode.on_error == BadRecordPolicy.QUARANTINE:
            checks.append(self._guarded("quarantine", self.quarantine))
        if self.config.sync is not None:
            checks.append(self._guarded("catalog", self.catalog, self.config.sync))
        return checks

    # -- catalog -----------------------------------------------------------------------------

    def catalog(self, sync: SyncSettings) -> Check:
        """The metastore answers on its Thrift port, and the job's last sync did not fail."""
        for host, port in sync.thrift_endpoints():
            try:
                socket.create_connection((host, port), timeout=self.timeout).close()
            except OSError as e:
                return self._check(
                    "catalog",
                    Verdict.PROBLEM,
                    f"the metastore at thrift://{host}:{port} does not "
                    f"answer ({e}); commits go on, the catalog falls behind",
                    "start the metastore, or correct sync.metastore_uris",
                )
        found = catalog_status(self.config, self.table, self.table.timeline()) if self.table is not None else None
        if found is not None and found.failing_since:
            return self._check(
                "catalog",
                Verdict.WARNING,
                found.line(),
                "fix what the error names; the job retries after each commit, or run "
                "`streamer sync CONFIG` once it is fixed",
            )
        where = sync.metastore_uris or "hive.metastore.uris of the Hadoop configuration"
        return self._check("catalog", Verdict.OK, found.line() if found is not None else f"{where}: nothing synced yet")

    def _check(
        self, subject: str, verdict: Verdict, found: str, fix: str | None = None, more: tuple[str, ...] = ()
    ) -> Check:
        return Check(subject, verdict, found, fix, self.config.table.name, more)

    def _guarded(self, subject: str, check: Callable[..., Check], *subjects: Any) -> Check:
        """A table check whose reading failed is a problem with the table, not a crash."""
        try:
            return check(*subjects)
        except (OSError, ValueError, KeyError) as e:
            return self._check(
                subject,
                Verdict.PROBLEM,
                f"cannot read it: {type(e).__name__}: {e}",
                "make the table's storage readable; a torn file under .hoodie/ needs a restore",
            )

    # -- Kafka -------------------------------------------------------------------------------

    def kafka(self) -> list[Check]:
        from confluent_kafka import KafkaException

        source = self.config.source
        servers = source.bootstrap_servers
        progress = KafkaProgress(source, self.timeout)
        try:
            found = progress.ranges(list(self.offsets))
        except BrokersUnreachableError as e:
            return [
                self._check(
                    "brokers",
                    Verdict.PROBLEM,
                    f"{e}; topics and offsets not checked",
                    "start the brokers, or correct source.bootstrap_servers (and the network to them)",
                )
            ]
        except KafkaException as e:  # answered, but refused: authentication, authorization
            return [
                self._check(
                    "brokers",
                    Verdict.PROBLEM,
                    f"{servers} refused: {e}",
                    "correct the security settings under source.options",
                )
            ]
        finally:
            progress.close()
        checks = [
            self._check("brokers", Verdict.OK, f"{servers} answered"),
            self._topics(found),
            self._partitions(found),
            self._retention(found),
        ]
        if self.config.decode.value.envelope == Envelope.DEBEZIUM:
            checks.append(self._guarded("change events", lambda: self.change_events(found)))
        return checks

    def _topics(self, found: TopicRanges) -> Check:
        source = self.config.source
        wanted = list(source.topics) if source.topics else None
        missing = [t for t in found.missing if wanted is None or t in wanted]
        if missing:
            names = ", ".join(missing)
            return self._check(
                "topics",
                Verdict.PROBLEM,
                f"{names} not on {source.bootstrap_servers}",
                f"create {'it' if len(missing) == 1 else 'them'} (kafka-topics.sh --create "
                f"--topic {missing[0]}), or correct source.topics",
            )
        present = [t for t in found.ranges if wanted is None or t in wanted]
        if not present:
            return self._check(
                "topics",
                Verdict.WARNING,
                f"no topic matches {source.topic_pattern!r}",
                "create one, or correct source.topic_pattern",
            )
        return self._check("topics", Verdict.OK, ", ".join(f"{t} ({len(found.ranges[t])} partitions)" for t in present))

    def _partitions(self, found: TopicRanges) -> Check:
        if found.unreadable:
            where = "; ".join(f"{p}: {why}" for p, why in sorted(found.unreadable.items()))
            return self._check(
                "partitions",
                Verdict.PROBLEM,
                f"offsets cannot be listed: {where}",
                "bring the partitions' leaders back (kafka-topics.sh --describe shows them)",
            )
        count = sum(len(parts) for parts in found.ranges.values())
        return self._check("partitions", Verdict.OK, f"{count} readable")

    def _retention(self, found: TopicRanges) -> Check:
        """Whether Kafka still holds the offsets the table goes on from."""
        if not self.offsets:
            start = self.config.source.starting_offsets
            return self._check(
                "offsets held",
                Verdict.OK,
                f"no offsets committed yet; the first run starts at "
                f"{start if isinstance(start, str) else 'the configured offsets'}",
            )
        lost, behind = [], 0
        for topic, parts in sorted(self.offsets.items()):
            for partition, offset in sorted(parts.items()):
                held = found.ranges.get(topic, {}).get(partition)
                if held is None:
                    if topic not in found.missing:
                        lost.append(f"{topic}[{partition}] no longer exists")
                elif offset < held.earliest:
                    lost.append(
                        f"{topic}[{partition}] goes on from {offset} but the broker holds {held.earliest} "
                        f"to {held.end - 1} ({held.earliest - offset:,} records deleted by retention)"
                    )
                elif offset > held.end:
                    lost.append(
                        f"{topic}[{partition}] goes on from {offset} but the broker holds offsets up to "
                        f"{held.end - 1} (the topic was recreated or truncated)"
                    )
                else:
                    behind += held.end - offset
        if not lost:
            return self._check("offsets held", Verdict.OK, f"yes; the table is {behind:,} records behind")
        if not self.config.source.fail_on_data_loss:
            return self._check(
                "offsets held",
                Verdict.WARNING,
                "; ".join(lost) + "; the next run goes on from the earliest offset held (fail_on_data_loss: false)",
            )
        return self._check(
            "offsets held",
            Verdict.PROBLEM,
            "; ".join(lost),
            "to accept the loss, set source.fail_on_data_loss: false and restart",
        )

    def change_events(self, found: TopicRanges) -> Check:
        """The newest record of each partition, read as Debezium's change event: that it is
        one, that its row has the fields the table needs, and that the table orders a key's
        changes by the log position."""
        config = self.config
        newest = newest_values(config.source, found, self.timeout)
        if not newest:
            return self._check("change events", Verdict.OK, "no change events in the topics yet")
        where, value = newest[-1]
        try:
            event = change_event(config, value, self.timeout)
        except (ValueError, KeyError, SchemaRegistryError, UndecodableRecordError) as e:
            return self._check(
                "change events",
                Verdict.PROBLEM,
                f"{where} does not read as a Debezium change event: {e}",
                "point source.topics at the connector's table topics (<topic.prefix>.<schema>.<table>), "
                "and decode.value.format at its converter (json or confluent-avro)",
            )
        if "op" not in event or not isinstance(event.get("source"), dict):
            return self._check(
                "change events",
                Verdict.PROBLEM,
                f"{where} is not a Debezium change event (no op or source)",
                "point source.topics at the connector's table topics, or turn value.envelope off",
            )
        t = config.table
        row = event.get("after") or event.get("before") or {}
        position_column = config.decode.envelope_columns.get(EnvelopeField.POSITION)
        needed = [
            *t.record_key,
            *t.partition_by,
            *([] if t.ordering_field in config.decode.envelope_columns.values() else [t.ordering_field]),
        ]
        lacking = [f for f in dict.fromkeys(needed) if f not in row]
        if lacking:
            return self._check(
                "change events",
                Verdict.PROBLEM,
                f"the row of {where} has no field(s) {lacking} that "
                f"table.record_key, partition_by or ordering_field name; it has {sorted(row)}",
                "name the source table's columns in the table's keys",
            )
        declared = declared_columns(config)
        undeclared = sorted(set(row) - set(declared)) if declared is not None else []
        connector = event["source"].get("connector", "?")
        if t.ordering_field != position_column:
            return self._check(
                "change events",
                Verdict.WARNING,
                f"{where}: a {connector} change event; a key's "
                f"changes are ordered by {t.ordering_field!r}, not by the log position",
                "keep the position (decode.envelope_columns: {position: <column>}) and make that column "
                "table.ordering_field",
            )
        schemaless = config.decode.value.format == RecordFormat.JSON and not value.lstrip().startswith(b'{"schema"')
        if undeclared and schemaless:
            return self._check(
                "change events",
                Verdict.WARNING,
                f"{where}: the row's column(s) {undeclared} are not "
                "in decode.value.schema, and without Connect's schemas they are not mirrored",
                "declare them, or turn the converter's schemas.enable on so that new columns follow",
            )
        return self._check(
            "change events",
            Verdict.OK,
            f"{where}: a {connector} change event; its row has the table's "
            f"keys, and {t.ordering_field!r} orders a key's changes by the log position",
        )

    def registry(self, settings: SchemaRegistrySettings) -> Check:
        client = SchemaRegistryClient(settings.url, settings.auth, timeout=self.timeout)
        try:
            subjects = client.subjects()
        except SchemaRegistryError as e:
            return self._check(
                "schema registry", Verdict.PROBLEM, str(e), "start the registry, or correct decode.schema_registry"
            )
        return self._check("schema registry", Verdict.OK, f"{client.url} answered ({len(subjects)} subjects)")

    # -- the table's storage and state -------------------------------------------------------------

    def storage_access(self) -> Check:
        """Readable and writable, proven by writing a probe file (and removing it)."""
        fix = "make it writable (free space, a read-write mount, this user's permissions), or correct table.path"
        if self.table is None:
            return self._new_table_access(fix)
        probe = f"{AUX_DIR}/doctor-{uuid.uuid4().hex}.probe"
        try:
            self.storage.list_dir(METADATA_DIR)
        except OSError as e:
            return self._check("storage", Verdict.PROBLEM, f"cannot list {self.path}/{METADATA_DIR}: {e}", fix)
        try:
            self.storage.create(probe, b"")
            self.storage.delete(probe)
        except OSError as e:
            return self._check("storage", Verdict.PROBLEM, f"{self.path} is readable but not writable: {e}", fix)
        return self._check("storage", Verdict.OK, f"{self.path} readable and writable")

    def _new_table_access(self, fix: str) -> Check:
        """No table yet: the first run creates it, so the nearest existing directory must take files."""
        where = self.storage.base_uri
        if self.storage.is_local:
            where = os.path.abspath(where)
            while not os.path.exists(where):
                where = os.path.dirname(where)
            if not os.path.isdir(where):
                return self._check(
                    "storage",
                    Verdict.PROBLEM,
                    f"no table yet, and none can be created at {self.path}: {where} is not a directory",
                    fix,
                )
        probe = self.storage.at(where)
        name = f".mor-streamer-doctor-{uuid.uuid4().hex}.probe"
        try:
            probe.create(name, b"")
            probe.delete(name)
        except OSError as e:
            return self._check("storage", Verdict.PROBLEM, f"no table yet, and {where} is not writable: {e}", fix)
        return self._check("storage", Verdict.OK, f"no table yet at {self.path}; the first run creates it")

    def lease(self, table: MorTable) -> Check:
        holder = table.writer_lease_holder()
        if holder is None:
            return self._check("writer lease", Verdict.OK, "free")
        who = f"{holder.description} (host {holder.host}, pid {holder.pid})"
        age = time.time() - holder.renewed_at
        if holder.process_gone():
            return self._check(
                "writer lease",
                Verdict.WARNING,
                f"stale: held by {who}, a process that is gone; the next start takes it over at once",
            )
        if holder.expired(time.time()):
            return self._check(
                "writer lease",
                Verdict.WARNING,
                f"stale: held by {who}, last renewed {age:.0f}s ago "
                f"(TTL {holder.ttl_seconds:.0f}s); the next start takes it over",
            )
        self.live_writer = True
        return self._check(
            "writer lease",
            Verdict.WARNING,
            f"held by a live writer: {who}, renewed {age:.0f}s ago; another start is refused while it runs",
            f"nothing if that is the job; else stop it (kill {holder.pid} on {holder.host})",
        )

    def pending(self, table: MorTable) -> Check:
        pending = table.timeline().pending()
        if not pending:
            return self._check("pending", Verdict.OK, "no pending instant")
        fates = [f"{i.timestamp} {i.action} {i.state}: {self._fate(i)}" for i in pending[:PENDING_SHOWN]]
        more = f"; +{len(pending) - PENDING_SHOWN} more" if len(pending) > PENDING_SHOWN else ""
        verdict = Verdict.OK if self.live_writer else Verdict.WARNING
        return self._check("pending", verdict, f"{len(pending)}: " + "; ".join(fates) + more)

    def _fate(self, instant: Instant) -> str:
        """What the next start (or the live writer) does with a pending instant."""
        services = self.config.services
        if instant.action == Action.DELTA_COMMIT:
            return "the live writer's batch in progress" if self.live_writer else "rolled back at the next start"
        if instant.action == Action.ROLLBACK:
            return "finished at the next start"
        service, command = {
            Action.COMPACTION: (services.compaction, "compact"),
            Action.REPLACE_COMMIT: (services.clustering, "cluster"),
            Action.CLEAN: (services.clean, "clean"),
        }.get(instant.action, (None, None))
        if service is None:
            return "left as it is"
        if service.mode == "off":
            return f"left for `streamer {command} {self.path}` (the service is off)"
        return "executed by the live writer" if self.live_writer else "executed at the next start"

    def timeline(self, table: MorTable) -> Check:
        timeline = table.timeline()
        table.last_commit_metadata(timeline)  # the newest commits' metadata parses
        archived = len(read_archived_instants(table))
        completed = len(timeline.completed())
        found = f"instants active: {len(timeline.instants)} ({completed} completed), archived: {archived}"
        archive = self.config.services.archive
        if completed > 2 * archive.max_instants:
            fix = (
                f"run `streamer archive {self.path}` while the job is stopped"
                if archive.mode == "off"
                else "look for archive failures in the job's log; `streamer archive` runs it while the job is stopped"
            )
            return self._check(
                "timeline",
                Verdict.WARNING,
                f"{found}: archival is behind "
                f"(services.archive.max_instants {archive.max_instants}, mode {archive.mode})",
                fix,
            )
        return self._check("timeline", Verdict.OK, found)

    def compaction_debt(self, table: MorTable) -> Check:
        """Log files per file group: what every snapshot read merges."""
        groups = file_groups(table).file_groups
        if not groups:
            return self._check("compaction", Verdict.OK, "no file group yet")
        worst = max(groups, key=lambda g: g.log_files)
        logs = sum(g.log_files for g in groups)
        compaction = self.config.services.compaction
        limit = 2 * (compaction.every_delta_commits or 5)
        found = (
            f"at most {worst.log_files} log files per file group ({len(groups)} groups, {logs} log files, "
            f"{human_bytes(sum(g.log_bytes for g in groups))})"
        )
        if worst.log_files <= limit:
            return self._check("compaction", Verdict.OK, found)
        fix = f"`streamer compact {self.path} --schedule` compacts now"
        if compaction.mode != "off":
            fix += "; see the job's log for why compaction does not keep up"
        return self._check(
            "compaction",
            Verdict.WARNING,
            f"{found}; {worst.partition}/{worst.file_id} has more than {limit}: reads slow down",
            fix,
        )

    def keys_across_partitions(self, table: MorTable) -> Check:
        """A record key is unique within its partition only (the bucket index is per partition, as
        in Hudi): a key whose partition value changes is stored again in its new partition. When
        the partition fields are not part of the key, this reads every key and its partition
        (two columns of every file slice) to find such keys, unless the table is larger than
        `KEY_CHECK_MAX_BYTES`."""
        t = self.config.table
        if set(t.partition_by) <= set(t.record_key):
            return self._check(
                "keys", Verdict.OK, "the partition fields are part of the record key: a key is in one partition"
            )
        groups = file_groups(table).file_groups
        cost = f"{len(groups):,} file groups, {human_bytes(sum(g.total_bytes for g in groups))}"
        how = (
            f'`streamer query {self.path} --sql "SELECT {RECORD_KEY}, count(*) FROM t GROUP BY {RECORD_KEY} '
            'HAVING count(*) > 1"`'
        )
        if sum(g.total_bytes for g in groups) > KEY_CHECK_MAX_BYTES:
            return self._check(
                "keys",
                Verdict.OK,
                f"not checked whether a key is in two partitions: it would read the keys of {cost}; {how} lists them",
            )
        started = time.monotonic()
        rows = table.snapshot(columns=[RECORD_KEY, PARTITION_PATH])
        keys = rows.group_by(RECORD_KEY).aggregate([(PARTITION_PATH, "list")])
        spread = keys.filter(pc.greater(pc.list_value_length(keys[f"{PARTITION_PATH}_list"]), 1))
        read = f"read the keys of {cost} in {time.monotonic() - started:.1f}s"
        fields = ", ".join(t.partition_by)
        if spread.num_rows == 0:
            return self._check("keys", Verdict.OK, f"no key is in two partitions ({keys.num_rows:,} keys; {read})")
        examples = tuple(
            f"{key}: {', '.join(sorted(parts))}"
            for key, parts in zip(
                spread[RECORD_KEY].to_pylist()[:KEYS_SHOWN], spread[f"{PARTITION_PATH}_list"].to_pylist()
            )
        )
        return self._check(
            "keys",
            Verdict.WARNING,
            f"{spread.num_rows:,} of {keys.num_rows:,} keys are in two or more partitions: "
            f"a key is unique within its partition, and {fields} changed for these ({read})",
            "partition by fields that never change for a key, or add them to table.record_key; either means a "
            'new table (docs/operations.md, "Keys and partitions")',
            more=examples,
        )

    def quarantine(self) -> Check:
        path = self.config.table.quarantine_location
        if not MorTable.exists(path, self.storage.options):
            return self._check("quarantine", Verdict.OK, f"empty (no table at {path} yet)")
        rows = MorTable.load(path, self.storage.options).snapshot(
            columns=[COMMIT_TIME, "topic", "partition", "offset", "reason"]
        )
        if rows.num_rows == 0:
            return self._check("quarantine", Verdict.OK, f"empty ({path})")
        newest = sorted(rows.to_pylist(), key=lambda r: (r[COMMIT_TIME], r["offset"]), reverse=True)
        entries = tuple(
            f"{r['topic']}[{r['partition']}]@{r['offset']}: {(r['reason'] or '').splitlines()[0][:100]}"
            for r in newest[:QUARANTINE_ENTRIES_SHOWN]
        )
        return self._check(
            "quarantine",
            Verdict.WARNING,
            f"{rows.num_rows:,} records at {path}",
            f"correct the producer; read them with `streamer query {path} --sql 'SELECT * FROM t'`",
            more=entries,
        )
