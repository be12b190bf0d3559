"""Every key of a ``Config`` with its value and its documentation (``agentrl train CFG
--print-config``).

The documentation of a key is its own help text, ``agentrl.config.help.KEY_HELP`` (a key with
none falls back to its section's first docstring line). Nested sections (``policy.lora``,
``rollout.tree``, ``rollout.harness``) are walked; ``algorithm.kwargs`` lists the estimator's
hyperparameters in effect with the estimator's own ``Args:`` entry for each. Texts are whole:
the table that prints them wraps them. The estimator's docstring lookup is passed in by the
caller (the registry is above this layer). Layer L0: standard library only.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

from agentrl.config.help import KEY_HELP

__all__ = ["KeyDoc", "describe_config"]


@dataclass(frozen=True)
class KeyDoc:
    """One config key: dotted ``key``, its ``value`` as YAML would show it, and ``doc``."""

    key: str
    value: str
    doc: str


def _doc_of(cls: type, key: str) -> str:
    """The help of dotted ``key`` (``KEY_HELP``), else the first line of its section ``cls``'s docstring."""
    if key in KEY_HELP:
        return KEY_HELP[key]
    return " ".join((inspect.getdoc(cls) or "").split(".")[0].replace("``", "").split())


def _args_entry(docstring: str, name: str) -> str:
    """The ``Args:`` entry for hyperparameter ``name`` in an estimator's ``docstring`` ("" when none)."""
    text = " ".join(docstring.split())
    m = re.search(rf"(?:^|[\s/]){re.escape(name)}(?: / \w+)*: (.+?)(?:\. [A-Za-z_]+(?: / [a-z_]+)*:|\. Returns:|$)", text)
    if m is None:
        return ""
    return m.group(1).replace("``", "").rstrip(".")


def _show(value: object) -> str:
    if isinstance(value, tuple):
        value = list(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_config(cfg: object, prefix: str = "", *,
                    estimator_doc: Callable[[str], str] | None = None) -> list[KeyDoc]:
    """``KeyDoc`` of every leaf key of ``cfg`` (a ``Config`` or one of its sections), in
    field order; a section that is null (e.g. ``policy.lora``) is one key with value null.

    ``estimator_doc(name)``: the docstring of the estimator registered as ``name`` (its
    ``Args:`` entries document ``algorithm.kwargs.*``); the estimator registry is above this
    layer, so the caller passes the lookup (``agentrl.train.checks.estimator_docstring``).
    Without it those keys have an empty doc."""
    out: list[KeyDoc] = []
    cls = type(cfg)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out += describe_config(value, key + ".", estimator_doc=estimator_doc)
        elif isinstance(value, dict) and f.name == "kwargs" and hasattr(cfg, "estimator"):
            est = estimator_doc(cfg.estimator) if estimator_doc is not None else ""
            out += [KeyDoc(f"{key}.{k}", _show(v), _args_entry(est, k)) for k, v in value.items()] \
                or [KeyDoc(key, "{}", _doc_of(cls, key))]
        else:
            out.append(KeyDoc(key, _show(value), _doc_of(cls, key)))
    return out
