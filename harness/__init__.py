"""Test and benchmark harness shared by tests/ and bench/ (run from the repo root)."""
