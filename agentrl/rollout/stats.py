"""Per-iteration rollout statistics over a list of episodes (success, return, length, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.log import SampleTurn
from agentrl.types import Episode, EpisodeStatus


@dataclass(frozen=True)
class RolloutStats:
    """Summary of a batch of episodes. Rates are fractions in [0, 1]; means are over the
    episodes whose status is ok (failed episodes are counted in ``failed_rate`` only).

    Attributes:
        episodes: number of episodes. turns: number of turns (all episodes).
        success_rate: fraction of ok episodes with ``success``.
        mean_return: mean episode return of ok episodes (NaN when none).
        mean_turns: mean turns per ok episode.
        invalid_rate: fraction of turns (ok episodes) whose action was invalid.
        failed_rate: fraction of episodes whose status is not ok.
        completion_tokens: total sampled tokens.
    """

    episodes: int
    turns: int
    success_rate: float
    mean_return: float
    mean_turns: float
    invalid_rate: float
    failed_rate: float
    completion_tokens: int

    def as_metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in self.__dict__.items()}


def rollout_stats(episodes: Sequence[Episode]) -> RolloutStats:
    """Compute ``RolloutStats`` (see its docstring) for ``episodes``."""
    ok = [e for e in episodes if e.status == EpisodeStatus.OK and e.return_ is not None]
    turns_ok = [t for e in ok for t in e.turns]
    nan = float("nan")
    return RolloutStats(
        episodes=len(episodes),
        turns=sum(len(e.turns) for e in episodes),
        success_rate=float(np.mean([e.success for e in ok])) if ok else nan,
        mean_return=float(np.mean([e.return_ for e in ok])) if ok else nan,
        mean_turns=float(np.mean([len(e.turns) for e in ok])) if ok else nan,
        invalid_rate=float(np.mean([not t.action_valid for t in turns_ok])) if turns_ok else nan,
        failed_rate=(len(episodes) - len(ok)) / len(episodes) if episodes else nan,
        completion_tokens=int(sum(t.completion_ids.size for e in episodes for t in e.turns)),
    )


def proxy_metrics(episodes: Sequence[Episode], prefix: str = "proxy/") -> dict[str, float]:
    """Per-iteration token-fidelity metrics of episodes recorded through the LLM proxy (the
    turns carry ``info["cause"]`` / ``"fork"`` / ``"segment"`` / ``"token_prefix_ok"``,
    ``agentrl.proxy.calls``); ``{}`` when no turn does (the agent loop's episodes).

    Returns ``{prefix + name: value}`` with ``drift_rate`` (fraction of turns whose measured
    prompt was not a token-prefix extension of the thread, over the turns where it was
    measured; NaN when none was), ``segments_per_episode`` (mean over the proxied episodes),
    ``forks`` (turns that forked a thread) and ``forks/<cause>`` per fork cause; where tools were
    offered, ``tool_markup_unparsed`` (``<tool_call>`` blocks the parser did not turn into a
    call), ``tool_args_invalid`` (calls of a tool not offered or whose arguments break its
    schema) and ``tool_turns_flagged`` (turns with either), summed over the turns.
    """
    turns = [t for e in episodes for t in e.turns if "cause" in t.info]
    if not turns:
        return {}
    measured = [t.info["token_prefix_ok"] for t in turns if t.info.get("token_prefix_ok") is not None]
    proxied = [e for e in episodes if any("cause" in t.info for t in e.turns)]
    segments = [1 + max((t.info["segment"] for t in e.turns if t.info.get("segment") is not None), default=-1)
                for e in proxied]
    forks = [t for t in turns if t.info.get("fork")]
    out = {prefix + "drift_rate": float(np.mean([not ok for ok in measured])) if measured else float("nan"),
           prefix + "segments_per_episode": float(np.mean(segments)), prefix + "forks": float(len(forks))}
    for cause in sorted({str(t.info.get("cause")) for t in forks}):
        out[f"{prefix}forks/{cause}"] = float(sum(str(t.info.get("cause")) == cause for t in forks))
    with_tools = [t for t in turns if "tool_markup_unparsed" in t.info]
    if with_tools:  # tool-call parse fidelity (agentrl.proxy.turn_fields)
        out[prefix + "tool_markup_unparsed"] = float(sum(t.info["tool_markup_unparsed"] for t in with_tools))
        out[prefix + "tool_args_invalid"] = float(sum(t.info["tool_args_invalid"] for t in with_tools))
        out[prefix + "tool_turns_flagged"] = float(sum(bool(t.info.get("tool_call_errors")) for t in with_tools))
    return out


def sample_turns(episodes: Sequence[Episode], turn_ids: np.ndarray | None = None, advantages: np.ndarray | None = None,
                 *, n_episodes: int = 2, max_chars: int = 300) -> list[SampleTurn]:
    """An iteration's sample table: every turn of its best and worst finished episodes by return
    (``n_episodes`` in all; the first ones when fewer), text trimmed to ``max_chars``.

    Args:
        episodes: the iteration's episodes.
        turn_ids / advantages: int64[N] / float64[N] of the iteration's ``TurnTable`` (the
            advantage each turn was trained on); None shows no advantage.
    Returns:
        ``agentrl.log.SampleTurn`` rows, episode by episode, in ``t`` order.
    """
    ok = sorted((e for e in episodes if e.status == EpisodeStatus.OK and e.return_ is not None),
                key=lambda e: (-e.return_, e.episode_id))
    picked = ok[: (n_episodes + 1) // 2] + ok[len(ok) - n_episodes // 2:] if len(ok) > n_episodes else ok
    adv = {} if turn_ids is None or advantages is None else dict(zip(np.asarray(turn_ids).tolist(),
                                                                         np.asarray(advantages).tolist()))

    def trim(text: str) -> str:
        return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
    return [SampleTurn(e.episode_id, t.t, trim(t.observation), trim(t.action), t.reward, adv.get(t.turn_id))
            for e in picked for t in e.turns]
