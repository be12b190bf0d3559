"""Evaluation on a fixed held-out panel: success rate with confidence intervals.

The panel is explicit and hashed (``agentrl.env.panels``): ``n`` tasks of the env's eval
split, env seeds ``0 .. n-1`` (the env maps a seed to a task of the split it was built
with, so train and eval tasks are disjoint by construction of the split). Every number is
reported with the panel's sha256, so two results compare only when the hashes match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from agentrl.config import Config
from agentrl.env.panels import Panel, build_panel
from agentrl.llm.base import LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.stats import rollout_stats
from agentrl.types import Episode, EpisodeStatus


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927), as fractions.

    Returns ``(nan, nan)`` for ``n == 0``.
    """
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(values: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (seeded; ``(nan, nan)`` if empty)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


@dataclass(frozen=True)
class EvalResult:
    """Held-out success of one policy on one panel.

    Attributes:
        n: episodes whose status is ok (failed ones are excluded and counted in ``failed``).
        successes: ok episodes that were won.
        success_rate: successes / n.
        wilson: 95 % Wilson interval of the success rate.
        bootstrap: 95 % percentile-bootstrap interval of the success rate.
        mean_return / mean_turns: over ok episodes.
        failed: episodes whose status is not ok.
        greedy: decoding used (greedy or sampled at the policy temperature).
        panel_sha256: hash of the panel the numbers belong to.
    """

    n: int
    successes: int
    success_rate: float
    wilson: tuple[float, float]
    bootstrap: tuple[float, float]
    mean_return: float
    mean_turns: float
    failed: int
    greedy: bool
    panel_sha256: str

    def as_metrics(self, prefix: str = "eval/") -> dict[str, float]:
        mode = "greedy" if self.greedy else "sampled"
        return {f"{prefix}{mode}_success": self.success_rate, f"{prefix}{mode}_ci_low": self.wilson[0],
                f"{prefix}{mode}_ci_high": self.wilson[1], f"{prefix}{mode}_return": self.mean_return,
                f"{prefix}{mode}_turns": self.mean_turns}


def eval_panel(cfg: Config) -> Panel:
    """The panel of ``cfg.env.eval_panel_size`` tasks of ``cfg.env.eval_split`` (seeds 0..n-1)."""
    n = cfg.env.eval_panel_size
    ids = [f"{cfg.env.eval_split}/{i}" for i in range(n)]
    panel = build_panel(f"{cfg.env.id}:{cfg.env.eval_split}", env_id=cfg.env.id, split=cfg.env.eval_split,
                        task_ids=ids, base_seed=0)
    return replace(panel, entries=tuple(replace(e, seed=i) for i, e in enumerate(panel.entries)))


def env_kwargs(cfg: Config, split: str) -> dict:
    """Constructor kwargs of the env for ``split`` (``env.kwargs`` plus ``split`` and
    ``max_turns`` when set)."""
    kw = dict(cfg.env.kwargs)
    if split:
        kw["split"] = split
    kw.setdefault("max_turns", cfg.env.max_turns)
    return kw


def loop_config(cfg: Config) -> LoopConfig:
    """The agent-loop settings of a config (context strategy, action format, turn limit)."""
    p = cfg.policy
    return LoopConfig(context=p.context, window_k=p.window_k, window_history=p.window_history, max_turns=cfg.env.max_turns,
                      action_format=p.action_format, action_constraint=p.action_constraint)


def summarize(episodes: Sequence[Episode], *, greedy: bool, panel_sha256: str) -> EvalResult:
    """``EvalResult`` of finished eval episodes."""
    ok = [e for e in episodes if e.status == EpisodeStatus.OK and e.return_ is not None]
    wins = [float(e.success) for e in ok]
    stats = rollout_stats(episodes)
    return EvalResult(n=len(ok), successes=int(sum(wins)), success_rate=float(np.mean(wins)) if ok else float("nan"),
                      wilson=wilson_interval(int(sum(wins)), len(ok)), bootstrap=bootstrap_interval(wins),
                      mean_return=stats.mean_return, mean_turns=stats.mean_turns,
                      failed=len(episodes) - len(ok), greedy=greedy, panel_sha256=panel_sha256)


def load_eval_policy(cfg: Config, checkpoint: str | Path | None = None):
    """The config's policy, with a checkpoint's trainable weights (LoRA adapters or full
    weights) loaded when ``checkpoint`` is given.

    Returns:
        ``agentrl.llm.policy.Policy``.
    Raises:
        FileNotFoundError: no model / no checkpoint. RuntimeError: the checkpoint does not
            match the config's LoRA settings.
    """
    from agentrl.llm.policy import load_policy
    from agentrl.update.checkpoint import load_weights
    from agentrl.update.lora import inference_state_dict, prepare_policy

    policy = load_policy(cfg.policy)
    if checkpoint is not None:
        policy.model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
        load_weights(checkpoint, policy.model)
        if policy.shares_weights:
            policy.engine.model = policy.model
        else:
            policy.engine.update_weights(inference_state_dict(policy.model), policy.engine.policy_version)
    return policy


def evaluate(engine: LLMClient, renderer: ChatRenderer, cfg: Config, *, greedy: bool = True,
             run_id: str = "", progress: bool = False) -> tuple[EvalResult, list[Episode]]:
    """Play the eval panel once per task and summarise.

    Args:
        engine / renderer: the policy.
        cfg: the run config (env, policy, rollout sections).
        greedy: argmax decoding; otherwise sampled at ``policy.temperature`` with a fixed seed.
    Returns:
        ``(EvalResult, episodes)``.
    """
    panel = eval_panel(cfg)
    sampling = SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                              max_tokens=cfg.policy.max_tokens, seed=cfg.run.seed + 7919, greedy=greedy)
    cc = CollectConfig(env_id=cfg.env.id, n_groups=len(panel.entries), group_size=1, seed=panel.entries[0].seed,
                       loop=loop_config(cfg), sampling=sampling, env_kwargs=env_kwargs(cfg, cfg.env.eval_split),
                       num_workers=cfg.rollout.num_workers, step_timeout_s=cfg.rollout.step_timeout_s,
                       max_batch=cfg.policy.max_batch, run_id=run_id, progress=progress)
    episodes = collect(engine, renderer, cc)
    return summarize(episodes, greedy=greedy, panel_sha256=panel.sha256), episodes
