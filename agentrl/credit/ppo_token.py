"""Token-level PPO GAE with masked whitening — the reference baseline (ALGORITHMS.md §11).

Reference: verl ``compute_gae_advantage_return`` + ``masked_whiten`` (verl-agent
upstream commit 373e6b2). Each row is one response sequence (in agentic PPO every turn
is its own sequence, the outcome score on its last valid token; episodes are not chained
— use ``turn_ppo`` for that). This is the only per-token estimator, so it is a plain
function on token arrays rather than a registered ``TurnTable`` estimator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenGAE:
    """Token-level GAE output, each float64[B, L].

    Attributes:
        advantages: raw GAE advantages A. returns: A + values (critic targets).
        whitened: masked-whitened A (the policy advantage; meaningful where mask = 1,
            0 elsewhere).
    """

    advantages: np.ndarray
    returns: np.ndarray
    whitened: np.ndarray


def token_gae(
    token_rewards: np.ndarray, values: np.ndarray, mask: np.ndarray, *, gamma: float = 1.0, lam: float = 1.0
) -> TokenGAE:
    """GAE over each row's tokens, then whitening over all valid tokens (§11).

    Mask-aware (a deviation from §11's plain recursion, which only matches it for right
    padding): masked tokens inside a row — the observation tokens between the turns of a
    packed multi-turn row — are skipped, so γ and λ decay only over valid tokens (δ_t uses
    the value of the next *valid* token) and a masked token gets advantage 0; a reward placed
    on a masked token is credited to the nearest valid token before it (a reward before the
    row's first valid token has no token to go to and is dropped). With right padding only
    (zero rewards and values there) the result equals §11's.

    Args:
        token_rewards: float[B, L] reward per response token.
        values: float[B, L] critic values (0 at padding).
        mask: {0,1}[B, L], 1 on valid response tokens.
        gamma, lam: GAE γ and λ (verl-agent default 1.0, 1.0).
    Returns:
        ``TokenGAE``.
    Raises:
        ValueError: shapes differ or fewer than 2 valid tokens.
    """
    r, v, m = (np.asarray(x, dtype=np.float64) for x in (token_rewards, values, mask))
    if not (r.shape == v.shape == m.shape and r.ndim == 2):
        raise ValueError(f"token_rewards, values, mask must share one (B, L) shape; got {r.shape}, {v.shape}, {m.shape}")
    n = m.sum()
    if n < 2:
        raise ValueError(f"token_gae needs at least 2 valid tokens for whitening; mask has {int(n)}")
    adv = np.zeros_like(r)
    last, nxt, pending = np.zeros(r.shape[0]), np.zeros(r.shape[0]), np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        valid = m[:, t] > 0
        pending = pending + np.where(valid, 0.0, r[:, t])  # rewards on masked tokens wait for a valid one
        delta = r[:, t] + pending + gamma * nxt - v[:, t]
        last = np.where(valid, delta + gamma * lam * last, last)
        adv[:, t] = np.where(valid, last, 0.0)
        nxt = np.where(valid, v[:, t], nxt)
        pending = np.where(valid, 0.0, pending)
    mu = (adv * m).sum() / (n + 1e-8)
    var = ((adv - mu) ** 2 * m).sum() / (n + 1e-8) * n / (n - 1)
    white = np.where(m > 0, (adv - mu) / np.sqrt(var + 1e-8), 0.0)
    return TokenGAE(adv, np.where(m > 0, adv + v, 0.0), white)
