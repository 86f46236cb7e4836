"""Ranges of primary keys: what both sides of a comparison are cut into and bisected by."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

#: A primary key's values, in the key's column order, as the comparison orders them
#: (integers, or text compared by its bytes).
Key = tuple


@dataclass(frozen=True)
class KeyRange:
    """Keys from `low` (included) to `high` (excluded); None is unbounded."""

    low: Key | None = None
    high: Key | None = None

    def holds(self, key: Key) -> bool:
        return (self.low is None or key >= self.low) and (self.high is None or key < self.high)

    def cut(self, points: list[Key]) -> list[KeyRange]:
        """The range cut at `points` (ascending, inside it)."""
        bounds = [self.low, *points, self.high]
        return [KeyRange(a, b) for a, b in itertools.pairwise(bounds)]
