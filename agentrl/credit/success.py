"""The check that an estimator's ``success_reward`` is the reward the env pays for a win.

G2PO (ALGORITHMS.md §5.3) recognises a successful episode by exact equality of its return
with ``success_reward`` (10.0, the reference's ALFWorld reward) and values the SUCCESS node
at it. Every env shipped here pays 1.0 on the winning turn (TextWorld, ALFWorld, WebShop at
R = 1.0, HumanEval), so with the default no episode ever reaches SUCCESS: the last turn of a
won episode gets V(next) = 0 (FAIL) and a negative transition term, and training with it
unlearns the winning move (measured: ``studies/learning.py`` on TextWorld cu1, greedy
4.2 % → 0.0 %). The trainer runs this check on every collected batch; it fails loudly
rather than train on credit that ignores every win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.credit.registry import estimator_params
from agentrl.types import Episode, EpisodeStatus

__all__ = ["check_success_reward"]


def check_success_reward(name: str, kwargs: Mapping[str, Any], episodes: Sequence[Episode]) -> None:
    """Refuse a batch in which a won episode's return is not the estimator's ``success_reward``.

    Only estimators with a ``success_reward`` hyperparameter are checked (``g2po``); others
    return at once. Episodes that failed (status not ok) or have an unscored turn are skipped.

    Args:
        name: registered estimator name. kwargs: its ``algorithm.kwargs`` (the default
            ``success_reward`` applies when absent).
        episodes: the iteration's episodes; won = ``Episode.success`` (``info["won"]`` on
            the last turn).
    Raises:
        ValueError: a won episode returns R != ``success_reward``; the message names R and
            the override that fixes it (``algorithm.kwargs.success_reward=R``).
    """
    params = estimator_params(name)
    if "success_reward" not in params:
        return
    target = float(kwargs.get("success_reward", params["success_reward"]))
    wins = sorted({ep.return_ for ep in episodes
                   if ep.success and ep.status == EpisodeStatus.OK and ep.return_ is not None})
    bad = [r for r in wins if r != target]
    if bad:
        raise ValueError(f"{name}: won episodes return {', '.join(f'{r:g}' for r in bad[:3])} but "
                         f"success_reward is {target:g}: no episode would reach the SUCCESS node (exact equality, "
                         f"ALGORITHMS.md §5.3) and every winning turn would be valued as a failure; set "
                         f"algorithm.kwargs.success_reward={bad[0]:g} (the env's reward for a win)")
