"""Loading table configs: YAML files read into `streamer.config.model`, checked in full before
any Spark or Kafka work starts.

A streaming job that fails an hour in on a typo is expensive, so every problem of a file is
reported at once, each with the file, the dotted key path and what was expected. Any string
value may name environment variables (`${NAME}`, `${NAME:-default}`). Secrets (Kafka options
named like passwords or keys, the schema registry credentials) never appear in an error message.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from streamer.config.mirror import (
    MIRROR,
    PATH_SHAPE,
    SAMPLE_TOPIC,
    TABLE_SECTIONS,
    MirrorConfig,
    MirroredTopic,
    MirrorSettings,
    TableShape,
)
from streamer.config.model import CONFIG_DIR, JobConfig, KeyPath, KeyProblemsError, Problem
from streamer.config.secrets import is_secret_option
from streamer.errors import ConfigError

__all__ = [
    "ConfigError",
    "config_from_mapping",
    "load_all",
    "load_config",
    "load_configs",
    "mirrored_table",
    "read_all",
    "read_configs",
]


def config_from_mapping(
    data: Mapping[str, Any], source_name: str = "<config>", base_dir: Path | None = None
) -> JobConfig:
    """A config from parsed YAML; ``source_name`` labels errors, ``base_dir`` (default: the
    working directory) is what relative paths (table, quarantine, checkpoint, schema files) are
    relative to, as a YAML file's directory is for a file."""
    return _build(data, source_name, (Path.cwd() if base_dir is None else Path(base_dir)) / source_name)


def load_config(path: str | Path) -> JobConfig:
    """The job config in one YAML file."""
    path = Path(path)
    return _build(_read_yaml(path), str(path), path)


def load_configs(path: str | Path) -> list[JobConfig]:
    """The config of a YAML file, or those of every *.yaml / *.yml file of a directory by name."""
    configs, problems = read_configs(path)
    if problems:
        raise ConfigError(problems)
    return configs


def read_configs(path: str | Path) -> tuple[list[JobConfig], list[str]]:
    """The table configs of a file or directory that load, and every problem of those that do
    not (and between them): what `streamer doctor` and the checks before a start go on with.
    Mirror files (`read_all`) are left out."""
    configs, _, problems = read_all(path)
    return configs, problems


def load_all(path: str | Path) -> tuple[list[JobConfig], list[MirrorConfig]]:
    """The table configs and the mirrors of a file or directory, all of which load."""
    configs, mirrors, problems = read_all(path)
    if problems:
        raise ConfigError(problems)
    return configs, mirrors


def read_all(path: str | Path) -> tuple[list[JobConfig], list[MirrorConfig], list[str]]:
    """The table configs and mirrors (files with a `mirror` section) of a file or directory that
    load, and every problem of those that do not."""
    path = Path(path)
    if path.is_dir():
        files = sorted(
            (f for f in path.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()), key=lambda f: f.name
        )
        if not files:
            return [], [], [f"{path}: no *.yaml or *.yml file in this directory"]
    else:
        files = [path]
    configs: list[JobConfig] = []
    mirrors: list[MirrorConfig] = []
    problems: list[str] = []
    for file in files:
        try:
            data = _read_yaml(file)
            if isinstance(data, Mapping) and MIRROR in data:
                mirrors.append(_build_mirror(data, file))
            else:
                configs.append(_build(data, str(file), file))
        except ConfigError as e:
            problems.extend(e.problems)
    problems.extend(_shared_values(configs))
    problems.extend(_one_metrics_endpoint([*configs, *(m.sample for m in mirrors if m.sample is not None)]))
    return configs, mirrors, problems


def _shared_values(configs: list[JobConfig]) -> list[str]:
    """Problems for table names, table paths and checkpoints that two configs share."""
    unique_values = {
        "table.name": lambda c: c.table.name,
        "table.path": lambda c: c.table.path.rstrip("/"),
        "stream.checkpoint_location": lambda c: c.checkpoint_location.rstrip("/"),
    }
    problems = []
    for key_path, value_of in unique_values.items():
        first_file: dict[str, Path] = {}
        for config in configs:
            value = value_of(config)
            other = first_file.setdefault(value, config.config_path)
            if other != config.config_path:
                problems.append(
                    f"{config.config_path}: {key_path}: should be unique, {other} has it too (got {value!r})"
                )
    return problems


def _one_metrics_endpoint(configs: list[JobConfig]) -> list[str]:
    """Problems for configs that ask for different endpoints: the application serves one."""
    first: JobConfig | None = None
    problems = []
    for config in (c for c in configs if c.metrics.port is not None):
        first = first or config
        if (config.metrics.host, config.metrics.port) != (first.metrics.host, first.metrics.port):
            problems.append(
                f"{config.config_path}: metrics.port: should be {first.metrics.host}:{first.metrics.port} "
                f"as in {first.config_path}: one endpoint serves every table "
                f"(got {config.metrics.host}:{config.metrics.port})"
            )
    return problems


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file or directory"]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([f"{path}: cannot be read: {e}"]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([f"{path}: {where}invalid YAML: {getattr(e, 'problem', None) or e}"]) from None


def _build(data: Any, source_name: str, config_path: Path) -> JobConfig:
    if not isinstance(data, Mapping):
        raise ConfigError(
            [
                f"{source_name}: should be a mapping of the sections table, source, decode, "
                f"transform, index and stream (got {_show(data)})"
            ]
        )
    env_problems: list[Problem] = []
    data = _substitute(data, (), env_problems)
    try:
        config = JobConfig.model_validate(data, context={CONFIG_DIR: config_path.parent})
        problems = env_problems
    except ValidationError as e:
        unresolved = [key_path for key_path, _ in env_problems]
        problems = env_problems + [
            (key_path, text)
            for key_path, text in _validation_problems(e)
            if not any(key_path[: len(u)] == u for u in unresolved)
        ]
    if problems:
        raise ConfigError(
            [
                f"{source_name}: {'.'.join(map(str, key_path))}: {text}" if key_path else f"{source_name}: {text}"
                for key_path, text in problems
            ]
        )
    config._config_path = config_path
    return config


