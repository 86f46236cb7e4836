"""The sandbox: a real Apache Kafka on this machine for trying things out, and the tools that
feed it. Nothing here is on the ingestion path (that is `streamer.kafka`).

- `local_kafka`: the broker of `streamer kafka start|stop|status` and of the demo, which outlives
  the command and keeps its data in a known directory until told to delete it;
- `kafka_broker`: Apache Kafka itself, one KRaft node run with `java` from its Maven Central jars
  (the tests and benchmarks start theirs with it);
- `topics`: topics created and deleted, records produced as a producer would, a wait for a broker;
- `jars`: Maven Central artifacts fetched once with `mvn` into a cache;
- `server_process`: a server run as a child process, stopped by its pid.
"""
