"""Step scorers: torch passes after the rollout that fill ``TurnTable`` columns before the
estimator runs (DESIGN.md, extension points; issue 47).

An estimator names the scorers it reads in ``register_estimator(scorers=(...))`` (a declared
``critic`` adds ``"critic"``); the trainer builds them once per run, and every iteration calls,
in order: ``score`` (after the episodes are stored and the table is built; before the estimator)
→ the estimator → the policy update and weight sync → ``learn`` (the scorer's own training
step, if any). Each scorer is saved into every checkpoint folder and restored on resume. The
trainer never names an estimator or a scorer: it serves the declaration.

Built in: ``"critic"`` (the turn-level critic of turn-PPO and HiPER, ``agentrl.train.critic``).
Built in as well: ``"prm"`` (OPRL's implicit process reward model, ``agentrl.train.prm``) and
``"hindsight"`` (StepOPSD's hindsight teacher, ``agentrl.train.hindsight``).
Your own: ``register_scorer("name", factory)`` with ``factory(ctx: ScorerContext) -> StepScorer``,
then ``@register_estimator(..., scorers=("name",), requires=("my_column",))`` on an estimator
that reads ``table.scores["my_column"]`` (``examples/custom_scorer.py``). A scorer with options
registers a frozen dataclass (``register_scorer(name, factory, options=MyOptions)``); the config's
``algorithm.scorers.<name>`` mapping is checked against it when the config is checked (every
default filled in) and the factory gets the built options as ``ctx.options``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

from agentrl.config import Config, ConfigError, _plain
from agentrl.config.loader import build_options
from agentrl.credit import EstimatorSpec, get_estimator
from agentrl.registry import Registry
from agentrl.types import Episode, TurnTable

if TYPE_CHECKING:  # the registry stays importable without torch (agentrl.train.checks reads it)
    from agentrl.llm.policy import Policy

__all__ = ["StepScorer", "ScorerContext", "register_scorer", "unregister_scorer", "get_scorer", "list_scorers",
           "make_scorers", "check_declared_scorers", "resolve_scorer_options"]


class StepScorer(Protocol):
    """What the trainer calls on a step scorer (see the module docstring for the order)."""

    def score(self, table: TurnTable, episodes: list[Episode], iteration: int) -> TurnTable:
        """``table`` (N rows of ``episodes``' turns, rank 0) with this scorer's columns filled: value
        columns or ``TurnTable.scores`` entries (float64, leading dimension N). ``iteration``: 0-based."""

    def learn(self, table: TurnTable, advantages: np.ndarray, episodes: list[Episode],
              iteration: int) -> dict[str, float]:
        """The scorer's own step after the policy update (``advantages``: float64[N], the
        estimator's output); returns metrics to log (``{"name/key": value}``; {} when none)."""

    def save(self, folder: Path) -> None:
        """Write its state into the checkpoint ``folder`` (``iter_<k>``); a file of its own name."""

    def load(self, folder: Path) -> bool:
        """Restore ``save``'s state from checkpoint ``folder``; False when the folder has none."""


@dataclass(frozen=True)
class ScorerContext:
    """What a scorer factory gets: the run's resolved ``cfg``, the trained ``policy`` (its model,
    renderer and pad id) and the ``estimator``'s spec (its declarations and hyperparameters are
    ``estimator.declares`` and ``cfg.algorithm.kwargs``); ``options``: the scorer's options built
    from ``cfg.algorithm.scorers[<name>]`` (None for a scorer that registered none)."""

    cfg: Config
    policy: "Policy"
    estimator: EstimatorSpec
    options: Any = None


ScorerFactory = Callable[[ScorerContext], StepScorer]

def _critic(ctx: ScorerContext) -> StepScorer:
    """The built-in ``critic`` (``agentrl.train.critic.CriticScorer``; torch, imported when built)."""
    from agentrl.train.critic import CriticScorer

    return CriticScorer.build(ctx)


def _prm(ctx: ScorerContext) -> StepScorer:
    """The built-in ``prm`` (OPRL, ``agentrl.train.prm.PRMScorer``; torch, imported when built)."""
    from agentrl.train.prm import PRMScorer

    return PRMScorer.build(ctx)


def _hindsight(ctx: ScorerContext) -> StepScorer:
    """The built-in ``hindsight`` (StepOPSD, ``agentrl.train.hindsight.HindsightScorer``)."""
    from agentrl.train.hindsight import HindsightScorer

    return HindsightScorer.build(ctx)


_SCORERS: Registry[ScorerFactory] = Registry("step scorer")
_OPTIONS: dict[str, type] = {}


def register_scorer(name: str, factory: ScorerFactory, options: type | None = None) -> ScorerFactory:
    """Register a step scorer ``factory`` under ``name`` (an estimator's ``scorers=`` names it);
    returns ``factory``. ``options``: a frozen dataclass of the scorer's options (defaults for
    every field; range checks in ``__post_init__`` raising ``ConfigError``), built from the config's
    ``algorithm.scorers[name]``; None: the scorer takes none.

    Raises:
        ValueError: ``name`` is already registered. TypeError: ``factory`` is not callable, or
            ``options`` is not a dataclass type.
    """
    if not callable(factory):
        raise TypeError(f"step scorer {name!r}: the factory must be callable as factory(ScorerContext) -> scorer, "
                        f"got {type(factory).__name__}")
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"step scorer {name!r}: options must be a dataclass type, got {options!r}")
    out = _SCORERS.register(name, factory)
    if options is not None:
        _OPTIONS[name] = options
    return out


