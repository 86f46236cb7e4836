"""A failure told in one line: what went wrong, in the words of whoever found it, without the
stack traces of Python, py4j or the JVM that carry it (`streamer run --log-level DEBUG` logs those).
"""

from __future__ import annotations

import re

#: `module.SomeError: message` lines of Python tracebacks inside a query's failure.
_PYTHON_ERROR_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def _raised_python_error(lines: list[str]) -> str | None:
    """`Kind: message` of the last error a Python source or sink raised, among `lines`."""
    raised = [
        m
        for m in map(_PYTHON_ERROR_LINE.match, lines)
        if m and not m.group(0).startswith(("org.apache.", "java.", "scala.", "py4j."))
    ]
    return f"{raised[-1].group(1)}: {raised[-1].group(2)}" if raised else None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def query_error_line(text: str) -> str:
    """The line of a query's failure that says what went wrong: the error a Python source or
    sink raised (Spark wraps it in its own messages and stack traces), else the first line."""
    lines = _lines(text)
    return _raised_python_error(lines) or (lines[0] if lines else text)


def _spark_message(error: BaseException) -> str:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(error, PySparkException):
        return error.getMessage() or str(error)
    if isinstance(error, Py4JJavaError):
        return str(error.java_exception.getMessage() or error.java_exception.toString())
    return str(error)


def spark_error_line(error: BaseException) -> str:
    """Spark's own message of an error it raised (an analysis error, a failed job), first line
    only: without the query plan that follows it, or the JVM's stack."""
    first = next(iter(_lines(_spark_message(error))), type(error).__name__)
    return first.rstrip(";").strip()


def failure_line(error: BaseException) -> str:
    """`Kind: message` of an error that stopped a table: the error a Python worker raised when
    Spark carries one (a source's or a write task's), else Spark's own message."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(error, (PySparkException, Py4JJavaError)):
        raised = _raised_python_error(_lines(_spark_message(error)))
        return raised or f"{type(error).__name__}: {spark_error_line(error)}"
    return f"{type(error).__name__}: {error}"
