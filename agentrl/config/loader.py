"""Reading a run config: YAML (``1e-5`` a float), dotted overrides, building the section
dataclasses with strict type checks, and writing the config back.

``load_config("examples/grpo_toy.yaml", ["update.lr=3e-5", "env.id=agentrl/Toy-v0"])``
reads the YAML, applies each ``key.sub=value`` override (the value is parsed as a YAML
scalar or flow collection, so ``1e-5``, ``true``, ``null`` and ``[a, b]`` work), builds the
dataclasses with strict type checks and fills in every default in effect
(``agentrl.config.checks.validate_config``), so that ``dump_config`` writes the complete run
config to the run directory (PITFALLS P4).

Errors are ``ConfigError`` (a ``ValueError``) naming the dotted key and the fix: a misspelt
key suggests the closest valid key.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from agentrl.config.checks import _plain, validate_config
from agentrl.config.harness_paths import resolve_harness_command
from agentrl.config.sections import Config, ConfigError, _check
from agentrl.registry import closest


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-5`` / ``3E+2`` as floats (YAML 1.2; PyYAML's 1.1
    resolver would return the string '1e-5')."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def _yaml_error(where: str, exc: yaml.YAMLError) -> str:
    """``WHERE, line L, column C: not valid YAML: PROBLEM (CONTEXT at line L', column C')``:
    PyYAML's error with the file's path instead of ``"<unicode string>"``."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"{where}: not valid YAML: {exc}"
    ctx, ctx_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    context = f" ({ctx} at line {ctx_mark.line + 1}, column {ctx_mark.column + 1})" if ctx and ctx_mark else ""
    return (f"{where}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: "
            f"{getattr(exc, 'problem', None) or exc}{context}")


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


