"""A mirror file: which topics it takes, and the table config it makes of each."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from streamer.config.loading import load_all, mirrored_table, read_all, read_configs
from streamer.config.mirror import MirrorConfig, MirroredTopic, TableShape
from streamer.errors import ConfigError

pytestmark = pytest.mark.unit

SHAPE = TableShape(
    "`region` STRING, `id` INT, `name` STRING, `source_position` BIGINT", ("region", "id", "name"), ("region", "id")
)


def mirror_file(tmp_path: Path, mirror: dict | None = None, **sections) -> Path:
    data = {
        "mirror": {"topic_prefix": "shop", **(mirror or {})},
        "source": {"bootstrap_servers": "broker:9092"},
        **sections,
    }
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def loaded(path: Path) -> MirrorConfig:
    configs, mirrors = load_all(path)
    assert configs == []
    (mirror,) = mirrors
    return mirror


def test_a_debezium_topic_becomes_a_table_named_and_placed_by_the_templates_keyed_by_the_debezium_key(tmp_path):
    mirror = loaded(
        mirror_file(
            tmp_path,
            table={"name": "{schema}_{table}", "path": "lake/{schema}/{table}"},
            sync={"database": "mirror_{schema}", "table_name": "{table}"},
        )
    )
    topic = mirror.topic("shop.public.accounts")
    assert topic == MirroredTopic("shop.public.accounts", "shop", "public", "accounts")
    config = mirrored_table(mirror, topic, SHAPE)
    assert config.table.name == "public_accounts"
    assert config.table.path == str(tmp_path / "lake" / "public" / "accounts")
    assert config.table.record_key == ("region", "id")
    assert config.table.ordering_field == "source_position"
    assert config.table.partition_by == ()
    assert config.source.topics == ("shop.public.accounts",)
    assert config.decode.value.envelope == "debezium"
    assert config.decode.value.schema == SHAPE.columns_ddl
    assert config.sync is not None and (config.sync.database, config.sync.table_name) == ("mirror_public", "accounts")


def test_topics_outside_the_prefix_or_excluded_are_not_tables_and_include_patterns_choose_the_rest(tmp_path):
    mirror = loaded(mirror_file(tmp_path, {"include": ["public.*", "sales.orders"], "exclude": ["public.audit_*"]}))
    assert mirror.topic("other.public.accounts") is None
    assert mirror.topic("shop.public") is None
    included = {
        name: mirror.included(t)
        for name in ("public.accounts", "public.audit_log", "sales.orders", "sales.refunds")
        if (t := mirror.topic(f"shop.{name}")) is not None
    }
    assert included == {
        "public.accounts": True,
        "public.audit_log": False,
        "sales.orders": True,
        "sales.refunds": False,
    }


def test_the_partition_rule_applies_to_tables_with_its_columns_and_a_table_override_wins(tmp_path):
    mirror = loaded(
        mirror_file(
            tmp_path,
            {
                "partition_by": ["region"],
                "tables": {"public.orders": {"table": {"partition_by": []}, "index": {"initial_buckets": 8}}},
            },
        )
    )
    with_region = mirrored_table(mirror, mirror.topic("shop.public.accounts"), SHAPE)
    without = mirrored_table(mirror, mirror.topic("shop.public.items"), TableShape("`id` INT", ("id",), ("id",)))
    overridden = mirrored_table(mirror, mirror.topic("shop.public.orders"), SHAPE)
    assert with_region.table.partition_by == ("region",)
    assert without.table.partition_by == ()
    assert overridden.table.partition_by == ()
    assert overridden.index.initial_buckets == 8
    assert with_region.index.initial_buckets == 4


def test_a_mirror_file_beside_table_configs_is_read_apart_and_its_shared_sections_are_checked_at_load(tmp_path):
    mirror_file(tmp_path, index={"initial_buckets": 0})
    (tmp_path / "orders.yaml").write_text(
        yaml.safe_dump(
            {
                "table": {"name": "orders", "path": "t", "record_key": "id", "ordering_field": "ts"},
                "source": {"bootstrap_servers": "b:1", "topics": "orders"},
                "decode": {"value": {"format": "json", "schema": "id INT, ts BIGINT"}},
            }
        )
    )
    configs, mirrors, problems = read_all(tmp_path)
    assert [c.table.name for c in configs] == ["orders"]
    assert mirrors == []
    assert problems == ["shop.yaml: index.initial_buckets: should be greater than or equal to 1 (got 0)"]
    assert read_configs(tmp_path)[0] == configs


def test_mirror_problems_name_the_key_and_never_show_the_database_password(tmp_path):
    path = mirror_file(
        tmp_path,
        {"topic_pattern": "shop[.](?P<schema>.*)", "database_url": "mysql://me:s3cret@db/shop", "inclde": ["x"]},
        source={"bootstrap_servers": "b:1", "topics": ["a"]},
    )
    with pytest.raises(ConfigError) as raised:
        load_all(path)
    problems = "\n".join(raised.value.problems)
    assert "source.topics: not allowed in a mirror" in problems
    assert "mirror.inclde: unknown key; did you mean 'include'?" in problems
    assert "mirror.database_url: should be a postgresql://" in problems
    assert "mirror.topic_pattern: should have the named groups" in problems
    assert "s3cret" not in problems


def test_a_template_error_names_the_table_it_was_made_for(tmp_path):
    mirror = loaded(mirror_file(tmp_path, {"tables": {"public.orders": {"index": {"initial_buckets": 0}}}}))
    mirrored_table(mirror, mirror.topic("shop.public.accounts"), SHAPE)
    with pytest.raises(ConfigError) as raised:
        mirrored_table(mirror, mirror.topic("shop.public.orders"), SHAPE)
    assert list(raised.value.problems) == [
        "shop.yaml [public.orders]: index.initial_buckets: should be greater than or equal to 1 (got 0)"
    ]
