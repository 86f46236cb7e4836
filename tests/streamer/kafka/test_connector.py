"""Which Spark Kafka connector `streamer run` asks Spark to fetch for `source.format: kafka`."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.kafka.connector import connector_version, with_connector

pytestmark = pytest.mark.unit

PUBLISHED = ["3.5.6", "4.0.1", "4.1.3", "4.2.0-preview5", "4.2.0", "5.0.0"]


def test_the_connector_is_the_installed_sparks_own_when_published_else_the_newest_of_its_major_version():
    assert connector_version("4.2.0", PUBLISHED) == "4.2.0"
    assert connector_version("4.3.0", PUBLISHED) == "4.2.0"  # not on Maven Central yet
    assert connector_version("4.3.0", None) == "4.3.0"  # Maven Central not asked: Spark's own repositories decide


def test_only_kafka_format_tables_get_the_connector_and_never_over_one_already_named():
    conf = {"spark.jars.packages": "org.example:other:1.0"}
    assert with_connector(conf, ["kafka-arrow"], under_spark_submit=False) == (conf, None)
    assert with_connector(conf, ["kafka"], under_spark_submit=True) == (conf, None)
    named = {"spark.jars": "/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar"}
    assert with_connector(named, ["kafka"], under_spark_submit=False) == (named, None)


def test_spark_fetches_the_connector_from_maven_central_not_from_poms_left_in_the_local_maven_repository(tmp_path):
    conf, added = with_connector({"spark.jars.ivy": str(tmp_path / "ivy")}, ["kafka"], under_spark_submit=False)
    assert added is not None and added in conf["spark.jars.packages"]
    settings = Path(conf["spark.jars.ivySettings"]).read_text()
    assert "https://repo1.maven.org/maven2/" in settings and ".m2" not in settings
    assert conf["spark.jars.ivySettings"].startswith(str(tmp_path / "ivy"))
    own = {"spark.jars.ivySettings": "/etc/spark/ivysettings.xml"}
    assert (
        with_connector(own, ["kafka"], under_spark_submit=False)[0]["spark.jars.ivySettings"]
        == own["spark.jars.ivySettings"]
    )
