"""Evaluation on a fixed held-out panel: success rate with confidence intervals.

The panel (``eval_panel``) is ``env.eval_panel_size`` distinct tasks of ``env.eval_split``,
drawn without replacement from the split's task list (the env's ``list_tasks`` hook,
``agentrl.env.tasks``; ``agentrl.env.panels.draw_panel``); a panel larger than the split is
an error naming the split size. Each task is played once, by its task id (``reset(options=
{"task_id": ...})``), with the env seed of its panel entry. The panel's sha256 covers every
task's content digest (game file, goal, problem, generator spec), so two results compare
only when the hashes match, and a changed data folder shows as a changed hash (a run folder
records its panel in ``eval_panel.json`` and says when it changed, ``record_panel``).

Sampled evaluation draws every (episode, turn) from the explicit evaluation seed
(``run.eval_seed``, ``agentrl eval --seed``; ``CollectConfig.turn_seeds``): the same seed
repeats the draw, another seed draws anew. The seed is in the result (``EvalResult.seed``,
its metrics and JSON) and in every turn of a stored eval episode (``info["eval"]``).

A config with ``rollout.harness`` is evaluated by its harness: each panel task is played by the
harness program through the recording proxy (``AGENTRL_TASK_ID`` names the task), with the
evaluation's decoding forced on every call — what the harness does, not what the built-in
agent loop would; sampled, every call draws from its own seed of (evaluation seed, episode,
call index), so the same seed repeats the draw there too.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from agentrl.config import Config
from agentrl.env.panels import Panel, draw_panel, load_panel, panel_changes, save_panel
from agentrl.env.tasks import tasks_of
from agentrl.llm.base import LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes
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
        seed: the evaluation seed (sampling; recorded for greedy runs too).
        outcomes: ``(task_id, 1.0 won / 0.0 not)`` per ok episode, in panel order (paired
            before/after comparisons, ``compare``).
        label: what was evaluated (``"before"``, ``"iter 4"``, a checkpoint path), or ``""``.
        run_id: the store run id its episodes were written under (``""``: not stored).
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
    seed: int = 0
    outcomes: tuple[tuple[str, float], ...] = field(default=(), repr=False)
    label: str = ""
    run_id: str = ""

    @property
    def mode(self) -> str:
        return "greedy" if self.greedy else "sampled"

    def as_metrics(self, prefix: str = "eval/") -> dict[str, float]:
        mode = self.mode
        return {f"{prefix}{mode}_success": self.success_rate, f"{prefix}{mode}_ci_low": self.wilson[0],
                f"{prefix}{mode}_ci_high": self.wilson[1], f"{prefix}{mode}_return": self.mean_return,
                f"{prefix}{mode}_turns": self.mean_turns, f"{prefix}{mode}_seed": float(self.seed)}

    def to_dict(self) -> dict:
        """JSON-able summary (what ``agentrl eval --out`` writes)."""
        return {"mode": self.mode, "seed": self.seed, "panel_sha256": self.panel_sha256, "n": self.n,
                "successes": self.successes, "success_rate": self.success_rate, "wilson": list(self.wilson),
                "bootstrap": list(self.bootstrap), "mean_return": self.mean_return, "mean_turns": self.mean_turns,
                "failed": self.failed, "label": self.label, "run_id": self.run_id,
                "outcomes": [[t, v] for t, v in self.outcomes]}

    def line(self) -> str:
        """One console line: success, intervals, seed, panel."""
        return (f"{self.mode} success {self.success_rate:.1%} ({self.successes}/{self.n}), 95% Wilson "
                f"[{self.wilson[0]:.1%}, {self.wilson[1]:.1%}], bootstrap [{self.bootstrap[0]:.1%}, "
                f"{self.bootstrap[1]:.1%}], mean turns {self.mean_turns:.2f}, failed {self.failed}, seed {self.seed}, "
                f"panel {self.panel_sha256[:12]}")


@dataclass(frozen=True)
class EvalDifference:
    """``after - before`` on the same panel, paired by task.

    Attributes:
        before / after: success rates. diff: their difference (after − before).
        interval: 95 % paired-bootstrap interval of the difference (tasks resampled).
        n: tasks scored in both. gained / lost: tasks won only after / only before.
    """

    before: float
    after: float
    diff: float
    interval: tuple[float, float]
    n: int
    gained: int
    lost: int

    def line(self) -> str:
        return (f"{self.before:.1%} -> {self.after:.1%}: {self.diff * 100:+.1f} points, paired 95% bootstrap "
                f"[{self.interval[0] * 100:+.1f}, {self.interval[1] * 100:+.1f}] over {self.n} tasks "
                f"({self.gained} newly won, {self.lost} newly lost)")


def compare(before: EvalResult, after: EvalResult, *, n_boot: int = 2000, seed: int = 0) -> EvalDifference:
    """The paired difference ``after - before`` over the tasks both scored.

    Raises:
        ValueError: the results are of different panels (hashes differ).
    """
    if before.panel_sha256 != after.panel_sha256:
        raise ValueError(f"cannot compare results of different panels ({before.panel_sha256[:12]} vs "
                         f"{after.panel_sha256[:12]})")
    a, b = dict(before.outcomes), dict(after.outcomes)
    shared = [t for t in a if t in b]
    d = np.array([b[t] - a[t] for t in shared], dtype=np.float64)
    if d.size:
        rng = np.random.default_rng(seed)
        means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
        interval = (float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)))
    else:
        interval = (float("nan"), float("nan"))
    return EvalDifference(before=before.success_rate, after=after.success_rate,
                          diff=after.success_rate - before.success_rate, interval=interval, n=int(d.size),
                          gained=int((d > 0).sum()), lost=int((d < 0).sum()))


def eval_panel(cfg: Config) -> Panel:
    """The panel of ``cfg.env.eval_panel_size`` distinct tasks of ``cfg.env.eval_split``,
    drawn without replacement from the env's task list (see the module docstring).

    Raises:
        ValueError: the panel is larger than the split (names its size), or an unknown split.
        TypeError: the env does not list its tasks (no ``list_tasks`` hook).
    """
    split = cfg.env.eval_split
    tasks = tasks_of(cfg.env.id, split, env_kwargs(cfg, split))
    return draw_panel(f"{cfg.env.id}:{split}", env_id=cfg.env.id, split=split, tasks=tasks,
                      n=cfg.env.eval_panel_size)


PANEL_FILE = "eval_panel.json"


def record_panel(run_dir: str | Path, panel: Panel) -> str:
    """Keep the run's panel in ``run_dir/eval_panel.json``: written the first time; later, a
    panel with another hash (changed task content, e.g. an edited data folder) is logged as
    a warning, the file keeps the first one. Returns the warning ("" when none)."""
    path = Path(run_dir) / PANEL_FILE
    if not path.is_file():
        save_panel(panel, path)
        return ""
    try:
        old = load_panel(path)
    except (ValueError, KeyError, json.JSONDecodeError) as exc:
        msg = f"{path} is unreadable ({exc}); the eval panel is now {panel.sha256[:12]}"
    else:
        change = panel_changes(old, panel)
        msg = (f"the eval panel changed since this run recorded it in {path}: {change}; results before and "
               "after the change are not comparable") if change else ""
    if msg:
        logging.getLogger(__name__).warning(msg)
    return msg


def env_kwargs(cfg: Config, split: str) -> dict:
    """Constructor kwargs of the env for ``split`` (``env.kwargs`` plus ``split`` and
    ``max_turns`` when set)."""
    kw = dict(cfg.env.kwargs)
    if split:
        kw["split"] = split
    kw.setdefault("max_turns", cfg.env.max_turns)
    return kw


def loop_config(cfg: Config) -> LoopConfig:
    """The agent-loop settings of a config (context strategy, action format, system prompt, turn limit)."""
    p = cfg.policy
    return LoopConfig(context=p.context, window_k=p.window_k, window_history=p.window_history, max_turns=cfg.env.max_turns,
                      action_format=p.action_format, action_constraint=p.action_constraint,
                      hiper_subgoals=tuple(p.hiper_subgoals), system_prompt=p.system_prompt)


def summarize(episodes: Sequence[Episode], *, greedy: bool, panel_sha256: str, seed: int = 0,
              label: str = "", run_id: str = "") -> EvalResult:
    """``EvalResult`` of finished eval episodes."""
    ok = [e for e in episodes if e.status == EpisodeStatus.OK and e.return_ is not None]
    wins = [float(e.success) for e in ok]
    stats = rollout_stats(episodes)
    return EvalResult(n=len(ok), successes=int(sum(wins)), success_rate=float(np.mean(wins)) if ok else float("nan"),
                      wilson=wilson_interval(int(sum(wins)), len(ok)), bootstrap=bootstrap_interval(wins),
                      mean_return=stats.mean_return, mean_turns=stats.mean_turns,
                      failed=len(episodes) - len(ok), greedy=greedy, panel_sha256=panel_sha256, seed=int(seed),
                      outcomes=tuple((e.task_id, float(e.success)) for e in ok), label=label, run_id=run_id)


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
             seed: int | None = None, run_id: str = "", progress: bool = False, store=None,
             panel: Panel | None = None, label: str = "") -> tuple[EvalResult, list[Episode]]:
    """Play the eval panel once per task and summarise.

    Args:
        engine / renderer: the policy.
        cfg: the run config (env, policy, rollout sections).
        greedy: argmax decoding; otherwise sampled at ``policy.temperature``, every turn from
            its own seed derived from ``seed`` (same seed → same episodes).
        seed: the evaluation seed (default ``cfg.run.eval_seed``).
        run_id: stamped on the episodes (and the store run they go to).
        store: a ``TurnStore`` to write the episodes (and the result's metrics) to, under
            ``run_id`` (required then); None stores nothing.
        panel: the panel (default ``eval_panel(cfg)``). label: ``EvalResult.label``.
    Returns:
        ``(EvalResult, episodes)``; every turn's ``info["eval"]`` holds the seed, the mode and
        the panel hash.
    Raises:
        ValueError: as ``eval_panel``; ``store`` without ``run_id``.
    """
    panel = panel if panel is not None else eval_panel(cfg)
    seed = cfg.run.eval_seed if seed is None else int(seed)
    if store is not None and not run_id:
        raise ValueError("evaluate: storing eval episodes needs a run_id")
    sampling = SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                              max_tokens=cfg.policy.max_tokens, seed=seed, greedy=greedy)
    tasks = tuple((e.task_id, e.seed) for e in panel.entries)
    if cfg.rollout.harness is not None:  # the harness itself plays the panel, through the proxy, decoding forced
        h = cfg.rollout.harness
        spec = HarnessSpec.from_config(h, cfg.env.id, env_kwargs(cfg, cfg.env.eval_split))
        episodes = collect_harness_episodes(engine, renderer, spec, n_groups=len(tasks), run_id=run_id,
                                            sampling=sampling, max_parallel=h.max_parallel, mode=h.mode, tasks=tasks,
                                            tool_schemas=h.tool_schemas, force_tools=h.force_tool_call,
                                            resends=h.resends, turn_seeds=not greedy, only_tools=h.only_tools)
    else:
        cc = CollectConfig(env_id=cfg.env.id, n_groups=len(panel.entries), group_size=1, tasks=tasks,
                           turn_seeds=not greedy, loop=loop_config(cfg), sampling=sampling,
                           env_kwargs=env_kwargs(cfg, cfg.env.eval_split), num_workers=cfg.rollout.num_workers,
                           step_timeout_s=cfg.rollout.step_timeout_s, max_observation_chars=cfg.env.max_observation_chars,
                           max_batch=cfg.policy.max_batch, run_id=run_id, progress=progress)
        episodes = collect(engine, renderer, cc)
    stamp = {"seed": seed, "mode": "greedy" if greedy else "sampled", "panel": panel.sha256}
    for ep in episodes:
        for turn in ep.turns:
            turn.info["eval"] = dict(stamp)
    result = summarize(episodes, greedy=greedy, panel_sha256=panel.sha256, seed=seed, label=label,
                       run_id=run_id if store is not None else "")
    if store is not None:
        store.add_episodes(episodes, run_id=run_id)
        store.add_metrics(run_id, 0, result.as_metrics())
    return result, episodes


def fresh_run_id(store, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``, ... when the store already holds that run."""
    runs, name, k = set(store.runs()), base, 2
    while name in runs:
        name, k = f"{base}-{k}", k + 1
    return name
