"""Run configuration: nested frozen dataclasses, one YAML file per run, dotted overrides.

``load_config("examples/grpo_toy.yaml", ["update.lr=3e-5", "env.id=agentrl/Toy-v0"])``
reads the YAML, applies each ``key.sub=value`` override (the value is parsed as a YAML
scalar or flow collection, so ``1e-5``, ``true``, ``null`` and ``[a, b]`` work), builds the
dataclasses with strict type checks, validates names against the registries and fills in
every default in effect, so that ``dump_config`` writes the complete run config to the run
directory (PITFALLS P4: e.g. the estimator's ``stats_over`` in effect is recorded).

Errors are ``ConfigError`` (a ``ValueError``) naming the dotted key and the fix: a misspelt
key suggests the closest valid key; an unknown env id fails here, at parse time, before any
worker starts (PITFALLS P10).

Layer L0: imports only the standard library, PyYAML and ``agentrl.registry``. Names are
validated against the env registry (L1) and the estimator registry (L3) through
``importlib`` at call time, so importing this module never pulls in gymnasium, NumPy
estimators or torch.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from agentrl.registry import closest

__all__ = [
    "ConfigError", "RunConfig", "EnvConfig", "LoraSpec", "PolicyConfig", "HarnessConfig", "TreeConfig", "RolloutConfig",
    "AlgorithmConfig", "UpdateConfig", "LogConfig", "Config", "load_config", "config_from_dict",
    "apply_overrides", "validate_config", "to_dict", "dump_config",
]


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


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the dotted key and the fix."""


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class RunConfig:
    """``run``: identity and schedule. ``iterations``, ``eval_every`` and ``save_every`` count
    training iterations (one rollout phase + one update phase); 0 disables eval / saving."""

    name: str = "run"
    seed: int = 0
    out_dir: str = "runs"
    iterations: int = 100
    eval_every: int = 10
    save_every: int = 10

    def __post_init__(self) -> None:
        _check(self.iterations >= 0, "run.iterations must be >= 0")
        _check(self.eval_every >= 0 and self.save_every >= 0, "run.eval_every/save_every must be >= 0 (0 = off)")


@dataclass(frozen=True)
class EnvConfig:
    """``env``: which registered env (``id``, validated at parse time), its constructor
    ``kwargs``, the task split, the turn limit and the held-out evaluation panel."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    max_turns: int = 8
    eval_split: str = "eval"
    eval_panel_size: int = 40

    def __post_init__(self) -> None:
        _check(bool(self.id), "env.id is empty; set it to a registered id such as 'agentrl/Toy-v0'")
        _check(self.max_turns >= 1, "env.max_turns must be >= 1")
        _check(self.eval_panel_size >= 0, "env.eval_panel_size must be >= 0")


@dataclass(frozen=True)
class LoraSpec:
    """``policy.lora``: LoRA adapters (peft). ``top_n_layers`` puts adapters only on the last
    n transformer layers (None = all layers); ``alpha`` is peft's ``lora_alpha``."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    top_n_layers: Optional[int] = None

    def __post_init__(self) -> None:
        _check(self.rank >= 1, "policy.lora.rank must be >= 1")
        _check(0.0 <= self.dropout < 1.0, "policy.lora.dropout must be in [0, 1)")
        _check(len(self.target_modules) > 0, "policy.lora.target_modules must name at least one module")
        _check(self.top_n_layers is None or self.top_n_layers >= 1, "policy.lora.top_n_layers must be >= 1 or null")


