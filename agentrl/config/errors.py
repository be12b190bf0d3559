"""``ConfigError`` and the one check every config section uses (layer L0, imports nothing of ours).

Its own module so that the section modules (``agentrl.config.sections``, ``agentrl.config.vllm``)
import it without importing each other.
"""

from __future__ import annotations

__all__ = ["ConfigError", "check"]


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the dotted key and the fix."""


def check(ok: bool, msg: str) -> None:
    """Raise ``ConfigError(msg)`` unless ``ok``."""
    if not ok:
        raise ConfigError(msg)
