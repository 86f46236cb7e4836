"""docs/configuration.md against the config model: every key with its default, choices and
bounds, every field described, and the page exactly what `streamer.config.reference` renders.

The model is walked here independently of the renderer, so a renderer that skips a key fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import annotated_types
import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from streamer.config import reference as config_reference
from streamer.config.mirror import MirrorSettings
from streamer.config.model import JobConfig

pytestmark = pytest.mark.unit

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def all_fields(model: type[BaseModel] = JobConfig, prefix: str = "") -> list[tuple[str, FieldInfo, bool]]:
    """(dotted path, field, is a leaf) of every field below `model`, sections included."""
    found = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        below = nested_model(info.annotation)
        found.append((path, info, below is None))
        if below is not None:
            found.extend(all_fields(below, f"{path}."))
    return found


LEAVES = {path: info for path, info, leaf in [*all_fields(), *all_fields(MirrorSettings, "mirror.")] if leaf}


def documented_rows() -> dict[str, tuple[str, str, str]]:
    """Key path -> (type, default, meaning) cells of the page's tables."""
    rows = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\| `([a-z_.]+)` \|(.*)\|", line)
        if match:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", match.group(2))]
            rows[match.group(1)] = tuple(cells)
    return rows


ROWS = documented_rows() if PAGE.exists() else {}


def plain(value: Any) -> Any:
    """A default as YAML reads it back."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def test_the_page_is_a_fresh_render():
    assert PAGE.read_text(encoding="utf-8") == config_reference.render(), (
        "docs/configuration.md is stale: python -m streamer.config.reference > docs/configuration.md"
    )


def test_the_page_documents_exactly_the_leaf_keys():
    assert set(ROWS) == set(LEAVES)


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_a_key_is_documented_with_its_default(path):
    info = LEAVES[path]
    _, default, _ = ROWS[path]
    if info.is_required():
        assert default == "required"
    else:
        assert default.startswith("`") and default.endswith("`"), default
        assert yaml.safe_load(default[1:-1]) == plain(info.get_default(call_default_factory=True))


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_a_key_shows_its_choices_and_bounds(path):
    kind, _, meaning = ROWS[path]
    assert meaning == " ".join(LEAVES[path].description.split())
    pending, choices = [LEAVES[path].annotation], []
    while pending:
        annotation = pending.pop()
        if get_origin(annotation) is Literal:
            choices.extend(get_args(annotation))
        pending.extend(get_args(annotation))
    for choice in choices:
        assert f"`{choice}`" in kind
    for bound in LEAVES[path].metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(bound, getattr(annotated_types, name.capitalize())):
                assert str(getattr(bound, name)) in kind


@pytest.mark.parametrize("path", [path for path, _, _ in all_fields()])
def test_every_field_has_a_description(path):
    info = {p: i for p, i, _ in all_fields()}[path]
    assert info.description and info.description.strip(), f"{path} has no description in streamer/config/model.py"


def test_secrets_and_unions_are_named():
    assert ROWS["decode.schema_registry.basic_auth_user_info"][0] == "secret string or null"
    assert ROWS["table.record_key"][0].startswith("non-empty string or list of non-empty strings")
    assert "mapping" in ROWS["source.starting_offsets"][0]