@dataclass(frozen=True)
class PolicyConfig:
    """``policy``: the model (packaged name or HF folder path), the engine, sampling
    (``temperature``, ``top_p``, ``max_tokens`` generated tokens per turn), how the prompt is
    built (``context``: full ``chat`` history or a ``window`` of the last ``window_k`` turns),
    the action format (``agentrl.rollout.parsing``) and optional LoRA. ``base_url`` is the
    server of the HTTP engines; ``max_batch`` caps prompts per engine call (None = all active
    slots); ``return_hidden`` stores final-layer hidden states (needed by BiPACE);
    ``action_constraint: admissible`` decodes only the env's admissible actions (a token trie,
    logprobs renormalised over the allowed ids; ``agentrl.llm.constrained``, LEARNING.md). ``dtype`` float32
    matches the engines' default; bfloat16 is ~2-3x faster on AVX-512-BF16 CPUs (LEARNING.md)."""

    model: str = "smollm2-135m-instruct"
    engine: Literal["hf", "vllm", "vllm_http", "openai_http", "scripted"] = "hf"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    context: Literal["chat", "window"] = "chat"
    window_k: int = 3
    action_format: str = "tag:action"
    action_constraint: Literal["none", "admissible"] = "none"
    base_url: Optional[str] = None
    max_batch: Optional[int] = None
    return_hidden: bool = False
    lora: Optional[LoraSpec] = None

    def __post_init__(self) -> None:
        _check(self.temperature > 0, "policy.temperature must be > 0 (sampling; greedy eval is separate)")
        _check(0 < self.top_p <= 1, "policy.top_p must be in (0, 1]")
        _check(self.max_tokens >= 1 and self.window_k >= 0, "policy.max_tokens must be >= 1 and policy.window_k >= 0")
        _check(self.engine not in ("vllm_http", "openai_http") or bool(self.base_url),
               f"policy.engine={self.engine} needs policy.base_url (e.g. http://localhost:8000/v1)")
        _check(self.max_batch is None or self.max_batch >= 1, "policy.max_batch must be >= 1 or null (all active slots)")
        _check(self.action_constraint == "none" or self.action_format == "whole" or self.action_format.startswith("tag:"),
               "policy.action_constraint=admissible renders actions in the format: use action_format 'whole' or 'tag:NAME'")


@dataclass(frozen=True)
class HarnessConfig:
    """``rollout.harness``: play episodes with an external agent program through the recording
    proxy (``agentrl.rollout.harness``). ``command`` is its argv (``{python}`` = this
    interpreter); ``timeout_s`` the per-episode deadline in seconds; ``max_parallel`` harnesses
    run at once; ``mode`` the proxy's prompt continuation (tito | retokenize | strict)."""

    command: tuple[str, ...]
    timeout_s: float = 300.0
    max_parallel: int = 8
    mode: Literal["tito", "retokenize", "strict"] = "tito"

    def __post_init__(self) -> None:
        _check(len(self.command) > 0, "rollout.harness.command must name a program, e.g. ['{python}', 'agent.py']")
        _check(self.timeout_s > 0 and self.max_parallel >= 1, "rollout.harness.timeout_s must be > 0 and max_parallel >= 1")


@dataclass(frozen=True)
class TreeConfig:
    """``rollout.tree``: tree-structured sampling (``agentrl.rollout.tree`` / ``reverse``).

    Tree-GRPO (``rollout.sampler: tree``, ALGORITHMS.md §7.1, arXiv 2509.21240): ``trees`` (M)
    trees per task, ``rounds`` (L) expansion rounds, ``branches`` (N) new branches per tree per
    round from nodes drawn uniformly with replacement among the root and non-leaf nodes,
    ``leaves`` (K) leaves kept per tree after pruning (null = keep all).
    RTPO (``rollout.sampler: rtpo``, §9.2): branch points every ``stride`` (s) turns from the
    end of each base trajectory, at most ``branch_points`` (B) of them, ``siblings`` (K)
    continuations per branch point including the base's own."""

    trees: int = 4
    rounds: int = 1
    branches: int = 2
    leaves: Optional[int] = None
    stride: int = 1
    siblings: int = 4
    branch_points: int = 2

    def __post_init__(self) -> None:
        _check(self.trees >= 1 and self.rounds >= 0 and self.branches >= 1,
               "rollout.tree.trees and branches must be >= 1, rounds >= 0")
        _check(self.leaves is None or self.leaves >= 1, "rollout.tree.leaves must be >= 1 or null (keep all)")
        _check(self.stride >= 1 and self.branch_points >= 1, "rollout.tree.stride and branch_points must be >= 1")
        _check(self.siblings >= 2, "rollout.tree.siblings must be >= 2 (the base continuation plus >= 1 new one)")


