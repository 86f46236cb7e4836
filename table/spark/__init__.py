"""The engine's Spark parts, apart from `table` so that only they load Spark: a DataFrame written
as one deltacommit, and the `mor` read format.

    from table.spark import register, upsert_dataframe

    upsert_dataframe(writer, df)              # one commit
    register(spark)
    spark.read.format("mor").load(path)
"""

from table.spark.datasource import PUSHDOWN_CONF, PushdownMorTableReader, register
from table.spark.write import DataFrameWriteResult, PassMetrics, released_accumulator, upsert_dataframe, write_dataframe

__all__ = [
    "PUSHDOWN_CONF",
    "DataFrameWriteResult",
    "PassMetrics",
    "PushdownMorTableReader",
    "register",
    "released_accumulator",
    "upsert_dataframe",
    "write_dataframe",
]
