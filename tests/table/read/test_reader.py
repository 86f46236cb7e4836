"""Reading runs of file slices: the log blocks of a run decode together, and a run of any size
gives each slice the rows it has when read alone."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from table.read import reader
from tests.support.orders import DATA_COLUMNS, by_key, change_batch, hudi_rs_read, make_table, strip, write_options

pytestmark = pytest.mark.unit


def test_slices_read_in_runs_of_any_size_give_the_rows_each_gives_alone(tmp_path, monkeypatch):
    path = tmp_path / "orders"
    table = make_table(path)
    rng, known = random.Random(11), []
    with table.writer(write_options()) as writer:
        for batch in range(6):  # a base file, then five small log blocks per file group
            writer.upsert(pa.Table.from_pylist(change_batch(rng, known, 300, batch * 300, clock=batch * 100)))
    slices, spec = table.read_plan()
    assert len(slices) == 16 and all(len(s.log_files) == 5 for s in slices)

    alone = [reader.read_file_slice(table.storage, s, spec) for s in slices]
    for run_bytes in (1, 3 * sum(f.size for f in [slices[0].base_file, *slices[0].log_files]), reader.RUN_BYTES):
        monkeypatch.setattr(reader, "RUN_BYTES", run_bytes)
        together = list(reader.read_file_slices(table.storage, slices, spec))
        assert [t.num_rows for t in together] == [t.num_rows for t in alone]
        assert all(t.equals(a) for t, a in zip(together, alone)), run_bytes

    rows = strip(by_key(pa.concat_tables(alone)), DATA_COLUMNS)
    assert rows == strip(by_key(hudi_rs_read(path)), DATA_COLUMNS)
