"""The engine contract: ``LLMClient`` (token-in/token-out), ``SamplingParams``, ``Completion``.

Engines never see messages: chat rendering lives in ``agentrl.llm.chat`` (MODELS.md §4).
Every backend returns the exact sampled ids and the behaviour logprob of each sampled
token, computed from the **raw** logits (log-softmax before temperature / top-p,
``logprob_mode="raw"``; vLLM's default ``raw_logprobs``), never from processed scores
(MODELS.md §2.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

#: ``Completion.finish_reason`` values.
FINISH_STOP = "stop"  # a stop token (EOS or ``stop_token_ids``) was sampled; it is included
FINISH_LENGTH = "length"  # ``max_tokens`` or the model's context was reached
FINISH_ABORT = "abort"  # the request was aborted (``pause("abort")``)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    Attributes:
        temperature: softmax temperature (> 0; use ``greedy=True`` for argmax).
        top_p: nucleus mass in (0, 1].
        max_tokens: most new tokens per completion (≥ 1); engines clamp it so that prompt +
            completion never exceeds the model's context.
        stop_token_ids: extra ids that end a completion (the tokenizer's EOS always does).
        seed: seed of the sampler (int) or None for the engine's own stream. The same
            seed and the same batch give the same tokens.
        greedy: take the argmax token (ignores temperature and top_p).
        row_seeds: one seed per prompt of the batch, or None. When given (and not greedy),
            prompt i samples from its own generator seeded with ``row_seeds[i]``, so its
            tokens do not depend on the other prompts of the batch (engine workers use it
            for rollouts that are the same whatever the number of workers;
            ``agentrl.llm.row_sampling``); ``seed`` is then unused.
    Raises:
        ValueError: a field is out of range.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    greedy: bool = False
    row_seeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"SamplingParams.temperature must be > 0, got {self.temperature}; use greedy=True for argmax")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in self.stop_token_ids))
        if self.row_seeds is not None:
            object.__setattr__(self, "row_seeds", tuple(int(s) for s in self.row_seeds))


def turn_seed(seed: int, episode_id: int, t: int) -> int:
    """The sampling seed of turn ``t`` of episode ``episode_id`` under base seed ``seed``
    (``agentrl.rollout.collector.CollectConfig.turn_seeds``; the proxy's per-episode ``turn_seeds``, where ``t``
    counts the episode's model calls): a non-negative int < 2**63 from
    ``numpy.random.SeedSequence([seed, episode_id, t])``."""
    words = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(episode_id), int(t)]).generate_state(2)
    return int((int(words[0]) << 32 | int(words[1])) >> 1)


@dataclass
class Completion:
    """One sampled completion.

    Attributes:
        token_ids: int32[C], the exact sampled ids (the stop token included when sampled).
        logprobs: float32[C], raw-logit log-probability of each sampled token under the
            policy that sampled it (NaN-free; empty when the backend cannot give them).
        finish_reason: ``"stop" | "length" | "abort"``.
        policy_version: the engine's policy version when sampling ended (int).
        hidden: float32[H] final-layer hidden state at the last prompt token, or None.
        text: the decoded text when the backend returns it (HTTP), else None.
        token_faithful: False when the ids were re-tokenized from text (text-only HTTP
            servers): such completions are for evaluation only, never for training.
        logprob_mode: ``"raw"`` (log-softmax of the raw logits, T = 1) or ``"none"``.
        top_ids / top_logprobs: int32[C, K] / float32[C, K], the K most likely ids of each
            step and their raw-logit logprobs (descending), when ``generate`` was asked for
            ``top_logprobs=K`` by an engine that supports it; else None.
        grammar_masks: int32[C, W], the grammar bitmask each token was sampled under
            (``generate(grammars=...)``, ``agentrl.llm.grammar``); else None.
        grammar_close_at: the first position where the budget forced the grammar's closing
            path (``agentrl.llm.grammar_close``), or None.
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    finish_reason: str
    policy_version: int = 0
    hidden: np.ndarray | None = None
    text: str | None = None
    token_faithful: bool = True
    logprob_mode: str = "raw"
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None
    grammar_masks: np.ndarray | None = None
    grammar_close_at: int | None = None

    def __post_init__(self) -> None:
        self.token_ids = np.asarray(self.token_ids, dtype=np.int32).reshape(-1)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32).reshape(-1)
        if self.logprobs.size not in (0, self.token_ids.size):
            raise ValueError(f"Completion has {self.logprobs.size} logprobs for {self.token_ids.size} tokens")
        if self.top_ids is not None:
            top = np.asarray(self.top_ids, dtype=np.int32)
            k = top.shape[-1] if top.ndim == 2 else top.size // max(1, self.token_ids.size)
            self.top_ids = top.reshape(self.token_ids.size, k)
            self.top_logprobs = np.asarray(self.top_logprobs, dtype=np.float32).reshape(self.top_ids.shape)


