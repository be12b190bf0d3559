"""turn-PPO: turn-level GAE with a turn-level critic (ALGORITHMS.md §10).

Paper: arXiv 2512.17008 (EACL 2026 Findings). Reference recursion: sail-sg/oat
``PPOMultiTurnLearner.compute_advantages`` (@c1a074c), with truncation made explicit.

Notation (§10.3), per episode with turns 0..T−1::

    V_T = bootstrap_value (last row of the episode; 0 when the column is absent)
    δ_t = r_t + γ · V_{t+1} · (1 − d_t) − V_t          (d_t = terminated)
    A_t = δ_t + γ · λ · (1 − d_t) · A_{t+1}            (A_T = 0)
    return_t = A_t + V_t

``r_t`` is the turn's env reward minus ``c_inv`` on an invalid action (the optional
penalty of §10.3, off by default). Optional whitening over the eligible turns:
``(A − mean)/sqrt(var_unbiased + 1e-8)``.

Columns read: episode, t (int64[N]); reward, value (float64[N]); bootstrap_value
(float64[N], optional; read on each episode's last row); terminated, action_valid,
episode_ok, trainable (bool[N]). Failed-episode and non-trainable rows get advantage 0
(their values still chain the recursion of ok episodes) and are left out of whitening.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.declarations import CriticHeads
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


@dataclass(frozen=True)
class TurnGAE:
    """Turn-level GAE output, aligned with the table rows.

    Attributes:
        advantages: float64[N], un-whitened A_t (0 on non-eligible rows).
        returns: float64[N], critic targets A_t + V_t (all rows).
    """

    advantages: np.ndarray
    returns: np.ndarray


def turn_gae_returns(table: TurnTable, *, gamma: float = 0.99, lam: float = 0.9, c_inv: float = 0.0) -> TurnGAE:
    """Turn-level GAE advantages and critic targets (§10.3).

    Raises:
        ValueError: the table has no ``value`` column, or duplicate (episode, t).
    """
    table.require(["value"])
    st, order = S.canonical(table)
    nxt = S.next_row(st)
    boot = st.bootstrap_value if st.bootstrap_value is not None else np.zeros(len(st))
    v_next = np.where(nxt >= 0, st.value[np.maximum(nxt, 0)], boot)
    live = 1.0 - st.terminated
    reward = st.reward - c_inv * (~st.action_valid)
    delta = reward + gamma * v_next * live - st.value
    adv = S.backward_recursion(delta, gamma * lam * live, nxt, st.t)
    ret = S.uncanon(order, adv + st.value)
    return TurnGAE(S.uncanon(order, np.where(S.eligible(st), adv, 0.0)), ret)


#: The hyperparameters of ``turn_ppo`` that its critic's targets share (``gae_targets``).
GAE_KWARGS = ("gamma", "lam", "c_inv")


def gae_targets(table: TurnTable, kwargs: Mapping) -> tuple[np.ndarray, None]:
    """The critic's target of each row, float64[N, 1]: the turn-level GAE return
    (``turn_gae_returns(table, gamma, lam, c_inv)`` with ``turn_ppo``'s resolved keywords), every
    row (mask None). Declared as ``turn_ppo``'s ``CriticHeads`` targets."""
    shared = {k: v for k, v in kwargs.items() if k in GAE_KWARGS}
    return turn_gae_returns(table, **shared).returns[:, None], None


@register_estimator("turn_ppo", requires=("value",), groups_by_task=False,  # a critic baseline, no group
                    critic=CriticHeads(("value",), gae_targets))
def turn_ppo(
    table: TurnTable, *, gamma: float = 0.99, lam: float = 0.9, whiten: bool = False, c_inv: float = 0.0
) -> np.ndarray:
    """turn-PPO advantage per turn (§10.3).

    Args:
        table: turns with ``value`` (and ``bootstrap_value`` for truncated episodes).
        gamma, lam: GAE γ and λ. whiten: batch whitening over eligible turns.
        c_inv: penalty subtracted from the reward of invalid-action turns.
    Returns:
        float64[N]; 0 on non-eligible rows.
    Raises:
        ValueError: missing ``value``; ``whiten`` with fewer than 2 eligible turns.
    """
    adv = turn_gae_returns(table, gamma=gamma, lam=lam, c_inv=c_inv).advantages
    if not whiten:
        return adv
    e = S.eligible(table)
    if e.sum() < 2:
        raise ValueError("turn_ppo whiten=True needs at least 2 eligible turns in the batch")
    a = adv[e]
    return np.where(e, (adv - a.mean()) / np.sqrt(a.var(ddof=1) + 1e-8), 0.0)
