"""``ScriptedEngine``: a deterministic ``LLMClient`` for tests (no torch).

It emits given id sequences — e.g. non-canonical BPE splits whose decoded text
re-encodes differently (PITFALLS P1) — one script per call, in order, or chosen by a
callable from the prompt.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from agentrl.llm.base import (FINISH_LENGTH, FINISH_STOP, Completion, SamplingParams, check_allowed, check_prompts,
                              clamp_max_tokens)

Script = Callable[[np.ndarray, int], Sequence[int]]


class ScriptedEngine:
    """Replay scripted completions.

    Args:
        scripts: a list of id sequences (used in call order, cycling), or a callable
            ``(prompt_ids int64[P], call_index) -> ids``.
        eos_token_id: the id that ends a message (finish reason ``stop``).
        max_context: context length in tokens.
        logprob: logprob reported for every emitted token (float, ≤ 0).
    Raises:
        ValueError: an empty script list.
    """

    token_faithful = True

    def __init__(
        self, scripts: Sequence[Sequence[int]] | Script, *, eos_token_id: int, max_context: int = 4096, logprob: float = -0.5
    ) -> None:
        if not callable(scripts) and len(scripts) == 0:
            raise ValueError("ScriptedEngine needs at least one scripted completion")
        self._scripts = scripts
        self.eos_token_id = int(eos_token_id)
        self.max_context = int(max_context)
        self.logprob = float(logprob)
        self.policy_version = 0
        self.calls = 0
        self.prompts: list[np.ndarray] = []  # every prompt received, in order
        self.allowed: list = []  # the ``allowed`` entry of every prompt received (None: unconstrained)
        self._abort = False

    def _script(self, prompt: np.ndarray) -> list[int]:
        if callable(self._scripts):
            return [int(i) for i in self._scripts(prompt, self.calls)]
        return [int(i) for i in self._scripts[self.calls % len(self._scripts)]]

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, return_hidden: bool = False,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[Completion]:
        """Emit the next script for each prompt, cut at a stop id or the token budget.
        ``allowed`` (constrained decoding) is not enforced, only recorded in ``self.allowed``."""
        if self._abort:
            raise RuntimeError("engine is paused (mode=abort); call resume() first")
        out = []
        stops = {self.eos_token_id, *sampling.stop_token_ids}
        rows = check_prompts(prompts)
        self.allowed.extend(check_allowed(allowed, len(rows)))
        for p in rows:
            budget = clamp_max_tokens(p.size, sampling.max_tokens, self.max_context)
            ids = self._script(p)[:budget]
            self.prompts.append(p)
            self.calls += 1
            end = next((k + 1 for k, t in enumerate(ids) if t in stops), None)
            ids = ids[:end] if end else ids
            hidden = np.full(4, float(p.size), dtype=np.float32) if return_hidden else None
            out.append(
                Completion(
                    token_ids=ids,
                    logprobs=np.full(len(ids), self.logprob, dtype=np.float32),
                    finish_reason=FINISH_STOP if end else FINISH_LENGTH,
                    policy_version=self.policy_version,
                    hidden=hidden,
                )
            )
        return out

    def update_weights(self, source: object, version: int) -> None:
        """Only records the version (there are no weights)."""
        self.policy_version = int(version)

    def pause(self, mode: str = "wait") -> None:
        """``abort`` makes ``generate`` raise until ``resume``; other modes are no-ops."""
        self._abort = mode == "abort"

    def resume(self) -> None:
        """Admit requests again."""
        self._abort = False
