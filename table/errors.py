"""Errors the engine raises to its callers, each naming what was wrong.

Every one is a `TableError`, so a caller can catch the engine's errors apart from its own. Each
also keeps the built-in kind it is (a `ValueError` for a value the engine refuses, a
`RuntimeError` for a state it cannot proceed from), so `except ValueError` still catches a bad
argument.
"""


class TableError(Exception):
    """Base of the engine's errors."""


# -- what a caller hands the engine --------------------------------------------------------------


class InvalidBatchError(TableError, ValueError):
    """A batch handed to upsert is unusable (missing or null key, wrong type, dropped column).

    Raised before anything is written, so the table is unchanged.
    """


class KeyGenerationError(InvalidBatchError):
    """A batch cannot be keyed: a missing key field, a null or empty key, a type Hudi cannot key."""


class SchemaEvolutionError(TableError, ValueError):
    """Data whose schema would drop a column of the table or change its type other than by widening."""


class InvalidRequestError(TableError, ValueError):
    """A call the engine refuses as asked: a policy out of range, an unknown column or operator."""


class UnsupportedTypeError(TableError, TypeError):
    """A column or value type that a Hudi file cannot hold."""


class StorageOptionsError(TableError, ValueError):
    """Storage options that name no known setting or cannot work together."""


# -- what the engine finds in the table ----------------------------------------------------------


class TableNotFoundError(TableError, FileNotFoundError):
    """No Hudi table at the given path."""


class TableExistsError(TableError, FileExistsError):
    """A table already exists where one was to be created."""


class PathExistsError(TableError, FileExistsError):
    """A file to be created new is there already: a completed instant completed again, an object
    store's file of the same name."""


class PathNotFoundError(TableError, FileNotFoundError):
    """A file the engine was asked about is not in storage."""


class FormatError(TableError, ValueError):
    """A file, file name or value that does not follow Hudi's format, or uses a part of it (a
    format version, a block type) this engine does not read."""


class HashingMetadataError(TableError, ValueError):
    """Hashing metadata that cannot be read, or an operation on a ring that would break it."""


class TimelineStateError(TableError, ValueError):
    """An action the timeline does not allow now: no pending plan at the instant, an instant not in
    the state a transition starts from, a plan scheduled while a deltacommit is pending."""


class WriteInProgressError(TimelineStateError):
    """A plan asked for while a write is pending, whoever writes it (another writer of the table, a
    Hudi writer, a backfill): its log blocks would be in the plan yet not in what the plan makes.
    Ask again once `instant` has completed or been rolled back."""

    def __init__(self, service: str, instant: str):
        super().__init__(f"cannot schedule a {service} while deltacommit {instant} is pending")
        self.service = service
        self.instant = instant


# -- writers and executors -----------------------------------------------------------------------


class WriterConflictError(TableError, RuntimeError):
    """Another live writer holds the table."""


class WriterNotOpenError(TableError, RuntimeError):
    """A write through a writer that is not open (or no longer holds the lease)."""


class CompactionConflictError(TableError, RuntimeError):
    """Another live executor is running the same compaction plan."""


class ClusteringConflictError(TableError, RuntimeError):
    """Another live executor is running the same clustering plan."""


# -- catalogs ------------------------------------------------------------------------------------


class CatalogSyncError(TableError, RuntimeError):
    """A catalog (Hive Metastore) refused or could not be reached to register a table; the table
    itself is unchanged."""
