"""A failure told in one line: what went wrong, in the words of whoever found it, without the
stack traces of Python, py4j or the JVM that carry it (`streamer run --log-level DEBUG` logs those).
"""

from __future__ import annotations

import re

#: `module.SomeError: message` lines of Python tracebacks inside a query's failure.
_PYTHON_ERROR_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def query_error_line(text: str) -> str:
    """The line of a query's failure that says what went wrong: the error a Python source or
    sink raised (Spark wraps it in its own messages and stack traces), else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = [m for m in map(_PYTHON_ERROR_LINE.match, lines)
              if m and not m.group(0).startswith(("org.apache.", "java.", "scala.", "py4j."))]
    if raised:
        return f"{raised[-1].group(1)}: {raised[-1].group(2)}"
    return lines[0] if lines else text


def spark_error_line(error: BaseException) -> str:
    """Spark's own message of an error it raised (an analysis error, a failed job), first line
    only: without the query plan that follows it, or the JVM's stack."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(error, PySparkException):
        text = error.getMessage() or str(error)
    elif isinstance(error, Py4JJavaError):
        text = str(error.java_exception.getMessage() or error.java_exception.toString())
    else:
        text = str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return first.rstrip(";").strip()


def failure_line(error: BaseException) -> str:
    """`Kind: message` of an error that stopped a table: Spark's message for Spark's errors."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(error, (PySparkException, Py4JJavaError)):
        return f"{type(error).__name__}: {query_error_line(spark_error_line(error))}"
    return f"{type(error).__name__}: {error}"
