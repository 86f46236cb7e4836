"""Test and benchmark harness: real external systems (Apache Kafka, Maven Central jars, Apache
Hudi as the judge) started from the repository, for tests/ and bench/. Not part of the installed
product."""
