"""Per-hyperparameter schedules of an estimator's ``algorithm.kwargs`` (``algorithm.schedule``).

``algorithm.schedule: {lambda_mix: {to: 0.0, iterations: 50}}`` moves ``lambda_mix`` linearly from
its ``algorithm.kwargs`` value at iteration 0 to ``to`` at iteration ``iterations`` and keeps it
there (StepOPSD's λ_mix decay, ALGORITHMS.md §18.4, decision D-18d). The trainer passes the
values in effect to the estimator and its step scorers, so it never branches on an estimator's
name. Layer L0: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.config.errors import ConfigError

__all__ = ["SCHEDULE_KEYS", "check_schedule", "scheduled_kwargs"]

#: the keys of one schedule: ``to`` (the final value) and ``iterations`` (when it is reached, ≥ 1).
SCHEDULE_KEYS = ("to", "iterations")


def check_schedule(schedule: Mapping[str, Any], kwargs: Mapping[str, Any], estimator: str) -> dict[str, dict]:
    """``schedule`` validated against the estimator's resolved ``kwargs`` and returned as plain
    dicts ``{name: {"to": float, "iterations": int}}``.

    Raises:
        ConfigError: a scheduled name that is not a numeric keyword of the estimator, a schedule
            that is not a mapping of exactly ``to`` and ``iterations``, ``iterations`` < 1.
    """
    out = {}
    for name, spec in dict(schedule or {}).items():
        key = f"algorithm.schedule.{name}"
        value = kwargs.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            numeric = sorted(k for k, v in kwargs.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
            raise ConfigError(f"{key}: estimator {estimator!r} has no numeric keyword {name!r} to schedule "
                              f"(numeric keywords: {', '.join(numeric) or 'none'})")
        if not isinstance(spec, Mapping) or set(spec) != set(SCHEDULE_KEYS):
            raise ConfigError(f"{key}: expected a mapping with exactly the keys {list(SCHEDULE_KEYS)} (e.g. "
                              f"{{to: 0.0, iterations: 50}}), got {spec!r}")
        to, iters = spec["to"], spec["iterations"]
        if isinstance(to, bool) or not isinstance(to, (int, float)):
            raise ConfigError(f"{key}.to: expected a number, got {to!r}")
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
            raise ConfigError(f"{key}.iterations: expected an int >= 1 (the iteration at which `to` is reached), "
                              f"got {iters!r}")
        out[str(name)] = {"to": float(to), "iterations": int(iters)}
    return out


def scheduled_kwargs(kwargs: Mapping[str, Any], schedule: Mapping[str, Mapping[str, Any]],
                     iteration: int) -> dict[str, Any]:
    """``kwargs`` with every scheduled value at 0-based ``iteration``:
    ``start + (to − start) · min(1, iteration / iterations)`` (start = the ``kwargs`` value).
    Unscheduled values are returned unchanged. E.g. ``lambda_mix`` 0.2 → 0 over 50 iterations
    gives 0.2, 0.1, 0 and 0 at iterations 0, 25, 50 and 80 (ALGORITHMS.md §18.7)."""
    out = dict(kwargs)
    for name, spec in schedule.items():
        start = float(kwargs[name])
        frac = min(1.0, max(0, int(iteration)) / int(spec["iterations"]))
        out[name] = start + (float(spec["to"]) - start) * frac
    return out
