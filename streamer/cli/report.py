"""Plots of a table's shape, for a person who would rather look than read the `table` commands.

- `buckets.png`: each partition's buckets side by side, base file and log bytes stacked: uneven
  buckets and the log bytes the next compaction folds in show at a glance.
- `files_over_time.png`: per completed write, the base and log files it added, and their running
  totals; compactions are marked, since they are where base files come from.
"""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, whatever the environment says
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from streamer.cli.describe import Buckets, TimelineSummary, buckets, timeline_entries
from streamer.cli.output import human_bytes, show_partition
from table import MorTable

BASE_COLOR = "#4C72B0"
LOG_COLOR = "#DD8452"


def write_report(table: MorTable, out_dir: Path) -> list[Path]:
    """Draw the plots into `out_dir` (created if missing); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "buckets.png", out_dir / "files_over_time.png"]
    plot_buckets(buckets(table), table.name, paths[0])
    plot_files_over_time(timeline_entries(table), table.name, paths[1])
    return paths


def plot_buckets(result: Buckets, name: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * sum(len(p.buckets) + 1 for p in result.partitions)), 4.5))
    x, centers = 0, []
    for partition in result.partitions:
        xs = list(range(x, x + len(partition.buckets)))
        base = [b.base_bytes for b in partition.buckets]
        ax.bar(xs, base, color=BASE_COLOR)
        ax.bar(xs, [b.log_bytes for b in partition.buckets], bottom=base, color=LOG_COLOR)
        centers.append((sum(xs) / len(xs) if xs else x, show_partition(partition.partition)))
        x += len(partition.buckets) + 1
    ax.set_xticks([c for c, _ in centers], [label for _, label in centers], rotation=30, ha="right")
    ax.yaxis.set_major_formatter(lambda value, _: human_bytes(int(value)))
    ax.set_ylabel("bucket size (latest file slice)")
    ax.set_title(f"{name}: buckets per partition")
    ax.legend(["base file", "log files"], loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)


def plot_files_over_time(summary: TimelineSummary, name: str, path: Path) -> None:
    writes = [e for e in summary.instants if e.base_files_added is not None]
    xs = range(len(writes))
    base = [e.base_files_added for e in writes]
    logs = [e.log_files_added for e in writes]
    fig, (per_write, total) = plt.subplots(2, 1, sharex=True, figsize=(max(7.0, 0.35 * len(writes)), 6))
    per_write.bar(xs, base, color=BASE_COLOR, label="base files")
    per_write.bar(xs, logs, bottom=base, color=LOG_COLOR, label="log files")
    per_write.set_ylabel("files added")
    per_write.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    total.plot(xs, list(accumulate(base)), marker="o", color=BASE_COLOR)
    total.plot(xs, list(accumulate(logs)), marker="o", color=LOG_COLOR)
    total.set_ylabel("files added, cumulative")
    for ax in (per_write, total):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for i, e in enumerate(writes):
        if e.operation == "COMPACT":
            for ax in (per_write, total):
                ax.axvline(i, color="grey", linestyle=":", linewidth=1)
    total.set_xticks(list(xs), [f"{e.time[11:19]} {e.action}" for e in writes], rotation=60, ha="right", fontsize=7)
    total.set_xlabel("completed writes (dotted: compactions), UTC")
    per_write.set_title(f"{name}: files written per commit")
    _save(fig, path)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
