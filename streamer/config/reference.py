"""The configuration reference in Markdown, rendered from the config model so it cannot drift.

    python -m streamer.config.reference > docs/configuration.md

Every key, its type (choices and bounds included), its default and its meaning come from
`streamer.config.model`: the meaning is each field's `description`, a section's introduction its
class docstring. A test compares the checked-in page with a fresh render.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel, BeforeValidator, SecretStr
from pydantic.fields import FieldInfo

from streamer.config.mirror import MirrorSettings
from streamer.config.model import JobConfig, _one_or_many
from streamer.errors import StreamerError

INTRODUCTION = """\
# Configuration reference

Each table is onboarded by one YAML file; `streamer run DIR` runs every `*.yaml` and `*.yml`
file of a directory as one application. `configs/examples/` has complete files. This page is
generated from `streamer/config/model.py` by `python -m streamer.config.reference >
docs/configuration.md`.

The whole file is checked before anything starts: unknown keys and bad values fail with the
file, the key's path and what was expected, all problems at once. Secrets (source options named
like passwords or keys, the schema registry's credentials) never appear in messages.

Any string value may name environment variables: `${NAME}` is replaced by the variable's value
(an unset variable is an error naming the key), `${NAME:-default}` by the default when the
variable is unset or empty, and `$${` stands for a literal `${`. Keys are never substituted.

Local paths (`table.path`, `table.quarantine_path`, `stream.checkpoint_location` and the
`schema_file`s) are relative to the YAML file's directory, so a directory of configs runs the
same from anywhere; absolute paths and URIs (`s3://...`, `file:///...`) are taken as they are.
A relative path that an environment variable gives is relative to the file too.

Defaults are written as YAML. YAML reads a bare `off`, `on`, `yes` or `no` as a boolean, so
quote such a choice: `mode: "off"`."""


@dataclass(frozen=True)
class Key:
    """One leaf key of the config."""

    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """The keys of one model, at a dotted path of the config."""

    path: str
    introduction: str
    keys: tuple[Key, ...]


def sections(model: type[BaseModel] = JobConfig) -> list[Section]:
    """The config's sections in file order: each top-level key, then the sections below it."""
    found: list[Section] = []
    for name, info in model.model_fields.items():
        nested = _model_of(info.annotation)
        if nested is None:
            found.append(Section(name, "", (_key(name, info),)))
        else:
            found.extend(_sections_of(nested, name, info))
    return found


def _sections_of(model: type[BaseModel], path: str, info: FieldInfo) -> list[Section]:
    keys, below = [], []
    for name, field_info in model.model_fields.items():
        nested = _model_of(field_info.annotation)
        if nested is None:
            keys.append(_key(f"{path}.{name}", field_info))
        else:
            below.extend(_sections_of(nested, f"{path}.{name}", field_info))
    return [Section(path, _introduction(model, info), tuple(keys)), *below]


def _introduction(model: type[BaseModel], info: FieldInfo) -> str:
    doc = inspect.cleandoc(model.__doc__) if model.__doc__ else (info.description or "")
    if info.is_required():
        presence = "Required."
    elif info.default is None:
        presence = "Optional; absent by default."
    else:
        presence = "Optional; every key has its default when the section is absent."
    return f"{doc}\n\n{presence}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The section model of a field (also when the section is optional), else None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


class UndocumentedKeyError(StreamerError, ValueError):
    """A key of the config model without a description: the reference cannot say what it means."""


def _key(path: str, info: FieldInfo) -> Key:
    if not info.description:
        raise UndocumentedKeyError(f"{path} has no description in streamer/config/model.py")
    return Key(path, type_text(info.annotation, info.metadata), default_text(info), info.description)


# -- Types ---------------------------------------------------------------------------------------

_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "file path",
    SecretStr: "secret string",
}
_BOUNDS = (
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "<="),
    (annotated_types.Lt, "lt", "<"),
)