# --------------------------------------------------------------------------- building


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert it (int → float, list →
    tuple, mapping → dataclass). Raises ConfigError naming ``key`` on a mismatch."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], key) if len(inner) == 1 else value
    if origin is Literal:
        if isinstance(value, bool) and not any(isinstance(a, bool) for a in args):
            # YAML 1.1 reads unquoted on/off/yes/no as booleans: take the choice the user wrote
            spelled = [a for a in (("on", "yes", "true") if value else ("off", "no", "false")) if a in args]
            value = spelled[0] if len(spelled) == 1 else value
        quote = "; YAML reads an unquoted on/off/yes/no/true/false as a boolean: quote it" if isinstance(value, bool) else ""
        _check(value in args, f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, args))}"
               + _hint(value, args) + quote)
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    if origin is tuple:
        _check(isinstance(value, (list, tuple)), f"{key}: expected a list, got {type(value).__name__} {value!r}")
        return tuple(_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _check(isinstance(value, Mapping), f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        _check(all(isinstance(k, str) for k in value), f"{key}: mapping keys must be strings")
        return dict(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    _check(ok, f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}"
           + (" (quote it in YAML to pass a string)" if tp is str else ""))
    return value


def _hint(value: Any, choices: Sequence[Any]) -> str:
    guess = closest(str(value), [str(c) for c in choices])
    return f"; did you mean {guess[0]!r}?" if guess else ""


def _build(cls: type, raw: Any, prefix: str) -> Any:
    """Instantiate dataclass ``cls`` from the mapping ``raw``; ``prefix`` is its dotted key."""
    where = prefix or "the config"
    if raw is None:
        raw = {}
    _check(isinstance(raw, Mapping), f"{where}: expected a mapping of keys, got {type(raw).__name__} {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in raw:
        if k not in names:
            dotted = f"{prefix}.{k}" if prefix else str(k)
            guess = closest(str(k), names, n=1)
            did = f"; did you mean '{prefix + '.' if prefix else ''}{guess[0]}'?" if guess else "."
            raise ConfigError(f"unknown config key '{dotted}'{did} Valid keys under {where}: {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        if f.name in raw:
            kwargs[f.name] = _convert(raw[f.name], hints[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required config key '{key}'")
    return cls(**kwargs)  # __post_init__ range checks raise ConfigError


def build_options(cls: type, raw: Any, prefix: str) -> Any:
    """The frozen dataclass ``cls`` built from the mapping ``raw`` (None = every default) the way
    config sections are: unknown keys refused with the closest valid one, values converted to the
    field types, ``cls.__post_init__``'s range checks. ``prefix``: the dotted key for messages
    (``algorithm.scorers.prm``). Used for options that registries above L0 declare (a step
    scorer's).

    Raises:
        ConfigError: not a mapping, an unknown key, a value of the wrong type or out of range.
    """
    return _build(cls, raw, prefix)


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with each override applied, in order.

    ``a.b.c=value`` sets a key; the value is parsed as YAML (safe loader) (``1e-5`` → float,
    ``true`` → bool, ``null`` → None, ``[x, y]`` → list, ``"42"`` → str). Missing or null
    intermediate sections are created. Hydra's spellings work too: ``+a.b=value`` and
    ``++a.b=value`` set (add) a key the same way, ``~a.b`` removes it from the file's values so
    its default applies. Key validity is checked when the dataclasses are built.
    Raises:
        ConfigError: an override without ``=`` (other than ``~key``), with an empty key part,
            or one that descends into a value that is not a mapping.
    """
    out = _deepcopy(raw)
    for item in overrides:
        if item.startswith("~"):
            _remove(out, item)
            continue
        key, sep, text = item.lstrip("+").partition("=")
        _check(bool(sep) and key.strip() != "", f"override {item!r} is not 'key.sub=value' (e.g. update.lr=1e-5; "
                                                f"'~key.sub' resets a key to its default)")
        parts = key.strip().split(".")
        _check(all(parts), f"override {item!r} has an empty key part")
        try:
            value = _yaml_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(_yaml_error(f"override {item!r}", exc) + "; a text value with braces, colons or # "
                              "needs YAML quotes inside the shell's, e.g. 'key=\"{x}: y\"'") from None
        node = out
        for i, p in enumerate(parts[:-1]):
            if node.get(p) is None:
                node[p] = {}
            _check(isinstance(node[p], dict), f"override {item!r}: '{'.'.join(parts[:i + 1])}' is not a section")
            node = node[p]
        node[parts[-1]] = value
    return out


def _remove(out: dict[str, Any], item: str) -> None:
    """Apply ``~a.b`` (or ``~a.b=value``, Hydra's form: removed only when it has that value)."""
    key, sep, text = item[1:].partition("=")
    parts = key.strip().split(".")
    _check(all(parts), f"override {item!r} has an empty key part; write '~section.key'")
    node = out
    for p in parts[:-1]:
        node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return  # not in the file: already its default
    if isinstance(node, dict) and parts[-1] in node:
        if sep and node[parts[-1]] != _yaml_load(text):
            raise ConfigError(f"override {item!r}: {key} is {node[parts[-1]]!r} in the config, not {text!r}")
        del node[parts[-1]]


def _deepcopy(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return {k: _deepcopy(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_deepcopy(v) for v in raw]
    return raw


# --------------------------------------------------------------------------- entry points


def config_from_dict(raw: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """Build a ``Config`` from a parsed YAML mapping plus dotted overrides, every default in
    effect filled in (``validate_config``). No registry is consulted: the env id, the loss and
    the estimator's kwargs are checked by ``agentrl.train.checks.checked_config_from_dict``.
    Raises ConfigError (see ``apply_overrides``, ``validate_config``)."""
    return validate_config(_build(Config, apply_overrides(raw or {}, overrides), ""))


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read one standalone YAML config, apply ``key.sub=value`` overrides, build and validate
    (``config_from_dict``). No registry is consulted: ``agentrl.train.checks.load_checked_config``
    also checks the env id, the loss and the estimator's kwargs (filling its defaults in).

    A relative ``rollout.harness.command`` program is read against the config file's folder,
    then the working directory, and stored absolute (``agentrl.config.harness_paths``).

    Raises:
        ConfigError: missing file, invalid YAML, unknown/misspelt key (with the closest valid
            key), wrong value type or range (see ``validate_config``), a harness program that
            does not exist.
    """
    p = Path(path)
    _check(p.is_file(), f"config file {str(p)!r} does not exist; pass the path of a YAML file (see examples/)")
    try:
        raw = _yaml_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(str(p), exc)) from None
    _check(raw is None or isinstance(raw, Mapping), f"{p}: the top level must be a mapping of sections")
    cfg = config_from_dict(raw or {}, overrides)
    harness = cfg.rollout.harness
    if harness is not None:  # its program beside the config file (else the working directory), made absolute
        harness = dataclasses.replace(harness, command=resolve_harness_command(harness.command, p.parent))
        cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, harness=harness))
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (tuples become lists), ready for YAML/JSON."""
    return _plain(cfg)


def dump_config(cfg: Config, path: str | Path) -> Path:
    """Write ``cfg`` (every value in effect, defaults included) as YAML to ``path``; the
    file loads back to an equal ``Config``. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return p
