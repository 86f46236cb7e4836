"""Test and benchmark harness: real external systems started from the repository for tests/ and
bench/ (S3Proxy, a Spark standalone cluster, Prometheus, Spark's Kafka connector, Apache Hudi as
the judge). Not part of the installed product. What the demo and the `streamer kafka` command
use too (Apache Kafka, producers, the change events, Maven jars, server processes and ports) is in
`streamer.sandbox`."""
