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


class UnsupportedTableVersionError(FormatError):
    """A table whose `hoodie.table.version` is not 6, the one version this engine reads and writes:
    read, it would look empty or wrong (Hudi 1.x keeps its timeline elsewhere); written, it would
    get instants its own writers no longer look at. `remedy` says how to bring it to version 6."""

    def __init__(self, path: str, name: str, version: int):
        written_by = "Apache Hudi 1.x" if version > 6 else "a Hudi release before 0.14"
        self.reason = (
            f"the Hudi table at {path} is table version {version} (written by {written_by}); "
            "this engine reads and writes table version 6 only"
        )
        if version > 6:
            self.remedy = (
                f"downgrade it with Hudi 1.x (CALL downgrade_table(table => '{name}', to_version => 'SIX')), "
                "and write it from Hudi 1.x only in its backwards-compatible mode: "
                "hoodie.write.table.version=6 and hoodie.write.auto.upgrade=false"
            )
        else:
            self.remedy = f"upgrade it with Hudi 0.15 (CALL upgrade_table(table => '{name}', to_version => 'SIX'))"
        super().__init__(f"{self.reason}: {self.remedy}")
        self.path = path
        self.version = version


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


class CommitLockError(WriterConflictError):
    """The table's commit lock could not be had in time (another writer holds it, named), or was
    lost: its holder stalled past the lock's expiry and was fenced out, so its commit is refused."""


class WriteConflictError(TableError, RuntimeError):
    """Optimistic concurrency: another writer's commit, completed after this one began, touched
    file groups this one wrote. This commit was rolled back; writing the batch again succeeds."""

    def __init__(self, instant: str, other: str, action: str, file_groups: list[tuple[str, str]]):
        shown = ", ".join(f"{p or '(table)'}/{f}" for p, f in file_groups[:3])
        more = f" and {len(file_groups) - 3} more" if len(file_groups) > 3 else ""
        super().__init__(
            f"deltacommit {instant} conflicts with {action} {other}, completed since it began, in "
            f"{len(file_groups)} file group(s) ({shown}{more}); it was rolled back"
        )
        self.instant = instant
        self.other = other
        self.file_groups = file_groups


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
