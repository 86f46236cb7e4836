"""Scenario `cdc`: what Debezium's envelope costs against plain JSON of the same rows.

W1 is written twice to Apache Kafka before anything is timed: as the plain JSON rows every other
scenario reads (`plain`), and as Debezium's change events of the same rows, as its PostgreSQL
connector writes them with Kafka Connect's JSON converter, schemas off (`debezium`) and on
(`debezium-schemas`), and with Confluent's Avro converter through a schema registry (the tests'
registry server, `debezium-avro`): the initial load as snapshot reads (`op: r`), then creates,
updates and deletes (`d` with the whole row in `before`, as under REPLICA IDENTITY FULL), each
with an LSN that grows in stream order, keyed by `{"order_id": ...}` (in Connect's JSON too, and
as JSON on the Avro topic, so that only the values differ).

Two measurements, each side by side in one run:

- the decode pass alone, in this process: `RecordDecoder.decode` over the first upsert batch's
  messages, as a Spark task runs it (records/s, median of a few repetitions);
- the streaming job on each topic: `streamer run --once`, the upsert batches' records/s from the
  job's own log, as the `ingest` scenario measures ours.

The issue's targets: Connect's JSON envelope costs at most 15% of either without Connect's
schemas, at most 30% with them (each message then carries its schema, several times the row's
bytes, to parse and skip); the Avro envelope at most 15%.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import yaml

from bench import broker, streaming
from bench.measure import PathResult, run_measured
from bench.report import Check, Section
from bench.workload import SCHEMA, VALUE_DDL, W1, kafka_records
from harness.schema_registry import ApicurioRegistry
from streamer.config.choices import EnvelopeField, TombstonePolicy
from streamer.decode.debezium import EnvelopeColumns
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import Deletes, RecordDecoder
from streamer.decode.registry import SchemaRegistryClient, confluent_frame
from streamer.kafka.schema import ARROW_SCHEMA_WITHOUT_HEADERS
from streamer.sandbox.topics import create_topic, produce
from table import to_avro_schema

PARTITIONS = 2
DECODE_REPEATS = 5
#: Each topic's job runs this many times, the topics taking turns, in order and then in reverse:
#: a machine that speeds up or slows down during the scenario charges every topic alike.
JOB_ROUNDS = 2
#: The most each Debezium topic may cost against the plain JSON rows, in records/s.
MAX_COST = {"debezium": 0.15, "debezium-schemas": 0.30, "debezium-avro": 0.15}
ROW_DDL = VALUE_DDL.replace(", is_deleted BOOLEAN", "")
ROW = SCHEMA.remove(SCHEMA.get_field_index("is_deleted"))
FIRST_LSN = 22_000_000
#: The row as an Avro record (the reader schema of the Avro topic's table, and its writer's `Value`).
ROW_AVRO = {"type": "record", "name": "Value", "fields": to_avro_schema(ROW, "Value")["fields"]}
DEBEZIUM_TOPICS = ("debezium", "debezium-schemas", "debezium-avro")
#: W1's Arrow types as Kafka Connect names them.
CONNECT_TYPES = {pa.string(): "string", pa.float64(): "double", pa.int64(): "int64"}

NOTES = [
    "decode: RecordDecoder.decode over the first upsert batch's messages in this process, one thread, the "
    f"fastest of {DECODE_REPEATS} runs, the topics taking turns; records/s of the pass (JSON parse, envelope, key, "
    "checks). 'x ours' is against the plain job; the targets compare each measurement with its plain peer.",
    "job: streamer run --once on each topic (kafka-arrow with its default reader, native when installed, "
    f"local[2], services off), {JOB_ROUNDS} times, the topics taking turns (in order, then in reverse); "
    "records/s of the upsert batches of every run from the sink's log lines, as in the ingest scenario.",
    "Debezium topics: no tombstones (tombstones.on.delete: false), so that every topic holds the same "
    "records; deletes carry the whole row in before. The table orders by the LSN kept as source_position.",
]


def scenario(w: W1, work: Path) -> Section:
    work.mkdir(parents=True)
    tables = list(w.tables())
    with schema_registry(work) as registry_url:
        schema_id = SchemaRegistryClient(registry_url).register("debezium-avro-value", json.dumps(_envelope_avro()))
        topics = {
            "plain": plain_messages(tables),
            "debezium": debezium_messages(tables, schemas=False),
            "debezium-schemas": debezium_messages(tables, schemas=True),
            "debezium-avro": debezium_messages(tables, schemas=False, avro_schema_id=schema_id),
        }
        results, details = [], {"message_bytes": {name: sum(len(v) for _, v, _ in m) for name, m in topics.items()}}
        first_batch = slice(len(tables[0]), len(tables[0]) + len(tables[1]))
        seconds = decode_seconds({name: messages[first_batch] for name, messages in topics.items()}, registry_url)
        for name, spent in seconds.items():
            results.append(PathResult(f"decode-{name}", f"decode pass: {name}", len(tables[1]), spent))
        with broker.kafka(work) as bootstrap:
            for name, messages in topics.items():
                create_topic(bootstrap, name, partitions=PARTITIONS)
                produce(bootstrap, name, messages)
            runs: dict[str, list[PathResult]] = {name: [] for name in topics}
            for round_ in range(1, JOB_ROUNDS + 1):
                for name in list(topics) if round_ % 2 else reversed(topics):
                    print(f"  streamer run --once: {name}, run {round_}", flush=True)
                    runs[name].append(job(work / f"{name}-{round_}", w, bootstrap, name, registry_url))
            results += [_together(done) for done in runs.values()]
    section = Section(
        f"Debezium's envelope against plain JSON: W1, {w.initial_rows:,} rows loaded, {w.batches} "
        f"batches of {w.batch_rows:,}",
        "job-plain",
        results,
        NOTES,
        details,
    )
    section.checks = checks(section)
    return section


def checks(section: Section) -> list[Check]:
    out = []
    for kind in ("decode", "job"):
        plain = section.result(f"{kind}-plain").records_per_second
        for name in DEBEZIUM_TOPICS:
            cost = 1 - section.result(f"{kind}-{name}").records_per_second / plain if plain else 1.0
            out.append(
                Check(
                    f"{kind}: {name} against plain JSON",
                    f"{cost:+.1%} records/s cost",
                    f"<= {MAX_COST[name]:.0%}",
                    cost <= MAX_COST[name],
                )
            )
    return out


def _together(runs: list[PathResult]) -> PathResult:
    """A topic's runs as one result: their upsert batches together, each run's rate in details."""
    failed = next((r for r in runs if "error" in r.details), None)
    if failed is not None:
        return failed
    first = runs[0]
    return PathResult(
        first.name,
        first.label,
        sum(r.records for r in runs),
        sum(r.seconds for r in runs),
        [s for r in runs for s in r.batch_seconds],
        first.load_seconds,
        peak_rss={k: max(r.peak_rss.get(k, 0) for r in runs) for k in first.peak_rss},
        details={"runs": [{"records_per_second": r.records_per_second, **r.details} for r in runs]},
    )


# -- the topics -----------------------------------------------------------------------------------


def plain_messages(tables: list[pa.Table]) -> list[tuple[bytes, bytes, None]]:
    return [m for t in tables for m in kafka_records(t)]


@contextmanager
def schema_registry(work: Path) -> Iterator[str]:
    """Apicurio Registry in a child process for the scenario; its Confluent-compatible URL."""
    registry = ApicurioRegistry(work / "schema-registry").start()
    try:
        yield registry.url
    finally:
        registry.close()


def debezium_messages(
    tables: list[pa.Table], schemas: bool, avro_schema_id: int | None = None
) -> list[tuple[bytes, bytes, None]]:
    """The change events of W1's rows: Connect's JSON (with or without its schemas), or Avro in
    Confluent's wire format with the registry's `avro_schema_id` for `_envelope_avro()`."""
    key_schema = {
        "type": "struct",
        "name": "pg.public.orders.Key",
        "optional": False,
        "fields": [{"type": "string", "optional": False, "field": "order_id"}],
    }
    value_schema = _envelope_schema()
    lsn = FIRST_LSN
    messages = []
    for batch, table in enumerate(tables):
        for row in table.to_pylist():
            deleted = row.pop("is_deleted")
            op = "r" if batch == 0 else "d" if deleted else "u" if row["status"] != "created" else "c"
            lsn += 0 if batch == 0 else 40
            payload = {
                "before": row if deleted else None,
                "after": None if deleted else row,
                "source": {
                    "version": "3.6.1.Final",
                    "connector": "postgresql",
                    "name": "pg",
                    "ts_ms": row["updated_at"],
                    "snapshot": "true" if batch == 0 else "false",
                    "db": "shop",
                    "sequence": None,
                    "schema": "public",
                    "table": "orders",
                    "txId": 700 + batch,
                    "lsn": FIRST_LSN if batch == 0 else lsn,
                    "xmin": None,
                },
                "transaction": None,
                "op": op,
                "ts_ms": row["updated_at"] + 5,
            }
            key = {"order_id": row["order_id"]}
            if avro_schema_id is not None:
                messages.append(
                    (json.dumps(key, separators=(",", ":")).encode(), _avro_value(avro_schema_id, payload), None)
                )
                continue
            if schemas:
                payload, key = {"schema": value_schema, "payload": payload}, {"schema": key_schema, "payload": key}
            messages.append(
                (
                    json.dumps(key, separators=(",", ":")).encode(),
                    json.dumps(payload, separators=(",", ":")).encode(),
                    None,
                )
            )
    return messages


def _avro_value(schema_id: int, payload: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed_envelope_avro(), payload)
    return confluent_frame(schema_id, out.getvalue())


@cache
def _parsed_envelope_avro() -> Any:
    return fastavro.parse_schema(_envelope_avro())


def _envelope_avro() -> dict:
    """The Envelope schema Debezium's PostgreSQL connector registers with the Avro converter."""
    optional = [("snapshot", "string"), ("sequence", "string"), ("txId", "long"), ("lsn", "long"), ("xmin", "long")]
    required = [("version", "string"), ("connector", "string"), ("name", "string"), ("ts_ms", "long")]
    required += [("db", "string"), ("schema", "string"), ("table", "string")]
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [{"name": n, "type": t} for n, t in required]
        + [{"name": n, "type": ["null", t], "default": None} for n, t in optional],
    }
    block = {
        "type": "record",
        "name": "block",
        "namespace": "event",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "pg.public.orders",
        "fields": [
            {"name": "before", "type": ["null", ROW_AVRO], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "transaction", "type": ["null", block], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


def _envelope_schema() -> dict:
    row = {
        "type": "struct",
        "optional": True,
        "name": "pg.public.orders.Value",
        "fields": [{"type": CONNECT_TYPES[f.type], "optional": f.name != "order_id", "field": f.name} for f in ROW],
    }
    source = {
        "type": "struct",
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
        "field": "source",
        "fields": [
            {"type": "string", "optional": False, "field": "connector"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "lsn"},
        ],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": "pg.public.orders.Envelope",
        "version": 2,
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


# -- decode ---------------------------------------------------------------------------------------


def decoder(topic: str, registry_url: str) -> RecordDecoder:
    if topic == "plain":
        return RecordDecoder(
            FormatSpec("json", SCHEMA),
            FormatSpec("none", None),
            required_fields=("order_id", "updated_at"),
            deletes=Deletes(column="is_deleted", key_fields=("order_id", "region"), ordering_field="updated_at"),
        )
    columns = EnvelopeColumns(((EnvelopeField.POSITION, "source_position"),))
    if topic == "debezium-avro":
        value = FormatSpec("confluent-avro", ROW, json.dumps(ROW_AVRO))
    else:
        value = FormatSpec("json", ROW, json.dumps(to_avro_schema(ROW, "orders")))
    return RecordDecoder(
        value,
        FormatSpec("json", pa.schema([("order_id", pa.string())])),
        registry_url=registry_url if topic == "debezium-avro" else None,
        required_fields=("order_id", "source_position"),
        deletes=Deletes(TombstonePolicy.DELETE, columns, ("order_id", "region"), "source_position"),
    )


def decode_seconds(messages: dict[str, list[tuple[bytes, bytes, None]]], registry_url: str) -> dict[str, float]:
    """The fastest of `DECODE_REPEATS` decodes of each topic's batch, the topics taking turns, so
    that other work on the machine weighs on each alike."""
    batches = {name: (decoder(name, registry_url), kafka_batch(batch)) for name, batch in messages.items()}
    best = dict.fromkeys(batches, float("inf"))
    for _ in range(DECODE_REPEATS + 1):  # the first round warms up
        for name, (decoder_, batch) in batches.items():
            started = time.perf_counter()
            out = decoder_.decode(batch)
            best[name] = min(best[name], time.perf_counter() - started)
            assert out.column("_error").null_count == batch.num_rows, "the bench's messages must all decode"
    return best


def kafka_batch(messages: list[tuple[bytes, bytes, None]]) -> pa.RecordBatch:
    n = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _, _ in messages], pa.binary()),
            pa.array([v for _, v, _ in messages], pa.binary()),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA_WITHOUT_HEADERS,
    )


# -- the job --------------------------------------------------------------------------------------


def job(work: Path, w: W1, bootstrap: str, topic: str, registry_url: str) -> PathResult:
    work.mkdir(parents=True)
    settings = streaming.config(work, w, bootstrap, topic, PARTITIONS)
    if topic != "plain":
        settings["table"].pop("delete_field")
        settings["table"]["ordering_field"] = "source_position"
        settings["decode"] = {
            "key": {"format": "json"},
            "value": {"format": "json", "envelope": "debezium", "schema": ROW_DDL},
            "envelope_columns": {"position": "source_position"},
        }
    if topic == "debezium-avro":
        (work / "row.avsc").write_text(json.dumps(ROW_AVRO))
        settings["decode"]["value"] = {
            "format": "confluent-avro",
            "envelope": "debezium",
            "schema_file": str(work / "row.avsc"),
        }
        settings["decode"]["schema_registry"] = {"url": registry_url}
    config_path = work / "orders.yaml"
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    log_path = work / "streamer.log"
    load_average = os.getloadavg()  # the machine is shared: what else ran when this topic's job did
    code, _wall, rss = run_measured(streaming.command(config_path), log_path)
    log = log_path.read_text()
    if code != 0:
        return PathResult(
            f"job-{topic}",
            f"job: {topic}",
            0,
            0.0,
            peak_rss=rss,
            details={"error": f"exit {code}, log {log_path}:\n" + "\n".join(log.splitlines()[-20:])},
        )
    done = streaming.batches(log)
    seconds = [b.seconds for b in done]
    # The first batch is the initial load; the rest are the upsert batches.
    upserts = sum(b.records for b in done[1:])
    span = (done[-1].ended - done[0].ended).total_seconds() if len(done) > 1 else 0.0
    return PathResult(
        f"job-{topic}",
        f"job: streamer run --once, {topic}",
        upserts,
        span,
        seconds[1:],
        seconds[0] if seconds else None,
        peak_rss=rss,
        details={"micro_batches": len(done), "load_average": [load_average, os.getloadavg()]},
    )
