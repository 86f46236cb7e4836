"""An in-memory model of what a table must hold after a sequence of upsert batches.

It replays the events with the table's rule, written independently of the engine: within a
batch the greatest ordering value per key wins (the later event on ties); across commits a
record version beats another with a greater ordering value, or an equal one and a later commit;
a delete hides the key when its ordering value is greater than the live version's, or equal
with a later commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _KeyState:
    record: dict | None = None
    record_rank: tuple = ()
    delete_ordering: object = None
    delete_commit: int = -1


@dataclass
class Oracle:
    key_field: str
    ordering_field: str
    delete_field: str | None = None
    _keys: dict = field(default_factory=dict)
    _commits: int = 0

    def apply_batch(self, rows: list[dict]) -> None:
        commit = self._commits
        self._commits += 1
        latest: dict = {}
        for position, row in enumerate(rows):
            key = row[self.key_field]
            rank = (row[self.ordering_field], position)
            if key not in latest or rank >= latest[key][0]:
                latest[key] = (rank, row)
        for key, (_, row) in latest.items():
            state = self._keys.setdefault(key, _KeyState())
            ordering = row[self.ordering_field]
            if self.delete_field and row.get(self.delete_field):
                if state.delete_ordering is None or ordering >= state.delete_ordering:
                    state.delete_ordering = ordering
                state.delete_commit = max(state.delete_commit, commit)
                continue
            rank = (ordering, commit)
            if state.record is None or rank >= state.record_rank:
                state.record = {k: v for k, v in row.items() if k != self.delete_field}
                state.record_rank = rank

    def rows(self) -> dict:
        """The live rows by key."""
        out = {}
        for key, state in self._keys.items():
            if state.record is None:
                continue
            if state.delete_ordering is not None:
                ordering, commit = state.record_rank
                if state.delete_ordering > ordering or (
                    state.delete_ordering == ordering and state.delete_commit > commit
                ):
                    continue
            out[key] = state.record
        return out

    def writers(self) -> dict:
        """The index (from 0, in `apply_batch` order) of the batch that wrote each live row:
        what an incremental query between two commits returns."""
        live = self.rows()
        return {key: self._keys[key].record_rank[1] for key in live}
