"""Judge rewards (``reward.judge``): a judge model grades each ok episode against a rubric, for
tasks no program can verify (LLM-as-judge; the peers' ``verifiers`` rubrics, SkyRL / rLLM reward
models).

Per episode: the rubric template (``JudgeConfig.template``) is filled with ``{task}`` (the
first turn's observation), ``{transcript}`` (``Turn k`` / observation / action per turn, each
observation cut to ``observation_chars``) and ``{env_id}``; the judge (``judge_clients``) answers
JSON under the verdict's schema; the verdict maps to a score in [0, 1] (``pass_fail``: pass 1,
fail 0; ``scale``: score / scale_max). The score × ``weight`` replaces the episode's reward
(``mode: replace``: on its last turn, every other turn 0, the env's rewards kept in
``info["env_reward"]``) or is added to it (``add``). Identical prompts are judged once per
``Judge`` (the cache). ``concurrency`` calls run at once, each with ``timeout_s`` and
``retries`` further attempts after an error, a timeout or a verdict that does not read.

**A judge that fails never scores 0**: the episode becomes ``env_error`` with cause
``judge_error`` (``agentrl.failures``) and is excluded from credit and the update like any
failed episode. The last turn's ``info["judge"]`` keeps the prompt, the reply, the verdict,
the score, the latency in seconds, the attempts and whether it was a cache hit (or the error),
for the viewer.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Sequence

from agentrl.config.reward import JudgeConfig
from agentrl.failures import tag_cause
from agentrl.rollout.judge_clients import JudgeClient
from agentrl.types import Episode, EpisodeStatus

#: ``Turn.info`` key of the judge's record (on the episode's last turn).
INFO_JUDGE = "judge"
#: Verdicts a ``Judge`` keeps (the oldest goes first).
CACHE_SIZE = 100_000


def verdict_schema(cfg: JudgeConfig) -> dict:
    """The JSON schema the judge answers under (``pass_fail`` or ``scale``)."""
    if cfg.verdict == "pass_fail":
        return {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}},
                "required": ["verdict"], "additionalProperties": False}
    return {"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": cfg.scale_max}},
            "required": ["score"], "additionalProperties": False}


def read_verdict(cfg: JudgeConfig, text: str) -> float:
    """The score in [0, 1] of a judge's reply.

    Raises:
        ValueError: the reply is not JSON, or not a verdict under ``verdict_schema(cfg)``.
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"the judge's reply is not JSON: {text[:200]!r}") from None
    if cfg.verdict == "pass_fail":
        v = obj.get("verdict") if isinstance(obj, dict) else None
        if v not in ("pass", "fail"):
            raise ValueError(f"the judge's reply has no verdict 'pass' or 'fail': {text[:200]!r}")
        return 1.0 if v == "pass" else 0.0
    s = obj.get("score") if isinstance(obj, dict) else None
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= cfg.scale_max:
        raise ValueError(f"the judge's reply has no score in [0, {cfg.scale_max}]: {text[:200]!r}")
    return float(s) / cfg.scale_max


def transcript(ep: Episode, observation_chars: int) -> tuple[str, str]:
    """``(task, transcript)`` of an episode for the rubric (see the module docstring)."""
    def cut(text: str) -> str:
        return text if len(text) <= observation_chars else text[:observation_chars] + " [...]"

    task = cut(ep.turns[0].observation) if ep.turns else ""
    lines = [f"Turn {t.t}\nObservation: {cut(t.observation)}\nAction: {t.action}" for t in ep.turns]
    return task, "\n\n".join(lines)


def judge_prompt(cfg: JudgeConfig, ep: Episode) -> str:
    """The rubric filled for ``ep`` (``{task}``, ``{transcript}``, ``{env_id}``; other braces kept)."""
    task, text = transcript(ep, cfg.observation_chars)
    return cfg.template.replace("{task}", task).replace("{env_id}", ep.env_id).replace("{transcript}", text)


@dataclass
class JudgeOutcome:
    """One episode's judgement: ``score`` in [0, 1] (None on error), the reply, the error
    text (""), seconds spent (0 for a cache hit), attempts, and whether it came from the cache."""

    score: float | None
    reply: str = ""
    error: str = ""
    latency_s: float = 0.0
    attempts: int = 0
    cached: bool = False


@dataclass
class JudgeStats:
    """Counts of one ``Judge.apply`` (``as_metrics``: ``judge/*``)."""

    judged: int = 0
    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    seconds: float = 0.0
    scores: list = field(default_factory=list)
    agree: list = field(default_factory=list)  # judge pass == env success, per judged episode

    def as_metrics(self, prefix: str = "judge/") -> dict[str, float]:
        nan = float("nan")
        return {prefix + "episodes": float(self.judged), prefix + "calls": float(self.calls),
                prefix + "cache_hits": float(self.cache_hits), prefix + "errors": float(self.errors),
                prefix + "seconds_per_call": self.seconds / self.calls if self.calls else nan,
                prefix + "mean_score": sum(self.scores) / len(self.scores) if self.scores else nan,
                prefix + "agree_env": sum(self.agree) / len(self.agree) if self.agree else nan}


