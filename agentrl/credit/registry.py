"""Estimator registry: ``@register_estimator`` and config-time validation.

An estimator is a pure function ``(table: TurnTable, *, kw-only hyperparameters) ->
float64[N]`` (DESIGN.md, extension points). Its signature *is* its config schema:
``validate_estimator_kwargs`` binds a config's keyword arguments to it before any rollout
starts, so a misspelt estimator or parameter name fails at config-parse time with the
list of valid names (PITFALLS P10 style).
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from agentrl.credit.declarations import CriticHeads, Declarations, SpanAdvantages
from agentrl.credit.versions import split_by_version
from agentrl.registry import Registry, closest
from agentrl.types import TurnTable

EstimatorFn = Callable[..., np.ndarray]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator.

    Attributes:
        name: registry name, e.g. ``"gigpo"``.
        fn: the pure estimator function.
        requires: optional ``TurnTable`` columns it reads (``"hidden"``, ``"value"``, ...).
        params: ``{keyword: default}`` of its hyperparameters, in signature order.
        choices: ``{keyword: allowed values}`` for enumerated (string) hyperparameters.
        update_order: optional ``(table) -> list of int64 row-index arrays``: the groups of
            rows the trainer must update one after another, in this order (RTPO's
            reverse-turn schedule). None: the trainer shuffles rows into minibatches.
        accepts_trees: the estimator scores branching rollouts (a turn with several children:
            Tree-GRPO trees, RTPO's reverse trees). A chain estimator on a tree would depend
            on which branch is stored as a turn's chain (issue 19 item 9); it is refused.
        ranges: ``{keyword: (low, high)}`` closed intervals its numeric hyperparameters must lie
            in (``None`` = unbounded), on top of the shared ``PARAM_RANGES`` convention.
        breakdown: optional ``(table, **every hyperparameter) -> agentrl.credit.breakdown.Breakdown``:
            the named terms the advantage is made of and their comparison groups' statistics
            (``explain_advantages``); None: the estimator shows no breakdown.
        groups_by_task: every comparison group of the estimator lies inside one task group and
            is keyed by the ``group`` column, so ``group_by_version`` (``split_by_version``)
            splits them all by policy version. False for estimators whose baselines are trees,
            branch groups or a critic (Tree-GRPO, RTPO, turn-PPO): the option is refused there.
        declares: what it needs before it runs and what it returns besides one advantage per row
            (a critic, a store query, step scorers, an action format, per-span advantages;
            ``agentrl.credit.declarations``), served by the trainer, the update and the agent loop.
    """

    name: str
    fn: EstimatorFn
    requires: tuple[str, ...]
    params: Mapping[str, Any]
    choices: Mapping[str, tuple] = field(default_factory=dict)
    update_order: Callable[[TurnTable], list] | None = None
    accepts_trees: bool = False
    ranges: Mapping[str, tuple] = field(default_factory=dict)
    breakdown: Callable[..., Any] | None = None
    groups_by_task: bool = True
    declares: Declarations = field(default_factory=Declarations)


#: Keyword arguments of ``compute_advantages`` / ``explain_advantages`` themselves, which no
#: estimator may take as a hyperparameter.
RESERVED_PARAMS = ("group_by_version",)

#: Allowed values of hyperparameters by their conventional name, for every estimator that has
#: one (ALGORITHMS.md): discounts and mixing factors in [0, 1], thresholds and penalties in
#: their range. ``(low, high, low_open)``: ``None`` is unbounded; ``low_open`` excludes ``low``.
PARAM_RANGES: dict[str, tuple] = {
    "gamma": (0.0, 1.0, False), "lam": (0.0, 1.0, False), "beta": (0.0, 1.0, False),
    "similarity_thresh": (0.0, 1.0, False), "tau": (0.0, 2.0, False),  # cosine distance is in [0, 2]
    "eps": (0.0, None, True), "c_inv": (0.0, None, False), "history_length": (0, None, False),
}


