"""Tree-GRPO, per-node form for a store that keeps each tree node once (ALGORITHMS.md §7).

Paper: Ji et al., "Tree Search for LLM Agent Reinforcement Learning", arXiv 2509.21240.
Reference: AMAP-ML/Tree-GRPO ``verl/trainer/ppo/core_algos.py`` (@90b1709), estimator
``tree`` (``compute_grpo_outcome_advantage`` called with index = uid and index = tree).

Table layout: one row per tree node (one agent turn); ``parent`` is the parent node's row
(-1 for a child of the root prompt). A *sampled leaf* is a row that is nobody's parent
(the store keeps the pruned trees, §7.1); its score is the sum of the rewards on its
root-to-leaf path. Tree id: the ``tree`` column when present, else the root ancestor.

Notation (§7.3), unbiased std, episode-level singleton rule (one leaf → score/(1+eps)):

    inter_ℓ = GN(score) over sampled leaves of the same group (all trees)
    intra_ℓ = GN(score) over sampled leaves of the same tree
    A_ℓ     = inter_ℓ + intra_ℓ
    adv_sum(v) = Σ A_ℓ over sampled leaves in v's subtree (v included)

The registered estimator returns ``adv_sum`` per node (= A_ℓ on a leaf): weighting each
node's tokens once by ``adv_sum`` reproduces the reference gradient, in which every leaf
row repeats its shared prefix (§7.3 equivalence note; the token-mean denominator must
then count the duplicated batch's tokens). ``node_weight="mean"`` gives
``adv_sum / leaf_count``, a different (normalised) estimator.

Columns read: group, parent (int64[N]); reward (float64[N]); episode_ok, trainable
(bool[N]); tree (int64[N], optional). Deviations: exact-tie rule (N4); only eligible
leaves (``episode_ok & trainable``) enter statistics and sums (P5, P6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


@dataclass(frozen=True)
class TreeNodeAdvantages:
    """Per-node Tree-GRPO quantities, all shape (N,) aligned with the table rows.

    Attributes:
        is_leaf: bool, the row is a sampled leaf. score: float64, path reward (leaves).
        leaf_advantage: float64, A_ℓ on eligible leaves, else 0.
        adv_sum: float64, Σ A_ℓ over eligible leaves in the subtree.
        leaf_count: int64, number of eligible leaves in the subtree.
        adv_mean: float64, adv_sum / leaf_count (0 where leaf_count = 0).
    """

    is_leaf: np.ndarray
    score: np.ndarray
    leaf_advantage: np.ndarray
    adv_sum: np.ndarray
    leaf_count: np.ndarray
    adv_mean: np.ndarray


def path_sums(parent: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pointer jumping: (Σ x over each row's root path, root row of each row).

    Raises:
        ValueError: ``parent`` contains a cycle or an out-of-range index.
    """
    n = parent.size
    if n and (parent.max() >= n or parent.min() < -1):
        raise ValueError("TurnTable.parent must hold row indices in [-1, N)")
    total, p, root = x.astype(np.float64).copy(), parent.copy(), np.arange(n)
    for _ in range(int(np.ceil(np.log2(max(n, 2)))) + 2):
        has = p >= 0
        if not has.any():
            return total, root
        q = np.maximum(p, 0)
        total, root, p = np.where(has, total + total[q], total), np.where(has, root[q], root), np.where(has, p[q], -1)
    raise ValueError("TurnTable.parent contains a cycle; tree rows must form a forest")


def subtree_sums(parent: np.ndarray, rows: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """float64[n]: Σ ``values`` of ``rows`` over every ancestor-or-self (one step per depth)."""
    out = np.zeros(n)
    cur, val = rows.copy(), values.astype(np.float64)
    while cur.size:
        out += np.bincount(cur, weights=val, minlength=n)
        up = parent[cur]
        cur, val = up[up >= 0], val[up >= 0]
    return out


def tree_grpo_nodes(table: TurnTable, *, eps: float = S.EPS) -> TreeNodeAdvantages:
    """All per-node Tree-GRPO quantities (§7.2–7.3); see ``TreeNodeAdvantages``."""
    n = len(table)
    score, root = path_sums(table.parent, table.reward)
    tree = table.tree if table.tree is not None else root
    is_leaf = np.ones(n, dtype=bool)
    is_leaf[table.parent[table.parent >= 0]] = False
    leaf = is_leaf & S.eligible(table)
    inter = S.group_norm(score, S.dense(table.group)[0], leaf, leaf, mode="mean_std_norm", keep_singleton=True, eps=eps)
    intra = S.group_norm(score, S.dense(table.group, tree)[0], leaf, leaf, mode="mean_std_norm",
                         keep_singleton=True, eps=eps)
    adv = inter + intra
    rows = np.flatnonzero(leaf)
    adv_sum = subtree_sums(table.parent, rows, adv[rows], n)
    count = np.rint(subtree_sums(table.parent, rows, np.ones(rows.size), n)).astype(np.int64)
    mean = np.where(count > 0, adv_sum / np.maximum(count, 1), 0.0)
    return TreeNodeAdvantages(is_leaf, np.where(is_leaf, score, 0.0), adv, adv_sum, count, mean)


@register_estimator("tree_grpo", choices={"node_weight": ("sum", "mean")}, accepts_trees=True,
                    groups_by_task=False)  # intra-tree groups are keyed by tree
def tree_grpo(table: TurnTable, *, node_weight: str = "sum", eps: float = S.EPS) -> np.ndarray:
    """Tree-GRPO advantage per node row (§7.3).

    Args:
        table: one row per tree node (see module docstring).
        node_weight: ``"sum"`` (adv_sum, reproduces the reference gradient) or ``"mean"``.
        eps: §0.5.
    Returns:
        float64[N]; 0 on non-eligible rows.
    Raises:
        ValueError: bad ``node_weight``, a cycle in ``parent``.
    """
    S.check_choice("node_weight", node_weight, ("sum", "mean"))
    res = tree_grpo_nodes(table, eps=eps)
    out = res.adv_sum if node_weight == "sum" else res.adv_mean
    return np.where(S.eligible(table), out, 0.0)
