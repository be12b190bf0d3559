"""Which episodes and groups of an iteration enter credit assignment and the update.

A failed episode (status not ok: a model call that failed or was cut off, a harness that
exited abnormally, an env error, a timeout; its cause in ``Episode.cause``) is already out of
every statistic: ``TurnTable.episode_ok`` is False on its rows (P5), so it gets advantage 0 and
no gradient, while its turns stay in the store and the viewer. What is left here is its
*group*: a group that lost members compares the survivors among themselves, and with one
survivor a group-relative estimator has no contrast left (GRPO's advantage is 0, a critic's
baseline sees one sample). ``drop_thin_groups`` drops such a group from the update when fewer
than ``rollout.min_group_valid`` of its episodes are ok; a group whose members all
succeeded in running stays whatever its size (``group_size: 1`` runs are untouched).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.types import Episode, EpisodeStatus, TurnTable


@dataclass(frozen=True)
class GroupDrop:
    """What ``drop_thin_groups`` removed.

    Attributes:
        groups: ids of the dropped groups (sorted).
        episodes: ok episodes taken out with them (they were valid but had too few peers).
    """

    groups: tuple[int, ...]
    episodes: int

    def as_metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        """``rollout/groups_dropped`` and ``rollout/episodes_dropped``."""
        return {prefix + "groups_dropped": float(len(self.groups)), prefix + "episodes_dropped": float(self.episodes)}


def drop_thin_groups(table: TurnTable, episodes: Sequence[Episode], min_valid: int) -> tuple[TurnTable, GroupDrop]:
    """Drop from credit and the update every group that lost an episode and kept fewer than
    ``min_valid`` ok ones: their rows get ``episode_ok = False`` (advantage 0, no gradient,
    out of every statistic); the store is not touched.

    Args:
        table: the iteration's turns (N rows); an episode counts as ok when its rows'
            ``episode_ok`` is True (status ok, every reward scored).
        episodes: the iteration's episodes (group membership, including failed episodes
            with no turn at all).
        min_valid: ok episodes a group needs when one of its members failed (≥ 1; 1 keeps
            every group that has an ok episode).
    Returns:
        ``(table, drop)``: the table unchanged when nothing is dropped, else a copy with the
        dropped groups' ``episode_ok`` cleared; ``drop`` says which groups and how many ok
        episodes went with them.
    Raises:
        ValueError: ``min_valid`` < 1.
    """
    if min_valid < 1:
        raise ValueError(f"rollout.min_group_valid must be >= 1, got {min_valid}")
    ok_ids = set(table.episode[table.episode_ok].tolist())
    members: dict[int, list[bool]] = {}
    for e in episodes:
        members.setdefault(int(e.group_id), []).append(int(e.episode_id) in ok_ids)
    dropped = sorted(g for g, oks in members.items() if sum(oks) < len(oks) and sum(oks) < min_valid)
    if not dropped:
        return table, GroupDrop((), 0)
    lost = sum(sum(members[g]) for g in dropped)
    keep = table.episode_ok & ~np.isin(table.group, dropped)
    return dataclasses.replace(table, episode_ok=keep), GroupDrop(tuple(dropped), lost)


def excluded_by_cause(episodes: Sequence[Episode], prefix: str = "rollout/") -> dict[str, float]:
    """``rollout/episodes_excluded`` (episodes whose status is not ok) and
    ``rollout/episodes_excluded/<cause>`` per cause (``Episode.cause``; the status where the
    failure names no cause, e.g. ``env_error``). ``{}`` when every episode is ok."""
    failed = [e for e in episodes if e.status != EpisodeStatus.OK]
    if not failed:
        return {}
    out = {prefix + "episodes_excluded": float(len(failed))}
    for cause, n in sorted(Counter(e.cause or e.status.value for e in failed).items()):
        out[f"{prefix}episodes_excluded/{cause}"] = float(n)
    return out
