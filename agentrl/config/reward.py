"""The ``reward`` config section (``RewardConfig``, ``JudgeConfig``): rewards from a judge model
for tasks no program can verify (``agentrl.rollout.judge``).

Kept apart from ``agentrl.config.sections`` (which embeds it in ``Config``) so each module stays
one screenful of sections. Layer L0: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from agentrl.config.errors import check as _check
from agentrl.config.errors import check_min as _check_min

#: The rubric used when ``reward.judge.rubric`` is not set; ``{task}``, ``{transcript}`` and
#: ``{env_id}`` are filled per episode.
DEFAULT_RUBRIC = (
    "You grade an agent's attempt at a task. Read the task and the transcript of what the agent did and "
    "saw, then decide whether the agent fully accomplished the task.\n\nTask:\n{task}\n\nTranscript:\n"
    "{transcript}\n\nAnswer with JSON only.")


@dataclass(frozen=True)
class JudgeConfig:
    """``reward.judge``: score each ok episode with a judge model (``agentrl.rollout.judge``).

    ``endpoint``: ``policy`` (the policy's own engine, grammar-constrained), ``local:<model>``
    (a second HF engine in this process, a packaged name or folder, grammar-constrained) or an
    OpenAI-compatible base URL ``http(s)://host:port/v1`` (``model`` is sent as the model name,
    the key read from the environment variable ``api_key_env``; the verdict is asked for with
    ``response_format`` json_schema). ``rubric``: the prompt template, with ``{task}`` (the
    episode's first observation), ``{transcript}`` (each turn's observation and action, every
    observation cut to ``observation_chars``) and ``{env_id}``; null = a generic pass/fail rubric.
    ``verdict``: ``pass_fail`` (``{"verdict": "pass" | "fail"}`` → 1 | 0) or ``scale``
    (``{"score": 0..scale_max}`` → score / scale_max). ``mode``: ``replace`` (the judge's score
    × ``weight`` is the episode's reward, on its last turn; the env's rewards are kept in the
    turn's info) or ``add`` (added to the env's reward). ``concurrency`` judge calls at once,
    ``timeout_s`` per call, ``retries`` further attempts after an error or an unreadable verdict,
    ``max_tokens`` per verdict. A judge that still fails flags the episode ``env_error`` with
    cause ``judge_error`` (never scored 0, never trained on). Identical prompts are judged once."""

    endpoint: str = "policy"
    model: str = "judge"
    api_key_env: Optional[str] = None
    rubric: Optional[str] = None
    verdict: Literal["pass_fail", "scale"] = "pass_fail"
    scale_max: int = 10
    mode: Literal["replace", "add"] = "replace"
    weight: float = 1.0
    concurrency: int = 4
    timeout_s: float = 60.0
    retries: int = 2
    max_tokens: int = 32
    observation_chars: int = 1500

    def __post_init__(self) -> None:
        e = self.endpoint
        _check(e == "policy" or (e.startswith("local:") and len(e) > 6) or e.startswith(("http://", "https://")),
               f"reward.judge.endpoint must be 'policy', 'local:<model>' or an http(s) base URL, got {e!r}")
        _check(self.rubric is None or "{transcript}" in self.rubric,
               "reward.judge.rubric must contain {transcript} (and usually {task}); the judge would see no episode")
        _check_min("reward.judge.scale_max", self.scale_max, 1)
        _check_min("reward.judge.concurrency", self.concurrency, 1)
        _check_min("reward.judge.timeout_s", self.timeout_s, 0, "seconds", strict=True)
        _check_min("reward.judge.retries", self.retries, 0)
        _check_min("reward.judge.max_tokens", self.max_tokens, 4)
        _check_min("reward.judge.observation_chars", self.observation_chars, 1)
        _check(self.weight == self.weight and abs(self.weight) != float("inf"),
               f"reward.judge.weight must be a finite number, got {self.weight}")

    @property
    def template(self) -> str:
        """The rubric in effect (``rubric`` or ``DEFAULT_RUBRIC``)."""
        return self.rubric if self.rubric is not None else DEFAULT_RUBRIC


@dataclass(frozen=True)
class RewardConfig:
    """``reward``: where rewards come from besides the env. ``judge`` (null = off): a judge
    model's verdict per episode (``JudgeConfig``)."""

    judge: Optional[JudgeConfig] = None
