"""How the suite's tests are spread over pytest-xdist's workers (`-n 2 --dist loadgroup`).

A test module is a unit of work: its tests share one Spark session (the `spark` fixture is per
module), so they run on one worker. The modules that use a server too heavy to start twice
(Apache Hudi's judge and the metastore it catalogs in; PostgreSQL and Kafka Connect, whose
module needs the judge too) form one unit, so that the server starts on one worker only. The
broker and the schema registry start on each worker that needs one: each is up in seconds.

Units start heaviest first, by the slowest tests that docs/architecture.md lists
(`tests.support.durations`), so that the longest one does not start last and keep a worker busy
after the other has finished.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.support.durations import listed

#: Session fixtures whose modules run on one worker, and the unit they share.
ONE_WORKER_SERVERS = {
    "hudi_judge": "apache-hudi",
    "hudi_1x_judge": "apache-hudi",
    "hive_metastore": "apache-hudi",
    "postgres_server": "apache-hudi",
    "mariadb_server": "apache-hudi",
    "kafka_connect": "apache-hudi",
}
#: What a test the docs do not list is taken to cost, in seconds.
UNLISTED_SECONDS = 1.0


def unit_of(module_items: list[pytest.Item]) -> str:
    """The unit of work of one module's tests: a shared server's, or the module's own."""
    for item in module_items:
        for fixture in item.fixturenames:
            if fixture in ONE_WORKER_SERVERS:
                return ONE_WORKER_SERVERS[fixture]
    return module_items[0].module.__name__


def spread(items: list[pytest.Item]) -> None:
    """Mark each item with its unit (`xdist_group`) and order the units heaviest first, in place."""
    by_module: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        by_module[item.module.__name__].append(item)
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for module_items in by_module.values():
        units[unit_of(module_items)].extend(module_items)
    seconds = listed()

    def cost(unit: list[pytest.Item]) -> float:
        return sum(seconds.get(item.nodeid, UNLISTED_SECONDS) for item in unit)

    items[:] = [item for unit in sorted(units.values(), key=cost, reverse=True) for item in unit]
    for name, unit in units.items():
        for item in unit:
            item.add_marker(pytest.mark.xdist_group(name))


def plain_nodeid(nodeid: str) -> str:
    """A report's node id without the unit of work that xdist appends to it (`...::test@unit`)."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid
