"""A MariaDB database mirrored by one config: a second source, whose changes are ordered by binlog
positions rather than PostgreSQL's LSNs. Debian's MariaDB, Debezium 3.6.1's binlog connector in
Kafka Connect (its `MySqlConnector`: the MariaDB one is not on the Maven Central the tests
reach), Apache Kafka, and one `streamer run --once` after the snapshot, inserts, updates and
deletes; every lake table then holds what `SELECT *` reads in MariaDB, in the forms Debezium
writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date, datetime

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from harness.kafka_connect import debezium_mariadb_config
from streamer.decode.debezium import BINLOG_FILE_FACTOR
from table.mor_table import MorTable
from tests.support.ingestion import run_streamer

pytestmark = pytest.mark.e2e

DATABASE = "shop"
PREFIX = "maria"
CAPTURE_TIMEOUT = 60
SERVER_ID = 5401
EPOCH = datetime(1970, 1, 1)

#: Snapshotted: MariaDB's JDBC driver, which the connector reads MariaDB through, refuses the
#: connector's way of reading DATE and DATETIME columns in a snapshot, so `kinds` is created after it.
SNAPSHOT = """
CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL);
CREATE TABLE stock (sku VARCHAR(20), warehouse INT, qty INT NOT NULL, PRIMARY KEY (sku, warehouse));
INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace'), (3, 'Linus');
INSERT INTO stock VALUES ('apple', 1, 10), ('apple', 2, 20), ('pear', 1, 5);
"""
#: Read from the binlog: a table created while the connector runs.
STREAMED = """
CREATE TABLE kinds (
    id INT PRIMARY KEY,
    price DECIMAL(12, 2),
    ratio DOUBLE,
    seen DATETIME(6),
    born DATE,
    label VARCHAR(40),
    active BOOLEAN
);
INSERT INTO kinds VALUES
    (1, 12.50, 0.1, '2024-02-29 23:59:59.999999', '2024-02-29', 'Zoë ☕ 東京', TRUE),
    (2, -0.01, -1e300, '1969-12-31 23:59:59.500000', '1969-12-31', '', FALSE),
    (3, NULL, NULL, NULL, NULL, NULL, NULL);
