"""``ConfigError`` and the one check every config section uses (layer L0, imports nothing of ours).

Its own module so that the section modules (``agentrl.config.sections``, ``agentrl.config.vllm``)
import it without importing each other.
"""

from __future__ import annotations

import math

__all__ = ["ConfigError", "check", "check_min"]


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the dotted key and the fix."""


def check(ok: bool, msg: str) -> None:
    """Raise ``ConfigError(msg)`` unless ``ok``."""
    if not ok:
        raise ConfigError(msg)


def check_min(key: str, value: object, minimum: float, note: str = "", *, strict: bool = False,
              null_ok: bool = False) -> None:
    """Raise ``ConfigError("KEY must be >= MIN [or null] [(NOTE)], got VALUE")`` unless ``value``
    is at least ``minimum`` (above it when ``strict``: ``> MIN``), or is None and ``null_ok``."""
    if value is None and null_ok:
        return
    finite = not (isinstance(value, float) and math.isinf(value))  # .inf passes >=, nan fails it
    if value is not None and finite and (value > minimum if strict else value >= minimum):  # type: ignore[operator]
        return
    op = ">" if strict else ">="
    if not finite:
        raise ConfigError(f"{key} must be a finite number {op} {minimum}, got {value!r}")
    raise ConfigError(f"{key} must be {op} {minimum}{' or null' if null_ok else ''}{f' ({note})' if note else ''}, "
                      f"got {'null' if value is None else repr(value)}")
