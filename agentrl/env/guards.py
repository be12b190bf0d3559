"""Checks of every env answer before it leaves an env pool (the TextEnv contract's last lines).

A remote server or a buggy env can answer a step with a reward that is not a number, ``NaN`` or
``inf`` (Python's ``json`` parses ``NaN``/``Infinity``), a reward outside the range the env
declares, or an observation that is not text or is huge (a 50 MB observation slows an episode
to minutes). None of those may crash the run or be scored: ``check_answer`` names the problem,
the pool turns that answer into an error result, and the episode becomes ``env_error`` with the
cause (``agentrl.failures``) and the offending value in its error text. The slot then needs a
reset, as after any env error.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from agentrl.env.contract import META_REWARD_RANGE

#: Default cap on one observation, characters (``env.max_observation_chars``): far above any
#: real env's (ALFWorld/WebShop/TextWorld observations are < 10k), far below what stalls a run.
DEFAULT_MAX_OBSERVATION_CHARS = 1_000_000


def declared_reward_range(env) -> tuple[float, float] | None:
    """The ``(low, high)`` an env declares in ``metadata["agentrl.reward_range"]``, or None.

    Raises:
        ValueError: a declaration that is not two finite numbers with low <= high.
    """
    spec = (getattr(getattr(env, "unwrapped", env), "metadata", None) or {}).get(META_REWARD_RANGE)
    if spec is None:
        return None
    try:
        low, high = (float(x) for x in spec)
    except (TypeError, ValueError):
        raise ValueError(f"metadata[{META_REWARD_RANGE!r}] must be (low, high), got {spec!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"metadata[{META_REWARD_RANGE!r}] must be finite with low <= high, got {spec!r}")
    return low, high


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def reward_value(reward: object, reward_range: tuple[float, float] | None = None) -> float | tuple[str, str]:
    """A good step reward as a float, else ``(cause, message)``: not a real number (a ``str``,
    even ``"1.0"``, ``None``, a ``bool``, a ``Decimal``, an array of more than one value), not
    finite (``NaN``, ``±inf``, an integer too large for a float), or outside ``reward_range``
    (closed). A one-element NumPy array of numbers counts as its element."""
    if isinstance(reward, np.ndarray) and reward.size == 1 and reward.dtype.kind in "iuf":
        reward = reward.reshape(()).item()
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, numbers.Real):
        return "reward_not_numeric", f"the env's reward {_short(reward)} ({type(reward).__name__}) is not a number"
    try:
        value = float(reward)
    except OverflowError:
        return "reward_not_finite", f"the env's reward {_short(reward)} overflows a float; rewards must be finite"
    if not math.isfinite(value):
        return "reward_not_finite", f"the env's reward is {value!r}; rewards must be finite"
    if reward_range is not None and not reward_range[0] <= value <= reward_range[1]:
        return ("reward_out_of_range", f"the env's reward {value!r} is outside its declared range "
                f"[{reward_range[0]:g}, {reward_range[1]:g}] (metadata[{META_REWARD_RANGE!r}])")
    return value


def check_reward(reward: object, reward_range: tuple[float, float] | None = None) -> tuple[str, str] | None:
    """None for a good step reward, else ``(cause, message)`` (``reward_value``)."""
    value = reward_value(reward, reward_range)
    return value if isinstance(value, tuple) else None


def check_observation(obs: object, max_chars: int) -> tuple[str, str] | None:
    """None for a good observation, else ``(cause, message)``: not a ``str``, or longer than
    ``max_chars`` characters (``env.max_observation_chars``)."""
    if not isinstance(obs, str):
        return "observation_not_text", f"the env's observation is {type(obs).__name__} {_short(obs)}, not str"
    if len(obs) > max_chars:
        return ("observation_too_large", f"the env's observation has {len(obs):,} characters, over "
                f"env.max_observation_chars = {max_chars:,}; raise the cap if the env is meant to send that much")
    return None


class EnvAnswerError(ValueError):
    """An env answer that breaks the contract, raised where an env is stepped in process (the
    harness's verifier replay); ``cause`` is one of ``agentrl.failures.FAILURE_CAUSES``."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def require_good_step(env, obs: object, reward: object, max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> float:
    """The step's reward as a float; ``EnvAnswerError`` when the answer breaks the contract
    (``reward_value`` with the env's declared range, ``check_observation``)."""
    value = reward_value(reward, declared_reward_range(env))
    bad = value if isinstance(value, tuple) else check_observation(obs, max_observation_chars)
    if bad:
        raise EnvAnswerError(*bad)
    return value
