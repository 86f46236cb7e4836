"""Named points where a test can stop or hold up the process, to prove recovery and overlap.

Inert unless an environment variable names a point:

- `MOR_STREAMER_FAILPOINT=name` or `name:N` kills the job with SIGKILL the N-th time (from 1)
  a process reaches the point: no `finally`, no cleanup, as a power cut or an OOM kill. A point
  reached in a Spark executor's Python worker kills the job's driver process, then the worker.
- `MOR_STREAMER_PAUSE=name=SECONDS` sleeps there each time, e.g. to keep a compaction pending
  while micro-batches go on.

The points, `<protocol>.<step>`, in the order a protocol reaches them (the crash matrix,
tests/e2e/test_crash_matrix.py, kills the job at each one):

- `deltacommit.requested`: `TableWriter.begin`, the requested file written, not the inflight one.
- `deltacommit.inflight`: `TableWriter.begin`, the instant inflight, no data file written yet.
- `deltacommit.markers_written`: `file_group_writer.TaskFiles.mark`, a task's marker file written,
  none of its data files (in the task that writes: on an executor, or the streamer's driver).
- `deltacommit.base_file_written`: `file_group_writer._write_base_file`, after each base file of a new file
  group (where the task writes): the first commit of a partition, an initial load.
- `deltacommit.log_file_written`: `file_group_writer._write_log_file`, after each log file (where the task writes).
- `logfile.torn_write`: `log_file.writer.write_log_file` writes half of a log file's bytes, then dies.
- `deltacommit.files_written`: `TableWriter.complete`, every data file written, not completed.
- `deltacommit.lock_held`: `OptimisticWriters.completing`, under optimistic concurrency only:
  the commit lock held and no conflict found, not completed. The three-writer kill test
  (tests/e2e/test_concurrent_writers.py) crashes here, the matrix's single writer never does.
- `deltacommit.completed`: `TableWriter.complete`, completed, its markers not deleted yet.
- `sink.quarantine_committed`: the sink, bad records in the quarantine table, no deltacommit begun.
- `sink.batch_committed`: the sink, the batch committed, Spark not told yet (no checkpoint).
- `rollback.requested`: `rollback.rollback`, the rollback plan written, nothing deleted.
- `rollback.files_deleted`: `rollback._execute`, data files deleted, the instant's state files not.
- `rollback.completed`: `rollback._execute`, the rollback completed.
- `compaction.requested`: `schedule_compaction`, the plan written, not executed.
- `compaction.files_written`: `execute_compaction`, the new base files written, not completed.
- `compaction.completed`: `execute_compaction`, completed, its markers not deleted yet.
- `clustering.requested`: `schedule_clustering`, the plan written, not executed.
- `clustering.files_written`: `execute_clustering`, children's base files and hashing metadata written.
- `clustering.completed`: `execute_clustering`, completed, no hashing metadata commit marker yet.
- `clean.requested`: `schedule_clean`, the plan written, nothing deleted.
- `clean.files_deleted`: `execute_clean`, the plan's files deleted, not completed.
- `clean.completed`: `execute_clean`, the clean completed.
- `archive.entries_written`: `archive`, the archive file written, no instant file deleted yet.

`logfile.torn_write` leaves what a crash in the middle of a non-atomic write leaves on a file
system without atomic file creation: the file, cut off.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable

FAIL_ENV_VAR = "MOR_STREAMER_FAILPOINT"
PAUSE_ENV_VAR = "MOR_STREAMER_PAUSE"
#: The process a failpoint kills: the first one that loaded this module with a failpoint set.
#: Spark's Python workers inherit it from the driver (through the JVM's environment).
JOB_PID_ENV_VAR = "MOR_STREAMER_FAILPOINT_JOB_PID"

if os.environ.get(FAIL_ENV_VAR) and JOB_PID_ENV_VAR not in os.environ:
    os.environ[JOB_PID_ENV_VAR] = str(os.getpid())

#: How long a worker waits after saying which point it reached before killing the driver, so
#: that the line reaches the job's output through the JVM first.
_OUTPUT_GRACE_SECONDS = 0.2

_reached: Counter[str] = Counter()


def reach(name: str) -> None:
    """Mark that the process reached `name`; act if a test asked for it."""
    pause = os.environ.get(PAUSE_ENV_VAR)
    if pause:
        target, _, seconds = pause.partition("=")
        if target == name:
            time.sleep(float(seconds))
    if _armed(name):
        _kill(name)


def torn_write(name: str, data: bytes, write: Callable[[bytes], object]) -> None:
    """If `name` is the armed point: `write` the first half of `data`, then kill the job, as a
    crash in the middle of a non-atomic write would leave the file."""
    if _armed(name):
        write(data[: len(data) // 2])
        _kill(name)


def _armed(name: str) -> bool:
    """Counts the reach; True when this is the reach the failpoint variable asks to kill at."""
    spec = os.environ.get(FAIL_ENV_VAR)
    if not spec:
        return False
    target, _, nth = spec.partition(":")
    if target != name:
        return False
    _reached[name] += 1
    return _reached[name] == int(nth or 1)


def _kill(name: str) -> None:
    job = int(os.environ.get(JOB_PID_ENV_VAR) or os.getpid())
    print(f"failpoint {name}: killing process {job}", file=sys.stderr, flush=True)
    if job != os.getpid():
        time.sleep(_OUTPUT_GRACE_SECONDS)
        with contextlib.suppress(ProcessLookupError):  # the job is gone already
            os.kill(job, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
