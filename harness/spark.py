"""Spark's own Kafka connector (`spark-sql-kafka-0-10`) for a Spark session's `spark.jars`.

    session = SparkSession.builder.config("spark.jars", ",".join(map(str, kafka_connector().jars)))

The connector of the installed PySpark's version is fetched with `streamer.sandbox.jars`. PyPI can serve
a PySpark release before Spark's jars of that version are on Maven Central (4.3.0 was); then the
newest connector of its major version there is used, as `streamer run` does; when Maven Central
cannot be asked and the version is not there, `FALLBACK_VERSION` (the fallback logged). Jars
that PySpark ships already (Scala, Hadoop, compression codecs) are left out: Spark's own copies
win anyway.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import pyspark

from streamer.kafka.connector import connector_version, published_versions
from streamer.sandbox import jars

FALLBACK_VERSION = "4.2.0"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaConnector:
    version: str  # of spark-sql-kafka-0-10
    jars: tuple[Path, ...]  # the connector and what PySpark does not ship of its dependencies


def kafka_connector(spark_version: str = pyspark.__version__) -> KafkaConnector:
    """The connector `streamer run` would have Spark fetch (`streamer.kafka.connector`): the
    installed Spark's, else the newest of its major version on Maven Central."""
    version = connector_version(spark_version, published_versions())
    try:
        return _connector(version)
    except jars.MavenFetchError as e:
        if version == FALLBACK_VERSION:
            raise
        log.warning("spark-sql-kafka-0-10 %s cannot be fetched; using %s instead: %s", version, FALLBACK_VERSION, e)
        return _connector(FALLBACK_VERSION)


def _connector(version: str) -> KafkaConnector:
    fetched = jars.fetch("spark-sql-kafka", version, [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"])
    shipped = {_artifact_name(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return KafkaConnector(version, tuple(j for j in fetched.jars if _artifact_name(j) not in shipped))


def _artifact_name(jar: Path) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9]+)?\.jar$", "", jar.name)