def _build_mirror(data: Mapping[str, Any], path: Path) -> MirrorConfig:
    """A mirror file: its `mirror` section, and its tables' sections checked on a made-up table."""
    env_problems: list[Problem] = []
    data = _substitute(data, (), env_problems)
    problems = list(env_problems)
    unknown = [key for key in data if key != MIRROR and key not in TABLE_SECTIONS]
    problems += [((key,), f"unknown section; allowed: {MIRROR}, {', '.join(TABLE_SECTIONS)}") for key in unknown]
    source = data.get("source")
    if isinstance(source, Mapping):
        problems += [
            (("source", key), "not allowed in a mirror: mirror.topic_prefix (or topic_pattern) says which topics")
            for key in ("topics", "topic_pattern")
            if key in source
        ]
    try:
        settings = MirrorSettings.model_validate(data[MIRROR] if data[MIRROR] is not None else {})
    except ValidationError as e:
        problems += [((MIRROR, *key_path), text) for key_path, text in _validation_problems(e, MirrorSettings)]
        settings = None
    if problems:
        raise ConfigError([f"{path}: {'.'.join(map(str, key_path))}: {text}" for key_path, text in problems])
    assert settings is not None
    mirror = MirrorConfig(settings, {k: v for k, v in data.items() if k != MIRROR}, path)
    mirror.sample = mirrored_table(mirror, SAMPLE_TOPIC, PATH_SHAPE)
    return mirror


def mirrored_table(mirror: MirrorConfig, topic: MirroredTopic, shape: TableShape) -> JobConfig:
    """The config of one of the mirror's tables (`streamer.config.mirror`); `ConfigError` names
    the file, the table and the key."""
    where = mirror.config_path.name if topic is SAMPLE_TOPIC else f"{mirror.config_path.name} [{topic.name}]"
    config = _build(mirror.table_sections(topic, shape), where, mirror.config_path)
    return config


# -- Environment variables -----------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})?")


def _substitute(value: Any, key_path: KeyPath, problems: list[Problem]) -> Any:
    """``value`` with ``${NAME}`` / ``${NAME:-default}`` replaced in every string, keys excepted."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _variable_value(match, key_path, problems), value)
    if isinstance(value, list):
        return [_substitute(item, (*key_path, i), problems) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {key: _substitute(item, (*key_path, key), problems) for key, item in value.items()}
    return value


def _variable_value(match: re.Match[str], key_path: KeyPath, problems: list[Problem]) -> str:
    if match.group(0) == "$${":
        return "${"
    name, default = match.groups()
    if name is None:
        problems.append((key_path, "'${' should start ${NAME} or ${NAME:-default}; write '$${' for a literal '${'"))
        return match.group(0)
    value = os.environ.get(name)
    if default is not None and not value:
        return default
    if value is None:
        problems.append((key_path, f"environment variable {name} is not set"))
        return match.group(0)
    return value


# -- Validation errors ---------------------------------------------------------------------------

_EXPECTATIONS = {
    "model_type": "should be a mapping",
    "dict_type": "should be a mapping",
    "tuple_type": "should be a string or a list of strings",
    "list_type": "should be a list",
    "too_short": "should not be empty",
    "string_too_short": "should not be empty",
}


def _validation_problems(error: ValidationError, model: type[BaseModel] = JobConfig) -> list[Problem]:
    problems: list[Problem] = []
    for detail in error.errors():
        key_path = tuple(part for part in detail["loc"] if part != "[key]")
        cause = detail.get("ctx", {}).get("error")
        if isinstance(cause, KeyProblemsError):
            problems.extend(((*key_path, *below), text) for below, text in cause.problems)
        elif detail["type"] == "extra_forbidden":
            problems.append((key_path, _unknown_key(key_path, model)))
        elif detail["type"] == "missing":
            problems.append((key_path, "required key is missing"))
        else:
            expected = _EXPECTATIONS.get(detail["type"]) or detail["msg"].removeprefix("Value error, ")
            got = "***" if _is_secret(key_path) else _show(detail["input"])
            problems.append((key_path, f"{expected.removeprefix('Input ')} (got {got})"))
    return problems


def _unknown_key(key_path: KeyPath, model: type[BaseModel] = JobConfig) -> str:
    allowed = _keys_at(key_path[:-1], model)
    close = difflib.get_close_matches(str(key_path[-1]), allowed, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; allowed keys: {', '.join(allowed)}"


def _keys_at(key_path: KeyPath, model: type[BaseModel] = JobConfig) -> list[str]:
    """The YAML keys of the section at ``key_path``."""
    for key in key_path:
        annotation = model.model_fields[key].annotation
        model = next(
            t
            for t in (annotation, *getattr(annotation, "__args__", ()))
            if isinstance(t, type) and issubclass(t, BaseModel)
        )
    return list(model.model_fields)


def _is_secret(key_path: KeyPath) -> bool:
    if key_path[:2] in (("source", "options"), ("table", "storage_options")):
        return len(key_path) == 2 or is_secret_option(str(key_path[2]))
    return key_path[-1:] in (("basic_auth_user_info",), ("database_url",))


_SCALARS = (str, int, float, bool, type(None))


def _show(value: Any) -> str:
    """A short view of a bad value; mappings and nested lists are not shown, they may hold secrets."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)) and not all(isinstance(item, _SCALARS) for item in value):
        return "a list"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
