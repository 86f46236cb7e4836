"""Spark's Python worker daemon (`spark.python.daemon.module`), with what the job's workers import
loaded once, before it forks them.

Every task of the job runs in a worker forked from this daemon, and every worker imports the
same modules (pyarrow, pandas through pyarrow, the decoders, the table engine): about 70 MiB
each when each imports them itself. Imported here, the forked workers share those pages with
the daemon instead of holding a copy each. The daemons Spark starts for other worker modules
(the planners of the Kafka data source) fork one short-lived worker each and preload nothing.
"""

import gc
import sys

from pyspark import daemon

#: The module of the workers that run tasks, as Spark names it on the daemon's command line.
TASK_WORKER = "pyspark.worker"


def preload() -> None:
    """Import what the job's tasks use, and keep the garbage collector off those objects: a
    collection that touched them would copy their pages into every worker."""
    import confluent_kafka  # noqa: F401  the Kafka source's reads
    import pyspark.worker  # noqa: F401

    import streamer.batch_tally  # noqa: F401  decoding, and the Kafka source through it
    import table.spark_write  # noqa: F401  routing and writing file groups
    gc.freeze()


if __name__ == "__main__":
    if sys.argv[1:2] == [TASK_WORKER]:
        preload()
    daemon.manager()