@dataclass(frozen=True)
class RolloutConfig:
    """``rollout``: ``groups_per_iteration`` task instances × ``group_size`` episodes each,
    ``num_workers`` env worker processes, ``step_timeout_s`` seconds per env step; ``harness``
    (optional) plays the episodes with an external agent program instead of the agent loop.
    ``sampler``: ``chain`` (independent episodes), ``tree`` (Tree-GRPO trees: ``tree.trees``
    per task replace ``group_size``) or ``rtpo`` (``group_size`` base trajectories per task,
    each with a sparse reverse tree, updated in reverse-turn rounds); see ``TreeConfig``.
    ``backend``: ``local`` env worker processes (``EnvPool``) or ``ray`` actors (``RayEnvPool``,
    same API; needs the ``ray`` extra)."""

    groups_per_iteration: int = 6
    group_size: int = 4
    num_workers: int = 1
    step_timeout_s: float = 60.0
    harness: Optional[HarnessConfig] = None
    sampler: Literal["chain", "tree", "rtpo"] = "chain"
    tree: TreeConfig = field(default_factory=TreeConfig)
    backend: Literal["local", "ray"] = "local"

    def __post_init__(self) -> None:
        _check(self.sampler == "chain" or self.harness is None, "rollout.sampler tree/rtpo needs the agent loop; "
               "remove rollout.harness or set rollout.sampler: chain")
        _check(self.groups_per_iteration >= 1 and self.group_size >= 1, "rollout.groups_per_iteration and group_size must be >= 1")
        _check(self.num_workers >= 1, "rollout.num_workers must be >= 1")
        _check(self.step_timeout_s > 0, "rollout.step_timeout_s must be > 0 seconds")


@dataclass(frozen=True)
class AlgorithmConfig:
    """``algorithm``: the credit estimator (``agentrl.credit`` registry name) and its keyword
    hyperparameters, validated against the estimator's signature; after validation ``kwargs``
    holds every keyword in effect, defaults included (PITFALLS P4)."""

    estimator: str = "grpo"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateConfig:
    """``update``: the policy-gradient step (``agentrl.update``).

    ``loss`` names a registered policy loss (``ppo_clip``, ``gspo``); ``clip_low`` /
    ``clip_high`` bound the ratio to [1 − clip_low, 1 + clip_high] (DAPO's clip-higher,
    arXiv 2503.14476); ``clip_c`` enables dual-clip (arXiv 1912.09729, > 1). ``epochs``
    passes over each iteration's batch, ``minibatch`` rows per optimizer step (0 = all),
    ``micro_batch`` rows per forward pass (gradient accumulation in between).
    ``aggregation``: token-mean | seq-mean-token-mean | seq-mean-token-sum-norm (Dr.GRPO,
    arXiv 2503.20783, with ``sum_norm_tokens``, defaulting to ``policy.max_tokens``).
    ``kl_coef`` > 0 adds a KL penalty to the frozen reference (``k1`` | ``k2`` | ``k3``).
    ``pack`` puts prefix-consistent turns of one episode into one sequence. ``critic_lr`` and
    ``value_clip`` configure the turn-level critic of turn-PPO.
    """

    loss: str = "ppo_clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_c: Optional[float] = None
    epochs: int = 1
    minibatch: int = 0
    micro_batch: int = 4
    lr: float = 1e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    entropy_coef: float = 0.0
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    sum_norm_tokens: Optional[int] = None
    pack: bool = False
    gradient_checkpointing: bool = False
    critic_lr: float = 1e-5
    value_clip: Optional[float] = None

    def __post_init__(self) -> None:
        _check(0 <= self.clip_low < 1 and self.clip_high >= 0, "update.clip_low must be in [0, 1) and clip_high >= 0")
        _check(self.clip_c is None or self.clip_c > 1, "update.clip_c (dual-clip) must be > 1 or null")
        _check(self.epochs >= 1 and self.micro_batch >= 1 and self.minibatch >= 0,
               "update.epochs and micro_batch must be >= 1, minibatch >= 0 (0 = whole batch)")
        _check(self.lr > 0 and self.critic_lr > 0, "update.lr and critic_lr must be > 0")
        _check(self.weight_decay >= 0 and self.grad_clip >= 0, "update.weight_decay and grad_clip must be >= 0 (grad_clip 0 = off)")
        _check(self.kl_coef >= 0, "update.kl_coef must be >= 0 (0 = no reference model)")
        _check(self.sum_norm_tokens is None or self.sum_norm_tokens >= 1, "update.sum_norm_tokens must be >= 1 or null")
        _check(self.value_clip is None or self.value_clip > 0, "update.value_clip must be > 0 or null")


@dataclass(frozen=True)
class LogConfig:
    """``log``: metrics sinks (``agentrl.log``): rich console line, ``metrics.jsonl`` in the
    run dir, TensorBoard event files, W&B (only when ``wandb_project`` is set)."""

    console: bool = True
    jsonl: bool = True
    tensorboard: bool = False
    wandb_project: Optional[str] = None


