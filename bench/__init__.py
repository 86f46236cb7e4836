"""Benchmarks: `python -m bench` (`make bench`, `make bench-quick`) runs every scenario side by
side in one run, so that ratios between paths come from the same machine in the same state.

One module per concept: `workload` (the W1 order-change stream), `measure` (a path's result and
peak memory), `streaming` (our end-to-end path), `peers` (the libraries and ceilings it is
compared with, each started in its own process by `child`), `spark` (the Spark settings all
Spark paths share), `ingest` (the ingestion scenario), `report` (table, JSON and plots) and
`machine` (the facts stored with a result).
"""
