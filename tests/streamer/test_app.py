"""How the job's Spark session ends (`streamer.app.stop_spark`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.ingestion import REPO

pytestmark = pytest.mark.spark

#: A driver that starts Spark, has it look up Python data sources (which leaves a worker of
#: PySpark's own daemon idle) and runs a Python task (a worker of the job's daemon) that adds to
#: an accumulator, then ends the daemons and Spark, and prints which Python processes of the JVM
#: lived before and after, the accumulator's sum and whether its server's socket file is left.
DRIVER = """
import json
import os
from streamer import app
from streamer.kafka.datasource import register_kafka_source

spark = app.spark_session("local[1]", {"spark.ui.enabled": "false"})
register_kafka_source(spark)
added = spark.sparkContext.accumulator(0)
spark.sparkContext.parallelize([1, 2], 1).foreach(lambda x: added.add(x))
socket = spark.sparkContext._accumulatorServer.server_address
jvm = spark.sparkContext._jvm

def pythons():
    return {
        p.pid(): p.info().commandLine().orElse("")
        for p in jvm.java.lang.ProcessHandle.current().descendants().toArray()
        if " -m " in p.info().commandLine().orElse("")
    }

before = pythons()
app.end_python_daemons(spark)
after = pythons()
spark.range(3).count()  # the JVM still runs
app.stop_spark(spark)
print(json.dumps({"before": before, "after": after, "added": added.value, "socket_left": os.path.exists(socket)}))
"""


def test_spark_stops_with_its_python_daemons_and_their_idle_workers_ended_first_and_quietly_and_no_socket_left():
    ended = subprocess.run([sys.executable, "-c", DRIVER], cwd=REPO, capture_output=True, text=True, timeout=300)

    assert ended.returncode == 0, ended.stderr
    processes = json.loads(ended.stdout.splitlines()[-1])
    commands = list(processes["before"].values())
    assert any("-m pyspark.daemon pyspark.sql.worker.lookup_data_sources" in c for c in commands), commands
    assert any("-m streamer.worker_daemon" in c for c in commands), commands
    assert processes["after"] == {}
    assert processes["added"] == 3
    assert processes["socket_left"] is False
    assert "Traceback" not in ended.stderr, ended.stderr
