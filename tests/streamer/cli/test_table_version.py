"""A table of another Hudi table version than 6 is refused by name, with the remedy, wherever it is
opened: the engine's load, `streamer run` (before Spark starts), `doctor`, `status` and `sync`.
The tables are ours with the properties Hudi's own upgrade and downgrade leave: Apache Hudi 1.x
upgrades a table to version 8 and timeline layout 2 (its timeline under `.hoodie/timeline/`),
which read through this engine would look empty; Hudi before 0.14 writes version 5 or less."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.cli import main as cli
from streamer.sandbox.change_events import change_events
from table import MorTable, UnsupportedTableVersionError
from tests.support import kafka_broker
from tests.support.ingestion import committed_table, order_config, write_config

pytestmark = pytest.mark.unit

HUDI_1_PROPERTIES = {
    "hoodie.table.version": "8",
    "hoodie.timeline.layout.version": "2",
    "hoodie.timeline.path": "timeline",
}
REMEDY_1X = "hoodie.write.table.version=6 and hoodie.write.auto.upgrade=false"


def rewritten_as(path: Path, properties: dict[str, str]) -> None:
    """The table's hoodie.properties with these entries in place of its own."""
    file = path / ".hoodie" / "hoodie.properties"
    lines = [line for line in file.read_text().splitlines() if line.split("=", 1)[0] not in properties]
    file.write_text("\n".join(lines + [f"{key}={value}" for key, value in properties.items()]) + "\n")


@pytest.fixture
def upgraded_by_hudi_1x(tmp_path) -> Path:
    """The configs directory of one table, `orders`, that Hudi 1.x has upgraded."""
    path = tmp_path / "tables" / "orders"
    committed_table(path, change_events(50, seed=11), {"orders": {0: 50}})
    rewritten_as(path, HUDI_1_PROPERTIES)
    bootstrap = f"127.0.0.1:{kafka_broker.free_port()}"  # nothing listens there
    config = order_config(tmp_path, "orders", bootstrap, "orders", sync={"metastore_uris": "thrift://127.0.0.1:1"})
    return write_config(tmp_path / "configs", config).parent


@pytest.mark.parametrize(
    "properties, told", [(HUDI_1_PROPERTIES, REMEDY_1X), ({"hoodie.table.version": "5"}, "CALL upgrade_table(")]
)
def test_the_engine_refuses_to_load_a_table_of_another_version_naming_it_and_the_remedy(tmp_path, properties, told):
    path = tmp_path / "orders"
    committed_table(path, change_events(20, seed=12), {"orders": {0: 20}})
    rewritten_as(path, properties)

    with pytest.raises(UnsupportedTableVersionError) as refused:
        MorTable.load(str(path))

    assert f"is table version {properties['hoodie.table.version']} " in str(refused.value)
    assert "reads and writes table version 6 only" in str(refused.value) and told in str(refused.value)


@pytest.mark.parametrize("command, code", [(["run", "--once"], 2), (["doctor"], 1), (["status"], 3), (["sync"], 1)])
def test_each_command_refuses_a_table_hudi_1x_upgraded_with_the_remedy_and_no_spark(
    upgraded_by_hudi_1x, command, code, capsys
):
    exit_code = cli.main([command[0], str(upgraded_by_hudi_1x), *command[1:]])

    out = capsys.readouterr()
    told = [
        line for line in (out.out + out.err).splitlines() if "is table version 8 (written by Apache Hudi 1.x)" in line
    ]
    assert exit_code == code, out
    assert (
        len(told) == 1 and REMEDY_1X in told[0] and "downgrade_table(table => 'orders', to_version => 'SIX')" in told[0]
    )
    assert "SparkContext" not in out.out + out.err