def _check_range(name: str, key: str, value: Any, rng: tuple) -> None:
    """Raise ValueError unless ``value`` lies in ``rng`` = ``(low, high[, low_open])``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return
    low, high, low_open = (tuple(rng) + (False,))[:3]
    if (low is None or value > low or (value == low and not low_open)) and (high is None or value <= high):
        return
    where = f"{'(' if low_open else '['}{'-inf' if low is None else low}, {'inf' if high is None else high}]"
    raise ValueError(f"{key}={value!r} is out of range: {key} must be in {where} (estimator {name!r}; "
                     "ALGORITHMS.md has each hyperparameter's meaning)")


_REGISTRY: Registry[EstimatorSpec] = Registry("estimator")


def _signature_params(name: str, fn: EstimatorFn) -> dict[str, Any]:
    sig = inspect.signature(fn)
    ps = list(sig.parameters.values())
    if not ps or ps[0].kind not in (ps[0].POSITIONAL_ONLY, ps[0].POSITIONAL_OR_KEYWORD):
        raise TypeError(f"estimator {name!r}: first parameter must be the positional TurnTable")
    params: dict[str, Any] = {}
    for p in ps[1:]:
        if p.kind is not p.KEYWORD_ONLY or p.default is p.empty:
            raise TypeError(
                f"estimator {name!r}: hyperparameter {p.name!r} must be keyword-only with a default "
                f"(write `def {fn.__name__}(table, *, {p.name}=...)`)"
            )
        params[p.name] = p.default
    return params


def register_estimator(
    name: str, requires: tuple[str, ...] = (), choices: Mapping[str, tuple] | None = None,
    update_order: Callable[[TurnTable], list] | None = None, accepts_trees: bool = False,
    ranges: Mapping[str, tuple] | None = None, breakdown: Callable[..., Any] | None = None,
    groups_by_task: bool = True, *, critic: CriticHeads | None = None, store_query: str | None = None,
    scorers: tuple[str, ...] = (), action_format: str | None = None, spans: SpanAdvantages | None = None,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn`` under ``name``; returns ``fn`` unchanged.

    Args:
        name: unique registry name.
        requires: optional TurnTable columns the estimator reads; checked by
            ``compute_advantages`` with ``TurnTable.require``.
        choices: allowed values of enumerated keyword arguments (checked at validation).
        update_order: see ``EstimatorSpec.update_order``.
        accepts_trees: see ``EstimatorSpec.accepts_trees``.
        ranges: ``{keyword: (low, high)}`` closed intervals (see ``EstimatorSpec.ranges``).
        breakdown: see ``EstimatorSpec.breakdown``; its keywords must be the estimator's.
        groups_by_task: see ``EstimatorSpec.groups_by_task``.
        critic / store_query / scorers / action_format / spans: the declarations
            (``agentrl.credit.declarations.Declarations``): a turn-level critic and its targets, a
            store query, step scorers' columns, the action format it needs, per-span advantages.
    Raises:
        TypeError: the signature is not ``(table, *, kw=default, ...)``, ``breakdown``
            takes other keywords, a hyperparameter is named as one of ``RESERVED_PARAMS``,
            or a declaration of the wrong kind.
        ValueError: ``name`` is already registered, or ``choices`` / ``ranges`` name an unknown keyword.
    """

    def deco(fn: EstimatorFn) -> EstimatorFn:
        params = _signature_params(name, fn)
        reserved = [k for k in params if k in RESERVED_PARAMS]
        if reserved:
            raise TypeError(f"estimator {name!r}: hyperparameter name(s) {reserved} are reserved for "
                            "compute_advantages; rename them")
        ch, rg = dict(choices or {}), dict(ranges or {})
        bad = [k for k in [*ch, *rg] if k not in params]
        if bad:
            raise ValueError(f"estimator {name!r}: choices/ranges given for unknown parameter(s) {bad}")
        if breakdown is not None:
            _check_breakdown(name, breakdown, params)
        declares = Declarations.of(critic, store_query, scorers, action_format, spans, name)
        _REGISTRY.register(name, EstimatorSpec(name, fn, tuple(requires), params, ch, update_order, accepts_trees, rg,
                                               breakdown, groups_by_task, declares))
        return fn

    return deco


