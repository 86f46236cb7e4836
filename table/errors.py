"""Errors the engine raises to its callers, each naming what was wrong."""


class TableError(Exception):
    """Base of the engine's errors."""


class InvalidBatchError(TableError, ValueError):
    """A batch handed to upsert is unusable (missing or null key, wrong type, dropped column).

    Raised before anything is written, so the table is unchanged.
    """


class TableNotFoundError(TableError, FileNotFoundError):
    """No Hudi table at the given path."""


class TableExistsError(TableError, FileExistsError):
    """A table already exists where one was to be created."""
