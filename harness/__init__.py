"""Test and benchmark harness: real external systems (Apache Kafka, Maven Central jars) started
from the repository, for tests/ and bench/. Not part of the installed product."""
