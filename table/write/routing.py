"""Routing a commit's records to file groups: each partition's consistent-hashing ring applied to
the record keys, and the file group target each bucket writes to in this commit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.errors import HashingMetadataError
from table.index import consistent_hashing as ring
from table.schema import PARTITION_PATH, RECORD_KEY
from table.write.prepare import BatchSpec, prepare_batch

if TYPE_CHECKING:
    from table.keys import KeyGenerator

#: Column of a prepared batch holding its file group's id, for the shuffle.
FILE_ID = "_mor_file_id"
#: Column of a routed batch holding the low 16 bits of each record key's hash: a write task
#: spreads a file group's keys over its spill files by them, without hashing the keys again.
KEY_HASH = "_mor_key_hash"


@dataclass(frozen=True)
class FileGroupTarget:
    """Where one file group's records go in this commit."""

    partition_path: str
    file_id: str
    base_instant: str | None  # None: the group is new and gets a base file
    base_file_name: str | None  # '': the slice's base file is a pending compaction's output
    log_version: int


class Routing:
    """Where each record of one commit goes: the rings of the partitions the table has and the
    file group target of each of their buckets.

    A partition the table does not have yet gets Hudi's initial ring, which is a function of
    the partition path and the bucket count (see `ring.initial_metadata`), so executors route
    its records without asking the driver; the commit records that ring when it completes.
    Picklable: Spark broadcasts it to the tasks that key and route a batch. What they get is
    compact whatever the table's size: the rings as one search (`ring.PartitionRouters`), the
    targets as columns, each made a `FileGroupTarget` when a task asks for it. The driver keeps
    the partitions' `ring.Router`s and the targets whole (`routers`, `targets`).
    """

    def __init__(
        self,
        spec: BatchSpec,
        key_generator: KeyGenerator,
        routers: dict[str, ring.Router],
        targets: dict[str, FileGroupTarget],
        initial_buckets: int,
    ):
        self.spec = spec
        self.key_generator = key_generator
        self.routers = routers
        self.targets = targets
        self.initial_buckets = initial_buckets
        self._known = frozenset(routers)  # the table's partitions
        self._rings: ring.PartitionRouters | None = None  # the routers', then new partitions' too
        self._new_partitions: dict[str, ring.Router] = {}
        self._target_columns: _TargetColumns | None = None  # on executors, instead of `targets`

    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "key_generator": self.key_generator,
            "initial_buckets": self.initial_buckets,
            "rings": self._known_rings(),
            "known": self._known,
            "targets": _TargetColumns.of(self.targets.values()),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec = state["spec"]
        self.key_generator = state["key_generator"]
        self.initial_buckets = state["initial_buckets"]
        self._rings = state["rings"]
        self._known = state["known"]
        self.routers = {}  # executors route with `_rings`
        self.targets = {}
        self._target_columns = state["targets"]
        self._new_partitions = {}

    def prepare(self, records: pa.Table | pa.RecordBatch, dedupe: bool = True) -> pa.Table:
        table = records if isinstance(records, pa.Table) else pa.Table.from_batches([records])
        return prepare_batch(table, self.spec, self.key_generator, dedupe=dedupe)

    def router(self, partition_path: str) -> ring.Router:
        """The ring of a partition: the table's (on the driver), or the initial ring of a new one."""
        found = self.routers.get(partition_path) or self._new_partitions.get(partition_path)
        if found is None:
            if not self.is_new(partition_path):
                raise HashingMetadataError(
                    f"the ring of partition '{partition_path}' is known to the driver's routing only"
                )
            found = self._new_partitions[partition_path] = ring.Router(
                ring.initial_metadata(partition_path, self.initial_buckets),
                index_key_fields=self.spec.record_key_fields,
            )
        return found

    def is_new(self, partition_path: str) -> bool:
        return partition_path not in self._known

    def target(self, file_id: str, partition_path: str) -> FileGroupTarget:
        """The target of a file group; a group of a new partition is new and gets a base file."""
        found = self.targets.get(file_id)
        if found is None and self._target_columns is not None:
            found = self._target_columns.get(file_id)
            if found is not None:
                self.targets[file_id] = found
        if found is not None:
            return found
        if not self.is_new(partition_path):
            raise HashingMetadataError(f"file group {file_id} is not a bucket of partition '{partition_path}'")
        return FileGroupTarget(
            partition_path=partition_path, file_id=file_id, base_instant=None, base_file_name=None, log_version=1
        )

    def _known_rings(self) -> ring.PartitionRouters:
        if self._rings is None:
            self._rings = ring.PartitionRouters.of(list(self.routers.values()))
        return self._rings

    def _rings_for(self, partitions: list[str]) -> tuple[ring.PartitionRouters, np.ndarray]:
        """The rings with those of `partitions` among them, and each partition's code in them."""
        rings = self._known_rings()
        new = [p for p in partitions if p not in rings.codes]
        if new:
            rings = self._rings = rings.extended([self.router(p) for p in new])
        return rings, np.array([rings.codes[p] for p in partitions], dtype=np.int64)

    def route(self, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """The rows with the FILE_ID of their partition's bucket (its consistent-hashing ring
        applied to the record key) and their KEY_HASH, all partitions in one vectorized pass. A
        row whose bucket a pending resize replaces comes twice: once for the old file group,
        once for the child's (the dual write that keeps both sides current)."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        if table.num_rows == 0:
            return table.append_column(KEY_HASH, pa.array([], pa.uint16())).append_column(
                FILE_ID, pa.array([], pa.string())
            )
        partitions = pc.dictionary_encode(table[PARTITION_PATH].combine_chunks())
        rings, codes = self._rings_for(partitions.dictionary.to_pylist())
        hashes = ring.hash_values(table[RECORD_KEY], self.spec.record_key_fields)
        file_ids, child_ids = rings.file_ids_with_children(codes[np.asarray(partitions.indices)], hashes)
        table = table.append_column(KEY_HASH, pa.array((hashes & 0xFFFF).astype(np.uint16)))
        primary = table.append_column(FILE_ID, file_ids)
        if child_ids is None or child_ids.null_count == len(child_ids):
            return primary
        dual = pc.is_valid(child_ids)
        duplicates = table.filter(dual).append_column(FILE_ID, pc.filter(child_ids, dual))
        return pa.concat_tables([primary, duplicates])


@dataclass(frozen=True)
class _TargetColumns:
    """A commit's file group targets as columns: how executors receive thousands of them."""

    index: dict[str, int]  # file id -> its row
    partition_paths: list[str]
    base_instants: list[str | None]
    base_file_names: list[str | None]
    log_versions: list[int]

    @classmethod
    def of(cls, targets: Iterable[FileGroupTarget]) -> _TargetColumns:
        listed = list(targets)
        return cls(
            {t.file_id: i for i, t in enumerate(listed)},
            [t.partition_path for t in listed],
            [t.base_instant for t in listed],
            [t.base_file_name for t in listed],
            [t.log_version for t in listed],
        )

    def get(self, file_id: str) -> FileGroupTarget | None:
        i = self.index.get(file_id)
        if i is None:
            return None
        return FileGroupTarget(
            self.partition_paths[i], file_id, self.base_instants[i], self.base_file_names[i], self.log_versions[i]
        )
