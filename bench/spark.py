"""The one Spark setting every Spark path runs with (ours and the peers), so none is tuned apart."""

from __future__ import annotations

MASTER = "local[2]"
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.unix.domain.socket.enabled": "true",  # the job's own setting (streamer.app)
}


def session():
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(MASTER).appName("bench")
    for key, value in CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
