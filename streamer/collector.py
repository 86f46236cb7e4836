"""How often Python's cycle collector runs in the job's processes.

A micro-batch makes objects per file group it touches (targets, write stats, the view's files),
and most of them live until the batch ends. With the interpreter's default thresholds (a
collection every 700 new objects, a full one every 100 of those) a batch over thousands of
groups spends as long collecting as it does building them, and finds almost nothing: what the
job makes is freed by reference counting. Collections every `YOUNG_OBJECTS` new objects keep
the cost of a batch what its groups cost, and leave few cycles waiting.
"""

import gc

#: New container objects between two collections of the youngest generation.
YOUNG_OBJECTS = 50_000


def collect_in_large_steps() -> None:
    """Collect cycles after many more new objects than the interpreter's default, and leave the
    objects alive now (imports, the session, the tables' views) out of every later collection."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)
    gc.freeze()
