"""The sandbox: the tooling the demo, `streamer kafka`, the tests' harness (`harness/`) and the
benchmarks share to run things on this machine: a real Apache Kafka, the records that feed it,
and the servers' processes. Nothing here is on the ingestion path (that is `streamer.kafka`).

- `local_kafka`: the broker of `streamer kafka start|stop|status` and of the demo, which outlives
  the command and keeps its data in a known directory until told to delete it;
- `kafka_broker`: Apache Kafka itself, one KRaft node run with `java` from its Maven Central jars
  (the tests and benchmarks start theirs with it), optionally with a SASL_SSL listener too;
- `tls`: the certificates of such a listener, made with the JDK's `keytool`;
- `topics`: topics created and deleted, records produced as a producer would, a wait for a broker;
- `change_events`: the order change events of the demo, the tests and the benchmarks;
- `jars`: Maven Central artifacts fetched once with `mvn` into a cache;
- `server_process`: a server run as a child process, stopped by its pid;
- `ports`: a free port to listen on, and whether a port answers yet.
"""
