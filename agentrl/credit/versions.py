"""Staleness-aware credit: comparison groups that mix policy versions, and statistics per version.

With asynchronous rollouts (``rollout.max_staleness`` S ≥ 1) the update corrects each token's
ratio for the version that sampled it (``agentrl.update.correction``), but a group baseline
can still compare an episode sampled under version v with one sampled under v − S: the
baseline then mixes two policies' returns. This module measures that and offers the fix.

*Episode version* (``episode_versions``): the oldest ``policy_version`` among an episode's
turns, i.e. the version that started it — the rule the asynchronous stream uses for a
group's staleness (``agentrl.rollout.engines.stream_buffer.group_version``). Under
``rollout.on_weight_update: drain`` every turn of an episode has it; under ``continue`` the
later turns of an episode that ran across a weight update are newer (the stream counts those
episodes as ``async/mixed_version_episodes``; ``adv/groups_span_turn_versions`` below sees them).
One version per episode keeps each episode in one comparison group, which the episode term
needs (its score is one value per episode, ALGORITHMS.md §1.5).

*Comparison groups* (ALGORITHMS.md §0): the episode group (task group, ``group``) and the
step group (task group, exact anchor state: ``(group, anchor_key)``, as GiGPO's §3.2 without
similarity merging). Only eligible rows (``episode_ok & trainable``) enter a statistic (P5,
P6), so only they count here; a group compares something only with ≥ 2 members (episodes for
an episode group, rows for a step group), so only those are counted.

``split_by_version`` (``compute_advantages(..., group_by_version=True)``, config
``algorithm.group_by_version: true``) re-keys ``group`` to (group, episode version): every
estimator whose comparison groups are keyed by the task group (episode term, anchor groups,
HGPO windows, G2PO nodes, GraphGPO graphs, BiPACE clusters) then computes its means and stds
per version, exactly as if each version's episodes were a task group of their own. A version
bucket left with one episode falls under the episode-level singleton rule (§1.5). No torch here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from agentrl.credit import _segments as S
from agentrl.types import TurnTable

__all__ = ["VersionMixing", "episode_versions", "split_by_version", "version_mixing"]

_MAX = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min


def episode_versions(table: TurnTable) -> np.ndarray:
    """int64[N]: each row's episode version, the smallest ``policy_version`` over its episode's rows.

    Raises:
        ValueError: the table has no ``policy_version`` column (``TurnTable.require``).
    """
    table.require(("policy_version",))
    ep, n = S.dense(table.episode)
    oldest = np.full(n, _MAX, dtype=np.int64)
    np.minimum.at(oldest, ep, table.policy_version)
    return oldest[ep]


def split_by_version(table: TurnTable) -> TurnTable:
    """``table`` with ``group`` replaced by a dense int64 code of (group, episode version);
    every other column is unchanged (row order kept).

    Raises:
        ValueError: the table has no ``policy_version`` column.
    """
    code, _ = S.dense(table.group, episode_versions(table))
    return dataclasses.replace(table, group=code)


@dataclass(frozen=True)
class VersionMixing:
    """How many comparison groups of one table mix policy versions (module docstring).

    Attributes:
        groups: episode groups with ≥ 2 eligible episodes (int).
        groups_spanning: those whose episodes have ≥ 2 distinct episode versions.
        groups_spanning_turns: those whose eligible turns have ≥ 2 distinct ``policy_version``
            values (≥ ``groups_spanning``; more only when an episode ran across a weight update).
        anchor_groups: step groups (group, anchor_key) with ≥ 2 eligible rows.
        anchor_groups_spanning: those whose rows come from ≥ 2 episode versions.
        turns: eligible rows (int). turns_spanning: eligible rows in a spanning episode group.
        version_span_max: largest (newest − oldest) turn ``policy_version`` over the eligible
            rows of one counted episode group (0 without any).
    """

    groups: int
    groups_spanning: int
    groups_spanning_turns: int
    anchor_groups: int
    anchor_groups_spanning: int
    turns: int
    turns_spanning: int
    version_span_max: int

    def as_metrics(self, prefix: str = "adv/") -> dict[str, float]:
        """The logged shares (0.0 where there is no group to count) and the largest span::

            groups_span_versions         groups_spanning / groups
            groups_span_turn_versions    groups_spanning_turns / groups
            anchor_groups_span_versions  anchor_groups_spanning / anchor_groups
            turns_in_version_spanning_groups  turns_spanning / turns
            group_version_span_max       version_span_max
        """
        def share(a: int, b: int) -> float:
            return a / b if b else 0.0

        return {f"{prefix}groups_span_versions": share(self.groups_spanning, self.groups),
                f"{prefix}groups_span_turn_versions": share(self.groups_spanning_turns, self.groups),
                f"{prefix}anchor_groups_span_versions": share(self.anchor_groups_spanning, self.anchor_groups),
                f"{prefix}turns_in_version_spanning_groups": share(self.turns_spanning, self.turns),
                f"{prefix}group_version_span_max": float(self.version_span_max)}


def _range(seg: np.ndarray, n: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment (min, max) of int64 ``values`` (int64[n] each)."""
    lo, hi = np.full(n, _MAX, dtype=np.int64), np.full(n, _MIN, dtype=np.int64)
    np.minimum.at(lo, seg, values)
    np.maximum.at(hi, seg, values)
    return lo, hi


def version_mixing(table: TurnTable) -> VersionMixing:
    """``VersionMixing`` of ``table`` over its eligible rows (``episode_ok & trainable``).

    Raises:
        ValueError: the table has no ``policy_version`` column.
    """
    ep_version = episode_versions(table)
    use = S.eligible(table)
    if not use.any():
        return VersionMixing(0, 0, 0, 0, 0, 0, 0, 0)
    group, ep, turn_v, ver = table.group[use], table.episode[use], table.policy_version[use], ep_version[use]
    g, ng = S.dense(group)
    episodes_per_group = np.bincount(_first_of(ep, g), minlength=ng)
    lo, hi = _range(g, ng, ver)
    tlo, thi = _range(g, ng, turn_v)
    compared = episodes_per_group >= 2
    spans = compared & (hi > lo)
    a, na = S.dense(group, table.anchor_key[use])
    alo, ahi = _range(a, na, ver)
    a_compared = np.bincount(a, minlength=na) >= 2
    return VersionMixing(
        groups=int(compared.sum()), groups_spanning=int(spans.sum()),
        groups_spanning_turns=int((compared & (thi > tlo)).sum()),
        anchor_groups=int(a_compared.sum()), anchor_groups_spanning=int((a_compared & (ahi > alo)).sum()),
        turns=int(use.sum()), turns_spanning=int(spans[g].sum()),
        version_span_max=int((thi - tlo)[compared].max(initial=0)),
    )


def _first_of(episode: np.ndarray, group_code: np.ndarray) -> np.ndarray:
    """The group code of each distinct episode once (int64[E]): bincount of it counts episodes per group."""
    _, first = np.unique(episode, return_index=True)
    return group_code[first]