"""
#: After the snapshot: each kind of change, two updates of one key in one transaction among them.
CHANGES = """
INSERT INTO customers VALUES (4, 'Margaret');
UPDATE customers SET name = 'Ada Lovelace' WHERE id = 1;
DELETE FROM customers WHERE id = 2;
START TRANSACTION;
UPDATE stock SET qty = 11 WHERE sku = 'apple' AND warehouse = 1;
UPDATE stock SET qty = 12 WHERE sku = 'apple' AND warehouse = 1;
COMMIT;
DELETE FROM stock WHERE sku = 'pear' AND warehouse = 1;
INSERT INTO stock VALUES ('pear', 2, 7);
UPDATE kinds SET price = 99999999.99, ratio = 2.5, seen = '2000-01-01 00:00:00.000001', label = 'ñ' WHERE id = 1;
UPDATE kinds SET active = TRUE, born = '1900-01-01' WHERE id = 3;
INSERT INTO kinds VALUES (4, 0.00, 0, '1970-01-01 00:00:00', '1970-01-01', 'Ω', NULL);
DELETE FROM kinds WHERE id = 2;
"""
#: The records each topic gets: a read a row by the snapshot, one a change, a delete two (its
#: tombstone).
RECORDS = {"customers": 3 + 1 + 1 + 2, "stock": 3 + 2 + 2 + 1, "kinds": 3 + 3 + 2}
KEYS = {"customers": ("id",), "stock": ("sku", "warehouse"), "kinds": ("id",)}


def _microseconds(text: str) -> int:
    """DATETIME(6) as Debezium writes it: microseconds since the epoch (io.debezium.time.MicroTimestamp)."""
    delta = datetime.fromisoformat(text) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _days(text: str) -> int:
    """DATE as Debezium writes it: days since the epoch (io.debezium.time.Date)."""
    return (date.fromisoformat(text) - EPOCH.date()).days


#: MariaDB's text for each column, turned into the value Debezium's change events carry.
DEBEZIUM_FORMS: dict[str, dict[str, Callable[[str], object]]] = {
    "customers": {"id": int, "name": str},
    "stock": {"sku": str, "warehouse": int, "qty": int},
    "kinds": {
        "id": int,
        "price": str,  # decimal.handling.mode=string: MariaDB's own digits
        "ratio": float,
        "seen": _microseconds,
        "born": _days,
        "label": str,
        "active": lambda text: text == "1",  # BOOLEAN, TINYINT(1) in MariaDB: a Connect boolean
    },
}


@pytest.fixture(scope="module")
def mirror(mariadb_server, kafka_connect, tmp_path_factory):
    """The database captured by one connector through a snapshot and changes, then mirrored by
    one `streamer run --once`; yields the lake's directory and the run's output."""
    db = mariadb_server
    db.sql(f"DROP DATABASE IF EXISTS {DATABASE}; CREATE DATABASE {DATABASE};")
    db.sql(SNAPSHOT, DATABASE)
    config = debezium_mariadb_config(
        db.host, db.port, db.user, db.password, kafka_connect.bootstrap, PREFIX, DATABASE, SERVER_ID
    )
    kafka_connect.add_connector(PREFIX, config)
    try:
        kafka_connect.wait_running(PREFIX)
        _wait_captured(kafka_connect, {"customers": 3, "stock": 3})  # the snapshot's reads
        db.sql(STREAMED, DATABASE)
        db.sql(CHANGES, DATABASE)
        _wait_captured(kafka_connect, RECORDS)
        work = tmp_path_factory.mktemp("mirror-mariadb")
        mirror_file = work / "shop.yaml"
        mirror_file.write_text(
            yaml.safe_dump(
                {
                    "mirror": {"topic_prefix": PREFIX},
                    "table": {"path": "lake/{table}"},
                    "source": {"bootstrap_servers": kafka_connect.bootstrap},
                }
            )
        )
        code, out = run_streamer(["run", str(mirror_file), "--once"], timeout=300)
        assert code == 0, out[-6000:]
        yield work / "lake", out
    finally:
        kafka_connect.delete_connector(PREFIX)


@pytest.mark.parametrize("table", sorted(KEYS))
def test_each_mirrored_table_holds_what_mariadb_selects(mirror, mariadb_server, table):
    lake, out = mirror
    forms = DEBEZIUM_FORMS[table]
    expected = _source_rows(mariadb_server, table, forms)
    ours = MorTable.load(str(lake / table)).snapshot(columns=[*forms, "source_position"]).to_pylist()
    positions = [row.pop("source_position") for row in ours]
    ours_by_key, expected_by_key = _by_key(ours, KEYS[table]), _by_key(expected, KEYS[table])
    assert ours_by_key == expected_by_key, out[-4000:]
    assert _types(ours_by_key) == _types(expected_by_key)  # 1 == 1.0 == True: equal values, same types
    binlog_number = int(mariadb_server.sql("SHOW MASTER STATUS").split("\t")[0].rsplit(".", 1)[1])
    assert all(p // BINLOG_FILE_FACTOR == binlog_number and p % BINLOG_FILE_FACTOR > 0 for p in positions), positions


def _source_rows(db, table: str, forms: dict[str, Callable[[str], object]]) -> list[dict]:
    """`SELECT *` of the table, each value in Debezium's form; NULL stays None."""
    lines = db.sql(f"SELECT {', '.join(forms)} FROM {table}", DATABASE).splitlines()
    return [
        {name: None if text == "NULL" else form(text) for (name, form), text in zip(forms.items(), line.split("\t"))}
        for line in lines
    ]


def _by_key(rows: list[dict], key: tuple[str, ...]) -> dict[tuple, dict]:
    return {tuple(row[k] for k in key): row for row in rows}


def _types(rows: dict[tuple, dict]) -> dict[tuple, dict[str, type]]:
    return {key: {column: type(value) for column, value in row.items()} for key, row in rows.items()}


def _wait_captured(connect, records: dict[str, int]) -> None:
    """Until the tables' topics hold `records` records each; a failed task raises."""
    consumer = Consumer({"bootstrap.servers": connect.bootstrap, "group.id": "capture-check"})
    try:
        deadline = time.monotonic() + CAPTURE_TIMEOUT
        while True:
            topics = consumer.list_topics(timeout=10).topics  # all of them: naming one may create it
            counts = {table: _records(consumer, topics, f"{PREFIX}.{DATABASE}.{table}") for table in records}
            if counts == records:
                return
            assert time.monotonic() < deadline, f"records in Kafka {counts}, expected {records}"
            connect.wait_running(PREFIX)
            time.sleep(0.5)
    finally:
        consumer.close()


def _records(consumer: Consumer, topics: dict, topic: str) -> int:
    if topic not in topics:
        return 0
    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in topics[topic].partitions
    )
