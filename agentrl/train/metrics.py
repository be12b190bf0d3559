"""One iteration's result (``IterationResult``) and the metrics logged for it
(``iteration_metrics``): rollout statistics, the proxy's fidelity counts, excluded episodes and
dropped groups, advantage statistics, version mixing, update statistics and stage times."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentrl.credit.stats import advantage_stats
from agentrl.credit.versions import version_mixing
from agentrl.rollout.stats import proxy_metrics, rollout_stats
from agentrl.types import TurnTable


@dataclass(frozen=True)
class IterationResult:
    """One iteration's episodes, their TurnTable, advantages (float64[N]), update stats, the step
    scorers' metrics (``{"critic/loss": ...}``), wall seconds per stage (rollout, credit, update)
    and further metrics (the asynchronous stream's ``async/*``)."""

    episodes: list
    table: TurnTable
    advantages: np.ndarray
    stats: list
    scorer_metrics: dict
    seconds: dict
    extra: dict = field(default_factory=dict)


def iteration_metrics(out: IterationResult) -> dict[str, float]:
    """The per-iteration metrics logged to every sink and to the store."""
    m = rollout_stats(out.episodes).as_metrics()
    m.update(proxy_metrics(out.episodes))  # harness episodes: drift rate, segments, forks by cause
    m.update(advantage_stats(out.table, out.advantages).as_metrics())
    if out.table.policy_version is not None:  # comparison groups that mix policy versions (async runs)
        m.update(version_mixing(out.table).as_metrics())
    if out.stats:
        for key in ("loss", "clip_frac", "approx_kl", "entropy", "grad_norm", "kl"):
            m[f"update/{key}"] = float(np.mean([getattr(s, key) for s in out.stats]))
        m["update/steps"] = float(len(out.stats))
    m.update({k: float(v) for k, v in out.scorer_metrics.items()})
    m.update({f"time/{k}_s": v for k, v in out.seconds.items()})
    m.update(out.extra)
    if "proxy/segments_per_episode" in m:  # harness episodes: the proxy's recorded logprobs vs the trainer's recompute
        for key in ("logprob_corr", "logprob_mae"):
            if f"correction/{key}" in m:
                m[f"proxy/{key}"] = m[f"correction/{key}"]
    if "rollout" in out.seconds and "async/wait_s" not in out.extra:  # async: "rollout" is the wait
        gen = sum(t.completion_ids.size for e in out.episodes for t in e.turns)
        m["perf/gen_tokens_per_s"] = gen / max(out.seconds["rollout"], 1e-9)
    return m
