"""Advantage diagnostics logged every iteration (pure NumPy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.types import TurnTable


@dataclass(frozen=True)
class AdvantageStats:
    """Diagnostics of one advantage vector over the rows that take part in training
    (``episode_ok & trainable``).

    Attributes:
        mean / std: of the advantages (float64; std is the population std).
        zero_frac: fraction of rows whose advantage is exactly 0 (no policy-gradient signal).
        abs_max: largest |advantage|.
        anchor_singleton_rate: fraction of rows whose (group, anchor_key) state occurs once
            — for anchor-grouping estimators (GiGPO, HGPO, ...) the rows with no step-level
            comparison. 1.0 means no state was ever revisited inside a group.
    """

    mean: float
    std: float
    zero_frac: float
    abs_max: float
    anchor_singleton_rate: float

    def as_metrics(self, prefix: str = "adv/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in self.__dict__.items()}


def advantage_stats(table: TurnTable, advantages: np.ndarray) -> AdvantageStats:
    """``AdvantageStats`` of ``advantages`` (float64[N], aligned with ``table`` rows).

    Raises:
        ValueError: ``advantages`` does not have shape (N,).
    """
    adv = np.asarray(advantages, dtype=np.float64)
    if adv.shape != (len(table),):
        raise ValueError(f"advantages has shape {adv.shape}; expected ({len(table)},)")
    use = table.episode_ok & table.trainable
    a = adv[use]
    if a.size == 0:
        nan = float("nan")
        return AdvantageStats(nan, nan, nan, nan, nan)
    keys = table.group[use] * (int(table.anchor_key.max(initial=0)) + 1) + table.anchor_key[use]
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return AdvantageStats(
        mean=float(a.mean()), std=float(a.std()), zero_frac=float(np.mean(a == 0.0)),
        abs_max=float(np.abs(a).max()), anchor_singleton_rate=float(np.mean(counts[inverse] == 1)),
    )
