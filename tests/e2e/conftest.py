"""Fixtures of the end-to-end tests alone: the servers only they talk to, each started once per
run, fetched or installed on first use, stopped by its pid at the end."""

from __future__ import annotations

import pytest


# -- S3 -------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3-compatible server process (S3Proxy, see harness/s3.py) for the session, fetched on
    first use, stopped by its pid at the end. Tests make their own buckets."""
    from harness.s3 import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    try:
        yield server
    finally:
        server.stop()


# -- a change stream ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kafka_connect(kafka_bootstrap, tmp_path_factory):
    """A Kafka Connect standalone worker with Debezium's PostgreSQL and MySQL (MariaDB) connectors
    for the session, writing into the session's broker (see harness/kafka_connect.py); tests add
    connectors."""
    from harness.kafka_connect import KafkaConnect

    connect = KafkaConnect(kafka_bootstrap, tmp_path_factory.mktemp("kafka-connect")).start()
    try:
        yield connect
    finally:
        connect.close()


# -- a source database with a binlog -------------------------------------------------------------
@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory):
    """MariaDB with a row-based binlog for the session (see harness/mariadb.py), installed from
    Debian's packages on first use, stopped by its pid at the end. Tests make their own
    databases."""
    from harness.mariadb import MariaDbServer

    server = MariaDbServer(tmp_path_factory.mktemp("mariadb")).start()
    try:
        yield server
    finally:
        server.close()
