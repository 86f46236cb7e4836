"""Test and benchmark harness: real external systems started from the repository for tests/ and
bench/ (S3Proxy, a Spark standalone cluster, Prometheus, Spark's Kafka connector, Apache Hudi as
the judge). Not part of the installed product; Apache Kafka, which the `streamer kafka` command
runs too, is in `streamer.sandbox`."""