@dataclass(frozen=True)
class Config:
    """The whole run: one section per pipeline stage. Build with ``load_config``."""

    env: EnvConfig
    run: RunConfig = field(default_factory=RunConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    log: LogConfig = field(default_factory=LogConfig)


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
        _check(value in args, f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, args))}"
               + _hint(value, args))
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


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with each ``"a.b.c=value"`` override set.

    The value is parsed as YAML (safe loader) (``1e-5`` → float, ``true`` → bool, ``null``
    → None, ``[x, y]`` → list, ``"42"`` → str). Missing or null intermediate sections are
    created. Key validity is checked when the dataclasses are built.
    Raises:
        ConfigError: an override without ``=``, with an empty key part, or one that descends
            into a value that is not a mapping.
    """
    out = _deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        _check(bool(sep) and key.strip() != "", f"override {item!r} is not 'key.sub=value' (e.g. update.lr=1e-5)")
        parts = key.strip().split(".")
        _check(all(parts), f"override {item!r} has an empty key part")
        try:
            value = _yaml_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from exc
        node = out
        for i, p in enumerate(parts[:-1]):
            if node.get(p) is None:
                node[p] = {}
            _check(isinstance(node[p], dict), f"override {item!r}: '{'.'.join(parts[:i + 1])}' is not a section")
            node = node[p]
        node[parts[-1]] = value
    return out


def _deepcopy(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return {k: _deepcopy(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_deepcopy(v) for v in raw]
    return raw


# --------------------------------------------------------------------------- validation


def _validate_env_id(env_id: str) -> None:
    env = importlib.import_module("agentrl.env")  # L1, looked up at call time (see module doc)
    try:
        env.validate_id(env_id)
    except KeyError as exc:
        raise ConfigError(f"env.id: {exc.args[0]}") from None


def _resolve_estimator_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``kwargs`` against the estimator's signature and return them with every
    default in effect filled in. Skipped (kwargs returned as given) only when the package
    ``agentrl.credit`` is not installed."""
    try:
        credit = importlib.import_module("agentrl.credit")  # L3, looked up at call time
    except ModuleNotFoundError as exc:
        if exc.name not in ("agentrl.credit",):
            raise
        return dict(kwargs)
    validate = getattr(credit, "validate_estimator_kwargs", None)
    if validate is None:  # a partial install without the registry
        return dict(kwargs)
    try:
        resolved = validate(name, dict(kwargs))
    except KeyError as exc:
        raise ConfigError(f"algorithm.estimator: {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm.kwargs for estimator {name!r}: {exc}") from None
    return _plain(dict(resolved if isinstance(resolved, Mapping) else kwargs))


def validate_config(cfg: Config, *, check_registries: bool = True) -> Config:
    """Check names against the registries and return ``cfg`` with defaults in effect filled.

    Fills ``update.sum_norm_tokens`` (default ``policy.max_tokens``) and the estimator's
    keyword defaults into ``algorithm.kwargs``. With ``check_registries`` (default) the env
    id must be registered (P10) and the estimator kwargs must bind to its signature.
    Raises:
        ConfigError: unknown env id or estimator, or kwargs that do not bind.
    """
    update = cfg.update
    if update.sum_norm_tokens is None:
        update = dataclasses.replace(update, sum_norm_tokens=cfg.policy.max_tokens)
    algorithm = cfg.algorithm
    if check_registries:
        _validate_env_id(cfg.env.id)
        algorithm = dataclasses.replace(algorithm, kwargs=_resolve_estimator_kwargs(algorithm.estimator, algorithm.kwargs))
    return dataclasses.replace(cfg, update=update, algorithm=algorithm)


# --------------------------------------------------------------------------- entry points


def config_from_dict(raw: Mapping[str, Any], overrides: Sequence[str] = (), *, check_registries: bool = True) -> Config:
    """Build a validated ``Config`` from a parsed YAML mapping plus dotted overrides.
    Raises ConfigError (see ``apply_overrides``, ``validate_config``)."""
    return validate_config(_build(Config, apply_overrides(raw or {}, overrides), ""), check_registries=check_registries)


def load_config(path: str | Path, overrides: Sequence[str] = (), *, check_registries: bool = True) -> Config:
    """Read one standalone YAML config, apply ``key.sub=value`` overrides, build and validate.

    Raises:
        ConfigError: missing file, invalid YAML, unknown/misspelt key (with the closest valid
            key), wrong value type, unknown env id or estimator, estimator kwargs that do not
            bind to its signature.
    """
    p = Path(path)
    _check(p.is_file(), f"config file {str(p)!r} does not exist; pass the path of a YAML file (see examples/)")
    try:
        raw = _yaml_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    _check(raw is None or isinstance(raw, Mapping), f"{p}: the top level must be a mapping of sections")
    return config_from_dict(raw or {}, overrides, check_registries=check_registries)


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


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
