"""The local Apache Kafka on a machine that lacks what it needs: without Java or without Maven,
`streamer kafka start` and the demo say which is missing and how to install it, and start nothing.
(tests/e2e/test_first_hour.py runs it where they are.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamer.errors import MavenFetchError
from streamer.sandbox import jars
from tests.support.ingestion import REPO

pytestmark = pytest.mark.unit


def test_without_java_the_demo_says_so_and_what_to_install(tmp_path):
    env = {
        **os.environ,
        "JAVA_HOME": str(tmp_path / "no-java"),
        "DEMO_KAFKA_DIR": str(tmp_path / "kafka"),
        "DEMO_OUTPUT": str(tmp_path / "demo"),
        "PYTHONPATH": str(REPO),
    }

    demo = subprocess.run(
        [sys.executable, "-m", "streamer.cli.demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )

    assert demo.returncode == 1, demo.stdout + demo.stderr
    assert demo.stderr.strip().splitlines()[-1] == (
        f"error: the demo needs Apache Kafka, which cannot start here: JAVA_HOME={tmp_path / 'no-java'} has no "
        "bin/java: install Java 17 or 21 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )
    assert not (tmp_path / "kafka" / "broker.json").exists()


def test_without_maven_the_jars_cannot_be_fetched_and_the_message_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no mvn there

    with pytest.raises(MavenFetchError) as raised:
        jars.fetch("kafka", "4.4.0", ["org.apache.kafka:kafka_2.13:4.4.0"], cache=tmp_path / "cache")

    assert str(raised.value) == (
        "cannot fetch org.apache.kafka:kafka_2.13:4.4.0 from Maven Central: no `mvn` on the "
        "PATH; install Apache Maven (Debian/Ubuntu: apt-get install maven)"
    )
    assert not (tmp_path / "cache" / "kafka-4.4.0").exists()
