"""StepOPSD's hindsight teacher as the step scorer ``"hindsight"`` (arXiv 2605.27140; ALGORITHMS.md
§18.3): per turn, the token gaps Δ = log π_T(z | hindsight context) − log π_S(z | context) on the
scored segment, for the ``stepopsd`` estimator to reweight GRPO's advantage with.

* **Teacher** (``teacher``): ``stale`` (the paper) — a third LoRA adapter (``"teacher"``) holding
  a bit-exact copy of the policy adapter, refreshed at every iteration that is a multiple of
  ``teacher_refresh`` (at iteration 0 the initial policy) and saved with every checkpoint; or
  ``current`` (RLSD's choice, D-18e) — the policy's own weights.
* **Student** π_S: the stored behaviour log-probs of the turn (the policy that sampled it); the
  teacher is scored at the same temperature (``policy.temperature``), so Δ is a context effect.
* **Teacher context** (D-18c): the turn's stored prompt, decoded, with the hindsight block as the
  first lines of its system message (a new system message when it has none), re-tokenised as a
  scoring context only; then the stored completion ids, teacher-forced (invariant 1: training
  tokens are never re-tokenised). Cut from the left to ``max_prompt_tokens``. The block::

      [Hindsight, shown only for training]
      Outcome of this attempt: SUCCESS            (or FAILURE)
      A successful attempt at the same task took these actions:   <- failures with a successful sibling
      1. <sibling's action at t = 0>
      ...

  The sibling is the successful ok episode of the group with the smallest episode id; at most
  ``max_hindsight_actions`` lines. Success: EpReward > ``success_threshold``.
* **Scored tokens** (``segment``): ``action_only`` — the completion tokens of the parsed action
  (``policy.action_format``'s tag content; the whole completion when the response has none) — or
  ``completion``.
* **Rows scored**: only rows whose GRPO advantage (the estimator's ``mode``, ``stats_over``,
  ``c_inv``) is non-zero; while λ (``lambda_mix`` after ``algorithm.schedule``) is 0, none (no
  teacher forward at all).

The columns: ``table.scores["gap"]`` float64[N, L], row i's Δ left-aligned and NaN after them (an
all-NaN row was not scored: the estimator gives it W = 1), and ``scores["gap_span"]`` float64[N, 2],
the scored tokens' completion range ``[start, end)`` (NaN where not scored; the token granularity
lays Δ's weights there). 1 no-grad teacher forward per scored row.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np
import torch

from agentrl.config import Config, ConfigError
from agentrl.config.schedule import scheduled_kwargs
from agentrl.credit import compute_advantages
from agentrl.rollout.parsing import parse_format
from agentrl.train.adapters import (POLICY_ADAPTER, add_adapter, copy_adapter, named_adapter_parameters, row_logprobs,
                                    turns_batch, use_adapter)
from agentrl.train.scorer_options import HindsightOptions
from agentrl.types import Episode, Message, Turn, TurnTable

__all__ = ["HindsightScorer", "GAP_COLUMN", "SPAN_COLUMN", "TEACHER_FILE", "hindsight_block", "teacher_prompt", "scored_tokens"]

GAP_COLUMN = "gap"
#: each scored row's completion-token range [start, end) (float64[N, 2], NaN where not scored), for
#: StepOPSD's token granularity (``agentrl.credit.stepopsd.SPAN_COLUMN``)
SPAN_COLUMN = "gap_span"
TEACHER_FILE = "hindsight_teacher.pt"
ADAPTER = "teacher"
HEADER = "[Hindsight, shown only for training]"
_MARK = "\x00HINDSIGHT\x00"
_GRPO_KEYS = ("mode", "stats_over", "c_inv", "eps")


def hindsight_block(success: bool, sibling_actions: list[str] | None, max_actions: int = 30) -> str:
    """The hindsight block (module docstring): the outcome line, and for a failure with a
    successful sibling its first ``max_actions`` actions, numbered from 1."""
    lines = [HEADER, f"Outcome of this attempt: {'SUCCESS' if success else 'FAILURE'}"]
    if not success and sibling_actions:
        lines.append("A successful attempt at the same task took these actions:")
        lines += [f"{i}. {a}" for i, a in enumerate(sibling_actions[:max_actions], 1)]
    return "\n".join(lines)


def teacher_prompt(renderer, prompt_ids: np.ndarray, block: str, max_tokens: int | None = None) -> np.ndarray:
    """int32[P'] ids of the teacher's context: the stored prompt decoded, ``block`` inserted as the
    first lines of its system message (or a new system message first), re-tokenised, cut from the
    left to ``max_tokens`` (None = no cut)."""
    text = renderer.tokenizer.decode([int(i) for i in prompt_ids], skip_special_tokens=False)
    probe = renderer.render_text([Message("system", _MARK)], add_generation_prompt=False)
    head = probe[:probe.index(_MARK)]
    if head and text.startswith(head):  # the prompt opens with a system message: the block goes first in it
        new = head + block + "\n" + text[len(head):]
    else:
        new = probe.replace(_MARK, block) + text
    ids = renderer.encode(new)
    return ids[-max_tokens:] if max_tokens is not None and ids.size > max_tokens else ids


def scored_tokens(renderer, turn: Turn, segment: str, pattern) -> np.ndarray:
    """bool[C]: the completion tokens of ``turn`` that are scored (``segment`` ``completion``: all;
    ``action_only``: those of the action the format's ``pattern`` finds, all when it finds none or
    there is no pattern's group span)."""
    c = turn.completion_ids.size
    mask = np.ones(c, dtype=bool)
    if segment == "completion" or pattern is None or c == 0:
        return mask
    m = pattern.search(renderer.completion_text(turn.completion_ids))
    if m is None:
        return mask
    span = renderer.token_spans(turn.completion_ids, [(m.start(1), m.end(1))])[0]
    if span is None or span[1] <= span[0]:
        return mask
    mask[:] = False
    mask[span[0]:span[1]] = True
    return mask


class HindsightScorer:
    """The step scorer ``"hindsight"`` (module docstring); build it with ``HindsightScorer.build``."""

    def __init__(self, model: torch.nn.Module, renderer, pad_id: int, cfg: Config, opts: HindsightOptions,
                 max_context: int | None = None) -> None:
        self.model, self.renderer, self.pad_id, self.cfg, self.opts = model, renderer, pad_id, cfg, opts
        self.micro_batch = opts.micro_batch or cfg.update.micro_batch
        self.pattern = parse_format(cfg.policy.action_format).pattern
        self.max_context = max_context
        try:
            self.params = (add_adapter(model, ADAPTER, "StepOPSD's stale teacher (step scorer 'hindsight')")
                           if opts.teacher == "stale" else [])
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or set algorithm.scorers.hindsight.teacher: current (the policy's own "
                              "weights as the teacher)") from None
        self.refreshed_at: int | None = None
        self._metrics: dict[str, float] = {}

    @classmethod
    def build(cls, ctx) -> "HindsightScorer":
        """From a ``ScorerContext``. Raises ConfigError: ``teacher: stale`` on a fully fine-tuned
        policy (the snapshot is a LoRA adapter; use ``teacher: current`` or set ``policy.lora``)."""
        opts = ctx.options if ctx.options is not None else HindsightOptions()
        engine = getattr(ctx.policy, "engine", None)
        return cls(ctx.policy.model, ctx.policy.renderer, ctx.policy.pad_id, ctx.cfg, opts,
                   getattr(engine, "max_context", None))

    def _lambda(self, iteration: int) -> float:
        kw = scheduled_kwargs(self.cfg.algorithm.kwargs, self.cfg.algorithm.schedule, iteration)
        return float(kw.get("lambda_mix", 0.0))

    def _refresh(self, iteration: int) -> None:
        if self.opts.teacher == "stale" and (self.refreshed_at is None or iteration % self.opts.teacher_refresh == 0):
            copy_adapter(self.model, POLICY_ADAPTER, ADAPTER)
            self.refreshed_at = iteration

    def score(self, table: TurnTable, episodes: list[Episode], iteration: int) -> TurnTable:
        """``table`` with ``scores["gap"]`` filled (module docstring)."""
        t0 = time.perf_counter()
        self._refresh(iteration)
        lam = self._lambda(iteration)
        kw = {k: v for k, v in self.cfg.algorithm.kwargs.items() if k in _GRPO_KEYS}
        grpo = compute_advantages(table, "grpo", **kw) if len(table) else np.zeros(0)
        rows = np.flatnonzero(table.episode_ok & table.trainable & (grpo != 0.0)) if lam > 0 else np.zeros(0, int)
        turns = {t.turn_id: t for ep in episodes for t in ep.turns}
        gaps = [np.zeros(0)] * len(table)
        spans = np.full((len(table), 2), np.nan)  # each scored row's [start, end) in its completion (token variant)
        if rows.size:
            picked = [turns[int(table.turn_id[i])] for i in rows]
            prompts = [teacher_prompt(self.renderer, t.prompt_ids, self._block(table, turns, int(i)), self._cap(t))
                       for i, t in zip(rows, picked)]
            batch = turns_batch(picked, self.renderer, self.pad_id, prompts=prompts)
            with use_adapter(self.model, ADAPTER if self.opts.teacher == "stale" else POLICY_ADAPTER):
                lp = row_logprobs(self.model, batch, self.micro_batch, self.cfg.update.share_prefix,
                                  temperature=self.cfg.policy.temperature)  # the student's (stored) temperature
            for k, (i, t) in enumerate(zip(rows, picked)):
                c = t.completion_ids.size
                cols = torch.nonzero(batch.loss_mask[k] > 0).flatten()[:c]  # the row's completion, in order
                teacher = lp[k, cols].double().numpy()
                keep = scored_tokens(self.renderer, t, self.opts.segment, self.pattern)  # one contiguous range
                gaps[int(i)] = (teacher - np.asarray(t.completion_logprobs, np.float64))[keep]
                at = np.flatnonzero(keep)
                spans[int(i)] = (at[0], at[-1] + 1) if at.size else np.nan
        width = max([1] + [g.size for g in gaps])
        out = np.full((len(table), width), np.nan)
        for i, g in enumerate(gaps):
            out[i, :g.size] = g
        scored = np.concatenate([g for g in gaps if g.size] or [np.zeros(0)])
        self._metrics = {"hindsight/lambda": lam, "hindsight/rows_scored": float(rows.size),
                         "hindsight/forward_rows_per_turn": rows.size / max(1, len(table)),
                         "hindsight/gap_mean": float(scored.mean()) if scored.size else 0.0,
                         "hindsight/gap_abs_mean": float(np.abs(scored).mean()) if scored.size else 0.0,
                         "hindsight/seconds": time.perf_counter() - t0}
        return dataclasses.replace(table, scores={**table.scores, GAP_COLUMN: out, SPAN_COLUMN: spans})

    def _cap(self, turn: Turn) -> int | None:
        if self.opts.max_prompt_tokens is not None:
            return self.opts.max_prompt_tokens
        return None if self.max_context is None else max(1, int(self.max_context) - int(turn.completion_ids.size))

    def _block(self, table: TurnTable, turns: dict[int, Turn], row: int) -> str:
        """The hindsight block of row ``row``'s episode."""
        ok = table.episode_ok
        ret: dict[int, float] = {}
        for e, r in zip(table.episode[ok & (table.group == table.group[row])].tolist(),
                        table.reward[ok & (table.group == table.group[row])].tolist()):
            ret[e] = ret.get(e, 0.0) + r
        theta = self.opts.success_threshold
        mine = int(table.episode[row])
        success = ret.get(mine, 0.0) > theta
        sibling = min((e for e, r in ret.items() if r > theta and e != mine), default=None)
        actions = None
        if not success and sibling is not None:
            sib = np.flatnonzero(table.episode == sibling)
            sib = sib[np.argsort(table.t[sib], kind="stable")]
            actions = [turns[int(table.turn_id[j])].action for j in sib]
        return hindsight_block(success, actions, self.opts.max_hindsight_actions)

    def learn(self, table: TurnTable, advantages: np.ndarray, episodes: list[Episode],
              iteration: int) -> dict[str, float]:
        """Nothing to learn; this iteration's ``hindsight/*`` metrics (λ, rows scored, forward rows
        per turn, mean Δ and mean |Δ| over the scored tokens, seconds)."""
        return dict(self._metrics)

    def save(self, folder: Path) -> None:
        """The stale teacher's adapter weights and the iteration of its last refresh (``hindsight_teacher.pt``)."""
        if self.opts.teacher != "stale":
            return
        weights = {n: p.detach().cpu().clone() for n, p in named_adapter_parameters(self.model, ADAPTER).items()}
        path = Path(folder) / TEACHER_FILE
        tmp = path.with_suffix(".pt.tmp")
        torch.save({"weights": weights, "refreshed_at": self.refreshed_at}, tmp)
        os.replace(tmp, path)

    def load(self, folder: Path) -> bool:
        """Restore ``save``'s teacher (False without the file: the next iteration takes a fresh snapshot).

        Raises:
            ConfigError: the saved teacher does not match this model's adapter.
        """
        path = Path(folder) / TEACHER_FILE
        if self.opts.teacher != "stale" or not path.is_file():
            return False
        payload = torch.load(path, map_location="cpu", weights_only=False)
        own = named_adapter_parameters(self.model, ADAPTER)
        if payload["weights"].keys() != own.keys():
            raise ConfigError(f"{path} does not match this run's teacher adapter (policy.model / policy.lora changed); "
                              "resume with the settings that wrote it, or start over with --no-resume")
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(payload["weights"][n].to(p.dtype))
        self.refreshed_at = payload["refreshed_at"]
        return True
