"""What the tests share besides fixtures: the oracle of what a table must hold, the orders table
the engine's tests write, the session's Kafka broker and schema registry, the ingestion job's
configs and checks, the Hudi-written samples, the readers compared, and the conformance matrix.

Imported as `tests.support` from the clone's root (pytest's `pythonpath`; the soak in bench/ runs
from there too); fixtures live in the conftest.py files beside the tests.
"""