def _check_breakdown(name: str, fn: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Raise TypeError unless ``fn`` takes ``(table, *, <the estimator's keywords>)`` (or ``**kw``)."""
    ps = list(inspect.signature(fn).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in ps):
        return
    names = [p.name for p in ps[1:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if sorted(names) != sorted(params):
        raise TypeError(f"estimator {name!r}: its breakdown takes {names}, the estimator {list(params)}; "
                        "give it the estimator's keywords")


def unregister_estimator(name: str) -> EstimatorSpec:
    """Remove the estimator ``name`` from the registry (one registered for a single run, benchmark
    arm or test) and return its spec.

    Raises:
        KeyError: ``name`` is not registered (the message lists the registered names).
    """
    return _REGISTRY.unregister(name)


def get_estimator(name: str) -> EstimatorSpec:
    """The ``EstimatorSpec`` registered as ``name``.

    Raises:
        KeyError: unknown name; the message suggests the closest and lists all names.
    """
    return _REGISTRY.get(name)


def list_estimators() -> list[str]:
    """Sorted names of all registered estimators."""
    return _REGISTRY.names()


def estimator_params(name: str) -> dict[str, Any]:
    """``{hyperparameter: default}`` of estimator ``name`` (signature order).

    Raises:
        KeyError: unknown estimator name.
    """
    return dict(get_estimator(name).params)


def _check_type(name: str, key: str, value: Any, default: Any) -> None:
    if isinstance(default, bool):
        ok = isinstance(value, (bool, np.bool_))
    elif isinstance(default, numbers.Integral):
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif isinstance(default, numbers.Real):
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        raise TypeError(
            f"estimator {name!r}: parameter {key!r} must be a {type(default).__name__} "
            f"(default {default!r}), got {value!r} of type {type(value).__name__}"
        )


def validate_estimator_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check a config's estimator name and hyperparameters without running anything.

    Args:
        name: estimator name.
        kwargs: hyperparameters from the config.
    Returns:
        The full ``{param: value}`` mapping (defaults filled in), to record in the run config.
    Raises:
        KeyError: unknown estimator (lists the valid names).
        TypeError: unknown parameter (lists the valid ones with defaults) or a value of
            the wrong type.
        ValueError: a value outside the parameter's allowed choices or range (``PARAM_RANGES``
            by name, then the estimator's own ``ranges``).
    """
    spec = get_estimator(name)
    unknown = [k for k in kwargs if k not in spec.params]
    if unknown:
        hints = [f"{k!r} (did you mean {closest(k, spec.params)[0]!r}?)" if closest(k, spec.params) else repr(k)
                 for k in unknown]
        valid = ", ".join(f"{k}={v!r}" for k, v in spec.params.items()) or "(none)"
        raise TypeError(f"estimator {name!r} has no parameter(s) {', '.join(hints)}; valid parameters: {valid}")
    for k, v in kwargs.items():
        _check_type(name, k, v, spec.params[k])
        if k in spec.choices and v not in spec.choices[k]:
            raise ValueError(f"estimator {name!r}: {k}={v!r} is not one of {list(spec.choices[k])}")
        rng = spec.ranges.get(k, PARAM_RANGES.get(k))
        if rng is not None:
            _check_range(name, k, v, rng)
    return {**spec.params, **kwargs}


def check_group_by_version(name: str) -> None:
    """Raise ValueError unless estimator ``name`` supports ``group_by_version``
    (``EstimatorSpec.groups_by_task``); KeyError for an unknown name."""
    if not get_estimator(name).groups_by_task:
        ok = ", ".join(n for n in list_estimators() if get_estimator(n).groups_by_task)
        raise ValueError(f"group_by_version splits task groups by policy version, but estimator {name!r} compares "
                         f"within trees, branch groups or against a critic, which it would not split; set "
                         f"algorithm.group_by_version: false, or use one of: {ok}")


def prepare_table(table: TurnTable, name: str, group_by_version: bool) -> TurnTable:
    """The table estimator ``name`` runs on: ``table`` itself, or with ``group_by_version``
    its ``split_by_version`` (``group`` re-keyed to (group, episode version)).

    Raises:
        ValueError: ``group_by_version`` with an estimator that does not support it
            (``check_group_by_version``) or a table without ``policy_version``.
    """
    if not group_by_version:
        return table
    check_group_by_version(name)
    return split_by_version(table)


def compute_advantages(table: TurnTable, name: str, *, group_by_version: bool = False, **kwargs: Any) -> np.ndarray:
    """Run estimator ``name`` on ``table``.

    Args:
        table: the turns (N rows).
        name: registered estimator name.
        group_by_version: compute every group statistic per policy version: the estimator runs
            on ``split_by_version(table)`` (``agentrl.credit.versions``; needs the
            ``policy_version`` column and an estimator with ``groups_by_task``).
        **kwargs: its hyperparameters (validated first).
    Returns:
        float64[N] advantage per turn row (0 for rows of failed episodes and
        non-trainable rows).
    Warns:
        RuntimeWarning: no row of a non-empty ``table`` is trainable, so every advantage is 0
            (``warn_if_untrainable``); the result is the same as without the warning.
    Raises:
        KeyError / TypeError / ValueError: as ``validate_estimator_kwargs``; ValueError when
        the table lacks a required column, or branches under a chain estimator, or
        ``group_by_version`` is refused (``prepare_table``); RuntimeError when the estimator
        returns a wrong shape or a non-finite value.
    """
    validate_estimator_kwargs(name, kwargs)
    spec = get_estimator(name)
    table = prepare_table(table, name, group_by_version)
    table.require(spec.requires)
    if not spec.accepts_trees and is_branching(table):
        raise ValueError(f"estimator {name!r} scores chains, but the table branches (a turn with several children: "
                         f"tree rollouts); use one that accepts trees: {', '.join(tree_estimators())}")
    warn_if_untrainable(table, name, stacklevel=2)  # names the line that called compute_advantages
    out = np.asarray(spec.fn(table, **kwargs))
    if out.shape != (len(table),) or out.dtype != np.float64:
        raise RuntimeError(f"estimator {name!r} returned {out.dtype}{out.shape}; expected float64({len(table)},)")
    if not np.all(np.isfinite(out)):
        raise RuntimeError(f"estimator {name!r} returned non-finite advantages; check rewards/values for NaN")
    return out


def warn_if_untrainable(table: TurnTable, name: str, stacklevel: int = 1) -> bool:
    """Warn (``RuntimeWarning``) when ``table`` has rows and none of them is trainable: every
    estimator then returns all zeros. The usual cause is a table of text-only turns (no token
    ids, e.g. another framework's data), which ``TurnTable.from_episodes`` marks non-trainable.

    Args:
        table: the turns (N rows); ``table.trainable`` bool[N].
        name: the estimator's name, for the message.
        stacklevel: the frame the warning names, counted from the caller of this function
            (1: that caller, 2: its caller), as ``warnings.warn`` counts from its own caller.
    Returns:
        True when it warned.
    """
    n = len(table)
    if n == 0 or np.asarray(table.trainable).any():
        return False
    warnings.warn(f"estimator {name!r}: none of the table's {n} rows is trainable (TurnTable.trainable is all "
                  "False), so every advantage is 0. Rows without token ids (text-only turns, e.g. another "
                  "framework's data) are not trainable by default; to score them, build the table with "
                  "TurnTable.from_episodes(episodes, trainable=[True] * n_turns)",
                  RuntimeWarning, stacklevel=stacklevel + 1)
    return True


def is_branching(table: TurnTable) -> bool:
    """True when some row is the parent of two or more rows (a tree, not a set of chains)."""
    parents = np.asarray(table.parent)
    parents = parents[parents >= 0]
    return bool(parents.size) and int(np.bincount(parents).max()) > 1


def tree_estimators() -> list[str]:
    """Sorted names of the registered estimators that accept trees."""
    return [n for n in list_estimators() if get_estimator(n).accepts_trees]


def update_groups(name: str, table: TurnTable, rows: np.ndarray) -> list[np.ndarray] | None:
    """The estimator's update schedule restricted to the trained ``rows``.

    Args:
        name: estimator name.
        table: the iteration's turns.
        rows: int64[R] table rows that go into the training batch, in batch order.
    Returns:
        None when the estimator has no ``update_order`` (shuffle freely); otherwise a list
        of int64 arrays of *batch positions* (indices into ``rows``), one per update group,
        in the order the trainer must step them; groups with no trained row are dropped.
    """
    spec = get_estimator(name)
    if spec.update_order is None:
        return None
    position = np.full(len(table), -1, dtype=np.int64)
    position[np.asarray(rows, dtype=np.int64)] = np.arange(len(rows))
    groups = [position[np.asarray(g, dtype=np.int64)] for g in spec.update_order(table)]
    return [g[g >= 0] for g in groups if np.any(g >= 0)]
