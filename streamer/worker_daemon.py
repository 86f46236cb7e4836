"""Spark's Python worker daemon (`spark.python.daemon.module`), with what the job's workers import
loaded once, before it forks them.

Every task of the job runs in a worker forked from this daemon, and every worker imports the
same modules (pyarrow, pandas through pyarrow, the decoders, the table engine): about 70 MiB
each when each imports them itself. Imported here, the forked workers share those pages with
the daemon instead of holding a copy each. The daemons Spark starts for other worker modules
(the planners of the Kafka data source) fork one short-lived worker each and preload nothing.
"""

import os
import sys
from importlib.machinery import PathFinder


def import_pyspark_from_its_package() -> None:
    """Drop the copies of pyspark and py4j that Spark puts first on a worker's path, zip files
    that a pip-installed PySpark ships inside its own package, when that package is importable.
    Python compiles modules imported from a zip file anew in every process, about 0.5 s of
    CPU for what a worker imports; from the package they load compiled from its cache."""
    rest = [p for p in sys.path if not p.endswith(".zip")]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None or PathFinder.find_spec("py4j", rest) is None:
        return
    bundled = os.path.join(os.path.dirname(spec.origin), "python", "lib")
    sys.path[:] = [p for p in sys.path if not (p.endswith(".zip") and os.path.dirname(p) == bundled)]


import_pyspark_from_its_package()

from pyspark import daemon  # noqa: E402

from streamer.logs.lines import LOG_LEVEL_ENV  # noqa: E402

#: The module of the workers that run tasks, as Spark names it on the daemon's command line.
TASK_WORKER = "pyspark.worker"


def preload() -> None:
    """Import what the job's tasks use, and keep the garbage collector off those objects (a
    collection that touched them would copy their pages into every worker) and out of the way
    of a task's many short-lived ones (`streamer.collector`)."""
    import confluent_kafka  # noqa: F401  the Kafka source's reads
    import pandas  # noqa: F401  pyarrow loads it to make Arrow values of Python ones, which every task does
    import pyspark.worker  # noqa: F401

    import streamer.decode_step  # noqa: F401  decoding, and the Kafka source through it
    import table.spark  # noqa: F401  routing and writing file groups
    from streamer.collector import collect_in_large_steps

    collect_in_large_steps()


def quiet_when_cancelled(worker):
    """`daemon.worker`, ending without a traceback when the JVM has closed the connection: the
    task was cancelled (a stage that failed cancels the rest) and the job says why in one line.
    At DEBUG the traceback stays."""

    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except BrokenPipeError:
            if os.environ.get(LOG_LEVEL_ENV) == "DEBUG":
                raise
            return 1  # the daemon ends this worker

    return run


if __name__ == "__main__":
    if sys.argv[1:2] == [TASK_WORKER]:
        preload()
    daemon.worker = quiet_when_cancelled(daemon.worker)
    daemon.manager()
