import os

# Arrow's buffers come from jemalloc, which hands freed memory back to the system within a second
# (`pyarrow.jemalloc_set_decay_ms`). mimalloc, pyarrow's default, kept much of what it freed: the
# driver of a job at 2,000 records/s, where compaction and clustering read and write whole file
# groups, grew by about 10 MiB a minute. Arrow reads this once, when pyarrow is imported, so it
# is set before any module of the package imports it; Spark's Python workers inherit it.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