def type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """A reader's name for a field's type, with its choices and bounds."""
    if get_origin(annotation) is Annotated:
        base, *extra = get_args(annotation)
        return type_text(base, [*_flattened(extra), *metadata])
    if get_origin(annotation) in (Union, types.UnionType):
        members = get_args(annotation)
        text = " or ".join(type_text(m, metadata) for m in members if m is not type(None))
        return f"{text} or null" if type(None) in members else text
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = [f"`{choice.value}`" for choice in annotation]
        return " or ".join(choices) if len(choices) <= 2 else "one of " + ", ".join(choices)
    if get_origin(annotation) in (tuple, list):
        item = type_text(get_args(annotation)[0])
        one_or_many = any(isinstance(m, BeforeValidator) and m.func is _one_or_many for m in metadata)
        text = f"{item} or list of {item}s" if one_or_many else f"list of {item}s"
        return _with_bounds(text, metadata, "item")
    if get_origin(annotation) is dict:
        key, value = (type_text(a) for a in get_args(annotation))
        return f"mapping {{{key}: {value}}}"
    return _with_bounds(_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation))), metadata, "character")


def _flattened(metadata: list[Any]) -> list[Any]:
    """Constraints given as `Field(...)` inside `Annotated` hold theirs in `.metadata`."""
    return [m for item in metadata for m in (item.metadata if isinstance(item, FieldInfo) else [item])]


def _with_bounds(text: str, metadata: Sequence[Any], unit: str) -> str:
    bounds = [
        f"{sign} {getattr(m, attribute)}" for m in metadata for kind, attribute, sign in _BOUNDS if isinstance(m, kind)
    ]
    lengths = [m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)]
    if lengths and unit == "character" and lengths[0] == 1:
        return f"non-empty {text}"
    if lengths:
        bounds.append(f"at least {lengths[0]} {unit}{'' if lengths[0] == 1 else 's'}")
    return f"{text} ({', '.join(bounds)})" if bounds else text


# -- Defaults ------------------------------------------------------------------------------------


def default_text(info: FieldInfo) -> str:
    """The default as YAML in backticks, or `required`."""
    if info.is_required():
        return "required"
    return f"`{yaml_text(info.get_default(call_default_factory=True))}`"


def yaml_text(value: Any) -> str:
    """`value` as one line of YAML, quoted where YAML would read it as something else."""
    if isinstance(value, tuple):
        value = list(value)
    elif isinstance(value, Enum):
        value = value.value
    elif isinstance(value, Path):
        value = str(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip()
    return text.removesuffix("...").strip()


# -- Markdown ------------------------------------------------------------------------------------


MIRROR_INTRODUCTION = """\
A file with a `mirror` section is a database mirror: one file for every table of a Debezium
connector, all of them written by one streaming query (`streamer run`), new ones taken while it
runs, and compared with the source by `streamer verify`. Its other sections are those of a table
config above, shared by every table; `table.name`, `table.path` and the `sync` names are
templates over the topic's parts (`{prefix}`, `{schema}`, `{table}`, `{topic}`; by default
`{schema}_{table}` and `{schema}/{table}`). The record key is Debezium's key, the ordering field
the change's log position; `source.topics` and `source.topic_pattern` are the mirror's to say.
See docs/operations.md, "Mirror a database"."""


def mirror_section() -> Section:
    """The `mirror` section of a mirror file."""
    keys = tuple(_key(f"mirror.{name}", info) for name, info in MirrorSettings.model_fields.items())
    return Section("mirror", MIRROR_INTRODUCTION, keys)


def render() -> str:
    """The whole reference page."""
    parts = [INTRODUCTION]
    for section in [*sections(), mirror_section()]:
        level = "##" if "." not in section.path else "###"
        parts.append(f"{level} `{section.path}`")
        if section.introduction:
            parts.append(section.introduction)
        rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        rows += [
            f"| `{k.path}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.description)} |" for k in section.keys
        ]
        if section.keys:
            parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
