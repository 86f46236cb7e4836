"""What a run shows and keeps: a fixed-width table per scenario, `<size>.json`, and PNG plots.

A scenario returns a `Section`: its paths' results, the one that ratios are taken against
(ours), and notes that say what the numbers include. The JSON holds every number with the
machine facts, so two runs can be compared without re-running either.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.measure import PathResult
from bench.workload import W1
from table import MIB


@dataclass(frozen=True)
class Check:
    """A target of ours, what this run measured, and whether it is met."""

    target: str
    measured: str
    wanted: str
    met: bool


@dataclass
class Section:
    title: str
    baseline: str  # the name of the result every "x ours" ratio divides by
    results: list[PathResult]
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # more tables of the scenario's own, printed as given

    def result(self, name: str) -> PathResult:
        return next(r for r in self.results if r.name == name)

    def to_json(self) -> dict:
        return {
            "title": self.title,
            "baseline": self.baseline,
            "notes": self.notes,
            "details": self.details,
            "results": [r.to_json() for r in self.results],
            "checks": [asdict(c) for c in self.checks],
            "tables": self.tables,
        }


COLUMNS = (  # header, width, value of a result given the baseline's records/s
    ("path", 44, lambda r, base: r.label),
    ("records", 10, lambda r, base: f"{r.records:,}"),
    ("load s", 7, lambda r, base: _num(r.load_seconds)),
    ("seconds", 8, lambda r, base: _num(r.seconds)),
    ("records/s", 10, lambda r, base: f"{r.records_per_second:,.0f}"),
    ("p50 batch s", 11, lambda r, base: _num(r.batch_percentile(50), 2)),
    ("p95 batch s", 11, lambda r, base: _num(r.batch_percentile(95), 2)),
    ("peak RSS MB", 11, lambda r, base: _mb(r.peak_rss.get("total"))),
    ("JVM MB", 7, lambda r, base: _mb(r.peak_rss.get("jvm"))),
    ("py wkr MB", 9, lambda r, base: _mb(r.peak_rss.get("workers"))),
    ("peak PSS MB", 11, lambda r, base: _mb(r.peak_rss.get("pss"))),
    ("x ours", 7, lambda r, base: f"{r.records_per_second / base:.2f}" if base and r.seconds else "-"),
)


def table(section: Section) -> str:
    base = section.result(section.baseline).records_per_second
    lines = [section.title, "  ".join(_cell(h, w, i) for i, (h, w, _) in enumerate(COLUMNS))]
    lines.append("-" * len(lines[-1]))
    for r in section.results:
        if "error" in r.details:
            lines.append(f"{r.label:<{COLUMNS[0][1]}}  FAILED: {r.details['error'].splitlines()[-1]}")
            continue
        lines.append("  ".join(_cell(value(r, base), w, i) for i, (_, w, value) in enumerate(COLUMNS)))
    for r in section.results:
        if r.expected_rows is not None and r.table_rows != r.expected_rows:
            lines.append(f"WRONG: {r.label} holds {r.table_rows:,} rows, W1 leaves {r.expected_rows:,}")
    for extra in section.tables:
        lines += ["", extra]
    lines += [f"* {note}" for note in section.notes]
    lines += phase_table(section)
    if section.checks:
        lines += ["", "targets"] + [
            f"  {'met    ' if c.met else 'NOT MET'}  {c.target:<36} {c.measured:>20}  (want {c.wanted})"
            for c in section.checks
        ]
    return "\n".join(lines)


def phase_table(section: Section) -> list[str]:
    """Where a micro-batch's time went, median over the upsert batches, for the paths that log it
    (`streamer run --log-level DEBUG`): see `streamer.sink._phases`."""
    timed = [r for r in section.results if r.details.get("phases") and not r.name.endswith("-whole-run")]
    if not timed:
        return []
    names = list(timed[0].details["phases"])
    lines = [
        "",
        "where a micro-batch's time goes (median seconds; fetch, decode, route and write are "
        "task-seconds summed over the batch's tasks, jobs the wall time of its Spark jobs)",
        "  ".join(_cell(h, w, i) for i, (h, w) in enumerate([("path", 44), *((n, 8) for n in names)])),
    ]
    for r in timed:
        values = [r.label] + [f"{r.details['phases'].get(n, 0):.2f}" for n in names]
        lines.append("  ".join(_cell(v, 44 if i == 0 else 8, i) for i, v in enumerate(values)))
    return lines


def write(out: Path, size: str, w: W1, machine: dict, seconds: float, sections: dict[str, Section]) -> list[Path]:
    """`<size>.json` and the plots of each scenario under `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{size}.json"
    path.write_text(
        json.dumps(
            {
                "size": size,
                "workload": asdict(w),
                "seconds": seconds,
                "machine": machine,
                "scenarios": {name: s.to_json() for name, s in sections.items()},
            },
            indent=2,
        )
    )
    written = [path]
    for name, section in sections.items():
        written += plots(out / f"{size}-{name}", section)
    return written


def plots(prefix: Path, section: Section) -> list[Path]:
    """Per-batch latency of every path that has upsert batches (lines), and records/s (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    done = [r for r in section.results if "error" not in r.details]
    latency = prefix.with_name(prefix.name + "-batch-latency.png")
    fig, ax = plt.subplots(figsize=(9, 5))
    for r in done:
        if r.batch_seconds and r.load_seconds is not None:
            ax.plot(range(1, len(r.batch_seconds) + 1), r.batch_seconds, marker="o", label=r.label)
    ax.set(title=_wrap(f"{section.title}: latency per upsert batch"), xlabel="batch", ylabel="seconds (log scale)")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(latency, dpi=110)
    plt.close(fig)

    throughput = prefix.with_name(prefix.name + "-records-per-second.png")
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(done) + 1.5))
    ax.barh(
        [r.label for r in done],
        [r.records_per_second for r in done],
        color=["tab:red" if r.name == section.baseline else "tab:blue" for r in done],
    )
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set(title=_wrap(f"{section.title}: records/s"), xlabel="records/s (log scale)")
    fig.tight_layout()
    fig.savefig(throughput, dpi=110)
    plt.close(fig)
    return [latency, throughput]


def _wrap(title: str) -> str:
    return "\n".join(textwrap.wrap(title, 80))


def _cell(text: str, width: int, index: int) -> str:
    return f"{text:<{width}}" if index == 0 else f"{text:>{width}}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mb(value: int | None) -> str:
    return f"{value / MIB:,.0f}" if value else "-"