@runtime_checkable
class LLMClient(Protocol):
    """Token-in/token-out policy engine (DESIGN.md extension point "engine").

    Attributes:
        policy_version: number of weight updates applied (int); stamped on completions.
        max_context: the model's context length in tokens; prompt + completion ≤ this.
        eos_token_id: the id that ends an assistant message.
        token_faithful: False for text-only backends (evaluation only).
    """

    policy_version: int
    max_context: int
    eos_token_id: int
    token_faithful: bool

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, return_hidden: bool = False
    ) -> list[Completion]:
        """Sample one completion per prompt (a batch of B int id sequences).

        Engines that support constrained decoding (``HFEngine``, ``VLLMEngine`` built with
        ``constrained=True``) also take
        ``allowed=[seqs | None] * B``: per prompt, the allowed completions as id sequences
        ending with EOS (``agentrl.llm.constrained``); callers pass it only when needed.
        Engines that can return the top alternatives of each step (``HFEngine``) take
        ``top_logprobs=K`` (``Completion.top_ids`` / ``top_logprobs``); callers pass it only
        when K > 0 (the recording proxy checks the signature). ``HFEngine`` also takes
        ``grammars=[Grammar | None] * B`` (``agentrl.llm.grammar``: forced tool calls, JSON).

        Raises:
            ValueError: a prompt is empty or leaves no room in the context.
            RuntimeError: the engine is paused with mode ``"abort"``.
        """
        ...

    def update_weights(self, source: object, version: int) -> None:
        """Load new weights (path or ``(name, tensor)`` pairs) and set ``policy_version``."""
        ...

    def pause(self, mode: str = "wait") -> None:
        """Stop admitting requests: ``wait`` (block new ones), ``abort`` (fail them), ``keep``."""
        ...

    def resume(self) -> None:
        """Admit requests again."""
        ...


def clamp_max_tokens(prompt_len: int, max_tokens: int, max_context: int) -> int:
    """New-token budget so that ``prompt_len + budget <= max_context``.

    Raises:
        ValueError: the prompt alone fills the context (names both lengths).
    """
    budget = min(int(max_tokens), int(max_context) - int(prompt_len))
    if budget < 1:
        raise ValueError(
            f"prompt of {prompt_len} tokens leaves no room in a context of {max_context} tokens; "
            f"shorten the prompt (e.g. context=window with a smaller k) or use a longer-context model"
        )
    return budget


def context_batches(lengths: Sequence[int], budgets: Sequence[int], max_context: int) -> list[list[int]]:
    """Row indices split into batches that fit the context once left-padded: in each batch the
    longest prompt plus the largest new-token budget is ≤ ``max_context`` tokens, so every
    prompt keeps its own budget ``min(max_tokens, context − its length)`` (``clamp_max_tokens``).
    One batch, rows in order, when they all fit; else rows by prompt length, greedily.

    Example: lengths (2, 390), budgets (48, 10), context 400 → ``[[0], [1]]`` (392 + 48 > 400).
    """
    n = len(lengths)
    if n == 0 or max(lengths) + max(budgets) <= max_context:
        return [list(range(n))]
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(n), key=lambda k: (lengths[k], k)):
        room = max([budgets[k] for k in cur] + [budgets[i]])
        if cur and lengths[i] + room > max_context:
            out.append(cur)
            cur = []
        cur.append(i)
    out.append(cur)
    return out


def check_prompts(prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Prompts as int64 arrays. Raises ``ValueError`` on an empty prompt or batch."""
    if len(prompts) == 0:
        raise ValueError("generate() got an empty batch of prompts")
    out = [np.asarray(p, dtype=np.int64).reshape(-1) for p in prompts]
    for i, p in enumerate(out):
        if p.size == 0:
            raise ValueError(f"prompt {i} is empty; pass at least one token id")
    return out



def check_allowed(allowed, n: int, name: str = "allowed") -> list:
    """Per-prompt constraints (``generate(..., allowed=...)`` or ``grammars=...``, named ``name``)
    as a list of length ``n`` (all None when ``allowed`` is None).

    Raises:
        ValueError: ``allowed`` does not have one entry per prompt.
    """
    if allowed is None:
        return [None] * n
    if len(allowed) != n:
        raise ValueError(f"{name} has {len(allowed)} entries for {n} prompts; pass one (or None) per prompt")
    return list(allowed)


class PauseGate:
    """Admission control behind ``LLMClient.pause``/``resume`` for in-process engines.

    ``pause("wait")`` / ``pause("keep")``: later ``admit()`` calls block until ``resume()``;
    ``pause("abort")``: they raise ``RuntimeError``. A call already admitted finishes.
    """

    def __init__(self) -> None:
        import threading

        self._open = threading.Event()
        self._open.set()
        self._abort = False

    def admit(self) -> None:
        """Wait while paused; raise ``RuntimeError`` when paused with mode ``"abort"``."""
        self._open.wait()
        if self._abort:
            raise RuntimeError("engine is paused (mode=abort); call resume() first")

    def pause(self, mode: str = "wait") -> None:
        """Raises ``ValueError`` for a mode other than ``wait``, ``abort`` or ``keep``."""
        if mode not in ("wait", "abort", "keep"):
            raise ValueError(f"pause mode must be 'wait', 'abort' or 'keep', got {mode!r}")
        self._abort = mode == "abort"
        if not self._abort:
            self._open.clear()

    def resume(self) -> None:
        self._abort = False
        self._open.set()
