"""Spark's own Kafka connector (`spark-sql-kafka-0-10`) for tables with `source.format: kafka`.

`streamer run` launches Spark itself; when a table asks for `format: kafka`, it adds the
connector's Maven coordinates to `spark.jars.packages`, and Spark fetches the connector and its
dependencies when it starts: from Maven Central and the repositories of
`spark.jars.repositories`, unless `spark.jars.ivySettings` names settings of the user's own.

Spark's default resolver asks the local Maven repository first and trusts it for any artifact
whose pom is there; Maven keeps the poms of versions it resolved but did not take, without their
jars, and then the start fails on a jar that Maven Central has. So the job gives Spark settings
that fetch from Maven Central into Ivy's cache, and leave the local Maven repository alone.

The connector's version is the installed Spark's. PyPI can serve a PySpark release before
Spark's jars of that version reach Maven Central; then the newest release of the same major
version there is used, and a warning says so. Nothing is added when the settings name a connector
already (`spark.jars.packages`, `spark.jars`), or under spark-submit, whose `--packages` rules.
"""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pyspark

from streamer.config.choices import SourceFormat
from streamer.errors import ConnectorUnavailableError

log = logging.getLogger(__name__)

ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
METADATA_URL = "https://repo1.maven.org/maven2/org/apache/spark/spark-sql-kafka-0-10_2.13/maven-metadata.xml"
METADATA_TIMEOUT_SECONDS = 10.0


def coordinate(version: str) -> str:
    return f"{ARTIFACT}:{version}"


#: Ivy's directory under the home directory for Spark 4 (`spark.jars.ivy`'s default): its cache
#: and the jars it retrieved.
IVY_DIR_NAME = ".ivy2.5.2"
#: Spark's resolver settings for the connector (see the module's docstring).
IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""


def default_ivy_dir() -> Path:
    return Path.home() / IVY_DIR_NAME


def cached_jar(version: str, ivy_dir: Path | None = None) -> Path | None:
    """The connector's jar where Spark finds it without asking a repository: the jars Ivy
    retrieved for an earlier start."""
    group, name = ARTIFACT.split(":")
    jar = (ivy_dir or default_ivy_dir()) / "jars" / f"{group}_{name}-{version}.jar"
    return jar if jar.is_file() else None


def ivy_settings_file(ivy_dir: Path) -> Path:
    """The resolver settings, written beside Ivy's cache."""
    ivy_dir.mkdir(parents=True, exist_ok=True)
    path = ivy_dir / "mor-streamer-ivysettings.xml"
    if not path.is_file() or path.read_text() != IVY_SETTINGS:
        path.write_text(IVY_SETTINGS)
    return path


def _release(version: str) -> tuple[int, ...] | None:
    """`4.2.0` -> (4, 2, 0); None for previews and other qualified versions."""
    return tuple(map(int, version.split("."))) if re.fullmatch(r"\d+(\.\d+)*", version) else None


def published_versions(url: str = METADATA_URL) -> list[str] | None:
    """The connector's versions on Maven Central, or None when it cannot be asked."""
    try:
        with urllib.request.urlopen(url, timeout=METADATA_TIMEOUT_SECONDS) as response:
            text = response.read().decode()
    except OSError as e:
        log.debug("could not read %s: %s", url, e)
        return None
    return re.findall(r"<version>([^<]+)</version>", text)


def connector_version(spark_version: str, published: Iterable[str] | None) -> str:
    """The connector release for `spark_version`: its own when published (or when what is
    published is not known), else the newest published release of its major version not newer
    than it."""
    published = list(published) if published is not None else None
    if published is None or spark_version in published:
        return spark_version
    wanted = _release(spark_version)
    candidates = [(r, v) for v in published if (r := _release(v)) and wanted and r[0] == wanted[0] and r <= wanted]
    return max(candidates)[1] if candidates else spark_version


def names_a_connector(conf: dict[str, str]) -> bool:
    return any("spark-sql-kafka" in conf.get(key, "") for key in ("spark.jars.packages", "spark.jars"))


def with_connector(
    conf: dict[str, str], formats: Iterable[str], under_spark_submit: bool, spark_version: str = pyspark.__version__
) -> tuple[dict[str, str], str | None]:
    """`conf` with the connector in `spark.jars.packages` when a table reads with `format: kafka`
    and nothing provides it yet; and the coordinate added (None when none was)."""
    if SourceFormat.KAFKA not in set(formats) or under_spark_submit or names_a_connector(conf):
        return conf, None
    version = connector_version(spark_version, published_versions())
    if version != spark_version:
        log.warning("Spark's Kafka connector %s is not on Maven Central; using %s", spark_version, version)
    added = coordinate(version)
    packages = ",".join(p for p in (conf.get("spark.jars.packages", ""), added) if p)
    ivy_dir = conf.get("spark.jars.ivy", str(default_ivy_dir()))
    resolver = (
        {}
        if "spark.jars.ivySettings" in conf
        else {"spark.jars.ivySettings": str(ivy_settings_file(Path(ivy_dir))), "spark.jars.ivy": ivy_dir}
    )
    return {**conf, "spark.jars.packages": packages, **resolver}, added


def unavailable(added: str, error: BaseException) -> ConnectorUnavailableError:
    return ConnectorUnavailableError(
        f"source.format: kafka needs Spark's Kafka connector; Spark could not start with {added} "
        f"in spark.jars.packages (its output above says why): {str(error).splitlines()[0] if str(error) else error!r}. "
        "Make the connector available and run again: give a repository that has it "
        "(--conf spark.jars.repositories=<url>), or its jars (--conf spark.jars=<paths>), or another "
        "version (--conf spark.jars.packages=" + ARTIFACT + ":<version>); "
        "or read with source.format: kafka-arrow, which needs no jar."
    )