def unregister_scorer(name: str) -> ScorerFactory:
    """Remove the scorer ``name`` (one registered for a single run or test) and return its factory.

    Raises:
        KeyError: unknown name (lists the registered ones).
    """
    factory = _SCORERS.unregister(name)
    _OPTIONS.pop(name, None)
    return factory


def _register_builtins() -> None:
    from agentrl.train.scorer_options import HindsightOptions, PRMOptions

    register_scorer("critic", _critic)
    register_scorer("prm", _prm, options=PRMOptions)
    register_scorer("hindsight", _hindsight, options=HindsightOptions)


_register_builtins()


def get_scorer(name: str) -> ScorerFactory:
    """The factory registered as ``name``.

    Raises:
        KeyError: unknown name (suggests the closest, lists all).
    """
    return _SCORERS.get(name)


def list_scorers() -> list[str]:
    """Sorted names of the registered step scorers."""
    return _SCORERS.names()


def check_declared_scorers(estimator: str) -> None:
    """Raise ConfigError (naming the estimator, the scorer and the registered ones) when the
    estimator declares a step scorer nobody registered; KeyError for an unknown estimator."""
    missing = [s for s in get_estimator(estimator).declares.scorers if s not in _SCORERS.names()]
    if missing:
        raise ConfigError(f"algorithm.estimator {estimator!r} declares step scorer(s) {missing} that are not registered "
                          f"(registered: {', '.join(_SCORERS.names())}); register them with agentrl.train.scorers."
                          "register_scorer before the run starts")


def resolve_scorer_options(estimator: str, raw: Mapping[str, Any]) -> dict[str, dict]:
    """``algorithm.scorers`` checked against the options of the scorers ``estimator`` declares and
    returned with every default filled in (plain dicts; a declared scorer with options always
    gets its entry, so config.yaml records the values in effect — PITFALLS P4).

    Raises:
        ConfigError: an entry for a scorer the estimator does not declare or that takes no
            options; an unknown option, a wrong type or a value out of range.
    """
    declared = get_estimator(estimator).declares.scorers
    raw = dict(raw or {})
    for name in raw:
        if name not in declared or name not in _OPTIONS:
            takes = [s for s in declared if s in _OPTIONS]
            raise ConfigError(f"algorithm.scorers.{name}: estimator {estimator!r} declares no step scorer {name!r} that "
                              f"takes options (its scorers with options: {', '.join(takes) or 'none'})")
    return {name: _plain(build_options(_OPTIONS[name], raw.get(name), f"algorithm.scorers.{name}"))
            for name in declared if name in _OPTIONS}


def scorer_options(cfg: Config, name: str) -> Any:
    """The built options of scorer ``name`` from ``cfg.algorithm.scorers`` (None when it takes none).

    Raises:
        ConfigError: as ``resolve_scorer_options``.
    """
    cls = _OPTIONS.get(name)
    if cls is None:
        return None
    return build_options(cls, dict(cfg.algorithm.scorers or {}).get(name), f"algorithm.scorers.{name}")


def make_scorers(cfg: Config, policy: "Policy") -> list[StepScorer]:
    """The step scorers ``cfg.algorithm.estimator`` declares, built in declaration order ([] for
    an estimator that declares none).

    Raises:
        KeyError: the estimator names a scorer nobody registered (lists the registered ones).
        TypeError: a factory returned something that is not a ``StepScorer``.
    """
    spec = get_estimator(cfg.algorithm.estimator)
    built = []
    for name in spec.declares.scorers:
        scorer = get_scorer(name)(ScorerContext(cfg, policy, spec, scorer_options(cfg, name)))
        missing = [m for m in ("score", "learn", "save", "load") if not callable(getattr(scorer, m, None))]
        if missing:
            raise TypeError(f"step scorer {name!r}: its factory returned {type(scorer).__name__}, which lacks "
                            f"{missing}; return an object with score, learn, save and load (StepScorer)")
        built.append(scorer)
    return built
