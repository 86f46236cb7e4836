"""Which settings are secrets (passwords, keys, tokens, JAAS lines), and their values kept out of
what the job shows: config dumps, error messages, logs."""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET_NAME = re.compile(r"password|secret|jaas|key|token", re.IGNORECASE)


def is_secret_option(name: str) -> bool:
    """True for option names whose values must never be shown."""
    return bool(_SECRET_NAME.search(name))


def redact_options(options: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``options`` with secret values replaced by ``***``."""
    return {k: ("***" if is_secret_option(k) else v) for k, v in options.items()}


def redact_text(text: str, options: Mapping[str, str]) -> str:
    """``text`` with every secret option value (and the parts of a JAAS line) replaced."""
    secrets: list[str] = []
    for k, v in options.items():
        if is_secret_option(k) and v:
            secrets.append(str(v))
            if "jaas" in k.lower():
                secrets.extend(m.group(2) for m in JAAS_ITEM.finditer(str(v)))
    for s in sorted(set(secrets), key=len, reverse=True):
        if len(s) >= 3:
            text = text.replace(s, "***")
    return text


JAAS_ITEM = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