class Judge:
    """Grade episodes with a judge model (see the module docstring).

    Args:
        cfg: the ``reward.judge`` section.
        client: where verdicts come from (``HTTPJudgeClient``, ``EngineJudgeClient`` or your own
            ``JudgeClient``).
    """

    def __init__(self, cfg: JudgeConfig, client: JudgeClient) -> None:
        self.cfg, self.client, self.schema = cfg, client, verdict_schema(cfg)
        self._cache: dict[str, JudgeOutcome] = {}
        self._pool = ThreadPoolExecutor(max_workers=cfg.concurrency + 1, thread_name_prefix="agentrl-judge")

    def judge(self, prompt: str) -> JudgeOutcome:
        """Judge one prompt: the cache, else up to ``1 + retries`` attempts of ``timeout_s`` each."""
        key = hashlib.sha256(prompt.encode()).hexdigest()
        hit = self._cache.get(key)
        if hit is not None:
            return JudgeOutcome(hit.score, hit.reply, latency_s=0.0, attempts=0, cached=True)
        messages = [{"role": "user", "content": prompt}]
        t0, errors, reply = time.perf_counter(), [], ""
        for attempt in range(1, self.cfg.retries + 2):
            fut = self._pool.submit(self.client.complete, messages, self.schema, self.cfg.max_tokens)
            try:
                reply = fut.result(timeout=self.cfg.timeout_s)
                score = read_verdict(self.cfg, reply)
            except FutureTimeout:
                errors.append(f"attempt {attempt}: no verdict within {self.cfg.timeout_s:g} s")
                continue
            except Exception as exc:  # noqa: BLE001 - every failure is retried, then reported
                errors.append(f"attempt {attempt}: {exc}")
                continue
            out = JudgeOutcome(score, reply, latency_s=time.perf_counter() - t0, attempts=attempt)
            if len(self._cache) >= CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))  # the oldest verdict
            self._cache[key] = out
            return out
        return JudgeOutcome(None, reply, error="; ".join(errors), latency_s=time.perf_counter() - t0,
                            attempts=self.cfg.retries + 1)

    def apply(self, episodes: Sequence[Episode]) -> JudgeStats:
        """Judge every ok episode with a turn (in place): its reward from the verdict, or
        ``env_error`` / ``judge_error`` when the judge failed. Returns the counts."""
        todo = [e for e in episodes if e.status == EpisodeStatus.OK and e.turns]
        prompts = [judge_prompt(self.cfg, e) for e in todo]
        unique = list(dict.fromkeys(prompts))  # a prompt twice in one batch is judged once (a cache hit)
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency, thread_name_prefix="agentrl-judge-ep") as pool:
            first = dict(zip(unique, pool.map(self.judge, unique)))
        stats, seen = JudgeStats(judged=len(todo)), set()
        for ep, prompt in zip(todo, prompts):
            out = first[prompt]
            if prompt in seen:  # judged once in this batch: no further calls or seconds to count
                out = JudgeOutcome(out.score, out.reply, out.error, cached=out.score is not None)
            seen.add(prompt)
            stats.calls += out.attempts
            stats.cache_hits += out.cached
            stats.seconds += out.latency_s
            self._record(ep, prompt, out)
            if out.score is None:
                stats.errors += 1
                continue
            stats.scores.append(out.score)
            stats.agree.append((out.score >= 0.5) == bool(ep.success))
        return stats

    def _record(self, ep: Episode, prompt: str, out: JudgeOutcome) -> None:
        last = ep.turns[-1]
        last.info[INFO_JUDGE] = {"endpoint": self.client.name, "prompt": prompt, "reply": out.reply,
                                 "score": out.score, "latency_s": round(out.latency_s, 4), "attempts": out.attempts,
                                 "cached": out.cached, "mode": self.cfg.mode, "weight": self.cfg.weight,
                                 **({"error": out.error} if out.error else {})}
        if out.score is None:
            ep.status = EpisodeStatus.ENV_ERROR
            ep.error = tag_cause("judge_error", f"the judge ({self.client.name}) gave no verdict: {out.error}")
            return
        reward = self.cfg.weight * out.score
        if self.cfg.mode == "add":
            last.reward = (last.reward or 0.0) + reward
            return
        for t in ep.turns:
            t.info["env_reward"] = t.reward
            t.reward = 0.0
        last.reward = reward

    def close(self) -> None:
        """Stop the worker threads (calls in flight are not waited for) and close the client."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        close = getattr(self.client, "close", None)
        if close is not None:
            close()
