"""The trainer side's group buffer of asynchronous rollouts (``agentrl.rollout.engines.stream``):
finished episodes filed by group until the group is complete, then taken (oldest first) or
dropped as too stale; and ``StreamBatch``, what one take returns with its ``async/*``
metrics. Pure Python, no processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.types import Episode


def group_version(episodes: list[Episode]) -> int | None:
    """The oldest policy version among the turns of a group (None: no turn at all)."""
    versions = [t.policy_version for e in episodes for t in e.turns]
    return min(versions) if versions else None


class GroupBuffer:
    """Episodes by group id until their group is complete, then taken or dropped.

    Args:
        group_size: episodes per group (G).
    """

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size
        self._groups: dict[int, list[Episode]] = {}

    def expect(self, group_ids) -> None:
        """Register groups that will arrive (counted as in flight until complete)."""
        for g in group_ids:
            self._groups.setdefault(int(g), [])

    def add(self, episode: Episode) -> None:
        """File a finished episode under its group.

        Raises:
            KeyError: its group was never expected (or was already taken/dropped).
        """
        self._groups[episode.group_id].append(episode)

    def _complete(self) -> list[int]:
        return sorted(g for g, eps in self._groups.items() if len(eps) >= self.group_size)

    @property
    def in_flight(self) -> int:
        """Groups expected and not yet complete."""
        return sum(len(eps) < self.group_size for eps in self._groups.values())

    @property
    def pending(self) -> int:
        """Groups neither taken nor dropped (complete or in flight)."""
        return len(self._groups)

    def drop_stale(self, min_version: int) -> list[list[Episode]]:
        """Remove and return the complete groups with a turn older than ``min_version``."""
        stale = [g for g in self._complete() if (v := group_version(self._groups[g])) is not None and v < min_version]
        return [sorted(self._groups.pop(g), key=lambda e: e.episode_id) for g in stale]

    def take(self, n: int) -> list[list[Episode]] | None:
        """Remove and return the ``n`` oldest complete groups (by group id), or None (and keep
        everything) while fewer than ``n`` are complete."""
        ready = self._complete()[:n]
        if len(ready) < n:
            return None
        return [sorted(self._groups.pop(g), key=lambda e: e.episode_id) for g in ready]


@dataclass(frozen=True)
class StreamBatch:
    """What ``EngineStream.take`` returns for one iteration.

    Attributes:
        episodes: the taken groups' episodes, by episode id.
        staleness: per taken group, trainer version − its oldest turn's version (0..S).
        dropped_groups / dropped_episodes: complete groups (episodes) dropped as too stale.
        carried: groups still in flight (they carry over to a later iteration).
        wait_s: seconds the trainer waited for the groups (trainer idle).
        engine_idle_frac: fraction of worker-seconds with no work since the previous take.
        mixed_version_episodes: taken episodes whose turns span more than one version.
    """

    episodes: list[Episode]
    staleness: list[int]
    dropped_groups: int
    dropped_episodes: int
    carried: int
    wait_s: float
    engine_idle_frac: float
    mixed_version_episodes: int = 0

    def as_metrics(self, max_staleness: int) -> dict[str, float]:
        """``async/*`` metrics, with a staleness histogram ``async/staleness_<s>`` for s in 0..S."""
        n = max(len(self.staleness), 1)
        m = {"async/dropped_groups": float(self.dropped_groups), "async/dropped_episodes": float(self.dropped_episodes),
             "async/carried_groups": float(self.carried), "async/wait_s": self.wait_s,
             "async/engine_idle_frac": self.engine_idle_frac,
             "async/staleness_mean": sum(self.staleness) / n, "async/staleness_max": float(max(self.staleness, default=0)),
             "async/mixed_version_episodes": float(self.mixed_version_episodes)}
        m.update({f"async/staleness_{s}": float(self.staleness.count(s)) for s in range(max_staleness + 1)})
        return m
