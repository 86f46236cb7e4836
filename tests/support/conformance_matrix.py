"""The conformance matrix: table state x reader, the queries each reader answers exactly.

Tests judged by Apache Hudi record their outcomes in the session's `conformance_matrix`
(tests/hudi/conftest.py), which prints it in the terminal summary; docs/conformance.md keeps a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

QUERIES = {"snapshot": "S", "read_optimized": "R", "incremental": "I", "time_travel": "T"}
#: ours (Spark): the `mor` source; Apache Hudi: the judge (0.15); Hudi 1.0.2: the second judge
READERS = ("ours", "ours (Spark)", "hudi-rs", "Apache Hudi", "Hudi 1.0.2")


@dataclass
class Matrix:
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def record(self, state: str, outcomes: dict[tuple[str, str], str], known: dict[tuple[str, str], str]) -> None:
        """`outcomes`: (reader, query) -> '' when exact, else what differs (absent: not run);
        `known`: (reader, query) -> why that reader is known to differ there."""
        cells = {}
        for reader in READERS:
            marks = []
            for query, letter in QUERIES.items():
                outcome = outcomes.get((reader, query))
                if outcome is None:
                    marks.append(".")
                elif not outcome:
                    marks.append(letter)
                elif (reader, query) in known:
                    marks.append("~")
                    self.notes.append(f"~ {state} / {reader} / {query}: {known[(reader, query)]}")
                else:
                    marks.append("!")
                    self.notes.append(f"! {state} / {reader} / {query}: {outcome}")
            cells[reader] = "".join(marks)
        self.rows[state] = cells

    def lines(self, versions: dict) -> list[str]:
        width = max([len(s) for s in self.rows] + [20])
        head = [
            f"Conformance, judged by Apache Hudi {versions.get('hudi')} on Spark {versions.get('spark')} "
            f"(S snapshot, R read-optimized, I incremental, T time travel; ~ known deviation, ! wrong, . not run)",
            f"  {'table state':<{width}}  " + "  ".join(f"{r:<12}" for r in READERS),
        ]
        body = [f"  {s:<{width}}  " + "  ".join(f"{c[r]:<12}" for r in READERS) for s, c in self.rows.items()]
        return head + body + [f"  {n}" for n in self.notes]
