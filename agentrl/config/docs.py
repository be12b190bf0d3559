"""Every key of a ``Config`` with its value and its documentation (``agentrl train CFG
--print-config``).

The documentation of a key is taken from its section's docstring (``agentrl.config.sections``,
where each section documents its keys as ````key````): the sentence or clause that first
names the key, from that mention on when the clause is long, trimmed to ~110 characters. Keys a section does not name get the section's first line. Nested sections
(``policy.lora``, ``rollout.tree``, ``rollout.harness``) are walked; ``algorithm.kwargs`` lists
the estimator's hyperparameters in effect, each documented by its entry in the estimator's
``Args:`` (the caller passes the estimator's docstring lookup: the registry is above L0;
ALGORITHMS.md has their meaning). Layer L0: standard library only.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["KeyDoc", "describe_config"]

_CLAUSE = re.compile(r"(?<=\.)\s+(?=[A-Z`(])|;\s+")
_MAX = 110


@dataclass(frozen=True)
class KeyDoc:
    """One config key: dotted ``key``, its ``value`` as YAML would show it, and ``doc``."""

    key: str
    value: str
    doc: str


def _clauses(cls: type) -> list[str]:
    text = " ".join(inspect.getdoc(cls).split()) if inspect.getdoc(cls) else ""
    return [c.strip() for c in _CLAUSE.split(text) if c.strip()]


def _doc_of(cls: type, name: str) -> str:
    clauses = _clauses(cls)
    pattern = re.compile(rf"``{re.escape(name)}(``|[: =])")
    hit = next((c for c in clauses if pattern.search(c)), None)
    if hit is None:
        text = clauses[0] if clauses else ""
    elif len(hit) <= _MAX:
        text = hit
    else:  # a long clause: from the key's mention on
        at = pattern.search(hit).start()
        text = hit[at:] if at < 40 else "…" + hit[at:]
    text = text.replace("``", "")
    return text if len(text) <= _MAX else text[: _MAX - 1].rstrip() + "…"


def _args_entry(docstring: str, name: str) -> str:
    """The ``Args:`` entry for hyperparameter ``name`` in an estimator's ``docstring`` ("" when none)."""
    text = " ".join(docstring.split())
    m = re.search(rf"(?:^|[\s/]){re.escape(name)}(?: / \w+)*: (.+?)(?:\. [A-Za-z_]+(?: / [a-z_]+)*:|\. Returns:|$)", text)
    if m is None:
        return ""
    doc = m.group(1).replace("``", "").rstrip(".")
    return doc if len(doc) <= _MAX else doc[: _MAX - 1].rstrip() + "…"


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
                or [KeyDoc(key, "{}", _doc_of(cls, f.name))]
        else:
            out.append(KeyDoc(key, _show(value), _doc_of(cls, f.name)))
    return out
