"""Token-in/token-out continuation (TITO) of a chat thread, and drift measurement.

MODELS.md §5.5, PITFALLS P1/P2. Per thread the proxy keeps the ids it fed and sampled on the
last call. When a request's messages extend that history (the earlier messages equal, the
assistant turn equal to the reply we returned), the prompt is

    previous prompt ids + completion ids (verbatim) + template bridge + ids(new messages)

(``ChatRenderer.extend``), so the training sequence is exactly what the policy saw and
sampled. Otherwise (compaction, stripped reasoning, edited history) the conversation is
re-rendered and a new segment starts; that is a *fork*, counted per episode.

Modes: ``tito`` (default), ``retokenize`` (every call re-rendered and its own segment: what
a plain server does; for A/B), ``strict`` (any drift or rewrite is refused with 400).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.llm.chat import ChatRenderer
from agentrl.proxy.messages import canonical, thread_key, to_template
from agentrl.proxy.wire import ChatRequest, WireError
from agentrl.types import Message

MODES = ("tito", "retokenize", "strict")


@dataclass
class ThreadState:
    """What one thread of an episode fed and sampled on its last call.

    Attributes:
        index: thread number within the episode (0 = first thread seen).
        history: canonical keys of the request messages + the reply we returned.
        template_messages: the template messages the last prompt rendered.
        prompt_text: the template text of the last prompt (generation prompt included).
        prompt_ids: int32[P], the last prompt as fed.
        completion_ids: int32[C], the last completion as sampled.
        completion_text: its decoded text (trailing EOS dropped).
        segment: the segment of the last call.
    """

    index: int
    history: tuple
    template_messages: tuple[Message, ...]
    prompt_text: str
    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    completion_text: str
    segment: int


@dataclass(frozen=True)
class PromptPlan:
    """The prompt of one call and how it was built.

    Attributes:
        prompt_ids: int32[P], the ids fed to the engine.
        template_messages: the conversation it renders (without the generation prompt).
        prompt_text: the template text of that conversation with the generation prompt.
        key: the thread fingerprint.
        source: ``"tito"`` (extends the thread's ids) or ``"rendered"`` (fresh render).
        cause: ``first_call | new_thread | extends | rewritten | template | retokenize | completions``.
        fork: the thread's history was rewritten (a new segment starts and is counted).
        token_prefix_ok: a full re-render agrees with the canonical ids up to the new
            messages (the drift metric); None when not measured or not applicable.
        first_mismatch: first differing token position when ``token_prefix_ok`` is False.
    """

    prompt_ids: np.ndarray
    template_messages: tuple[Message, ...]
    prompt_text: str
    key: bytes
    source: str
    cause: str
    fork: bool
    token_prefix_ok: bool | None = None
    first_mismatch: int | None = None


def _drift(canonical_ids: np.ndarray, rendered: np.ndarray) -> tuple[bool, int | None]:
    n = canonical_ids.size
    head = rendered[:n]
    if head.size == n and np.array_equal(head, canonical_ids):
        return True, None
    m = min(n, head.size)
    diff = np.flatnonzero(head[:m] != canonical_ids[:m])
    return False, int(diff[0]) if diff.size else m


def _fresh(renderer: ChatRenderer, msgs: tuple[Message, ...], key: bytes, cause: str, fork: bool) -> PromptPlan:
    text = renderer.render_text(msgs, add_generation_prompt=True)
    return PromptPlan(renderer.encode(text), msgs, text, key, "rendered", cause, fork)


def plan_chat(renderer: ChatRenderer, threads: dict[bytes, ThreadState], req: ChatRequest, *, mode: str = "tito",
              measure_drift: bool = True) -> PromptPlan:
    """The prompt for a chat request given the episode's threads.

    One template render per call: the conversation (history + our reply + new messages)
    must render to text that starts with the last prompt's text + the reply + EOS + the
    template tail (the text of the canonical ids); the ids of the rest are appended. This
    is ``ChatRenderer.extend``'s append-only test with the previous render cached, and it
    also catches templates that render an earlier assistant turn differently (e.g. strip
    ``<think>``): then the prompt is re-rendered and the call forks.

    Raises:
        WireError: 400 in ``strict`` mode when the history was rewritten or the re-render
            drifts from the canonical ids.
    """
    key = thread_key(req.messages, req.tools)
    th = threads.get(key)
    if th is None:
        return _fresh(renderer, to_template(req.messages, req.tools), key, "new_thread" if threads else "first_call",
                      False)
    k = len(th.history)
    if len(req.messages) < k or tuple(canonical(m) for m in req.messages[:k]) != th.history:
        if mode == "strict":
            raise WireError(400, "strict mode: the messages rewrite the episode's history (they do not extend the "
                                 "previous request + reply); send the full history or use mode=tito", param="messages")
        return _fresh(renderer, to_template(req.messages, req.tools), key, "rewritten", True)
    conv = (*th.template_messages, Message("assistant", th.completion_text), *to_template(req.messages[k:], ()))
    text = renderer.render_text(conv, add_generation_prompt=True)
    hist = th.prompt_text + th.completion_text + renderer.eos_text + renderer.tail_text
    if not text.startswith(hist):
        if mode == "strict":
            raise WireError(400, "strict mode: the chat template rewrites history; use mode=tito", param="messages")
        return PromptPlan(renderer.encode(text), conv, text, key, "rendered", "template", True)
    head = np.concatenate([th.prompt_ids, th.completion_ids, renderer.bridge_ids(th.completion_ids)]).astype(np.int32)
    ok, mismatch = None, None
    if measure_drift or mode != "tito":
        rendered = renderer.encode(text)
        ok, mismatch = _drift(head, rendered)
        if mode == "strict" and not ok:
            raise WireError(400, f"strict mode: re-rendering the history changes token {mismatch} of the canonical "
                                 "ids (re-tokenization drift); use mode=tito", param="messages")
        if mode == "retokenize":
            return PromptPlan(rendered, conv, text, key, "rendered", "retokenize", False, ok, mismatch)
    ids = np.concatenate([head, renderer.encode(text[len(hist):])]).astype(np.int32)
    return PromptPlan(ids, conv, text, key, "tito", "extends", False, ok, mismatch)


def plan_completion(renderer: ChatRenderer, threads: dict[bytes, ThreadState], req: ChatRequest) -> PromptPlan:
    """The prompt of a legacy ``completions`` request: token ids verbatim, or the text
    encoded without special tokens. It continues the segment when it starts with the last
    completions call's prompt + completion; otherwise a new segment starts (a fork when an
    earlier completions call exists)."""
    key = b"<completions>"
    ids = np.asarray(req.prompt if isinstance(req.prompt, tuple) else renderer.encode(req.prompt), np.int32)
    th = threads.get(key)
    if th is None:
        return PromptPlan(ids, (), "", key, "rendered", "completions", fork=False)
    head = np.concatenate([th.prompt_ids, th.completion_ids])
    extends = ids.size >= head.size and np.array_equal(ids[: head.size], head)
    return PromptPlan(ids, (), "", key, "tito" if extends else "rendered", "extends" if extends else "rewritten",
                      fork=not extends)


def commit_thread(threads: dict[bytes, ThreadState], plan: PromptPlan, req: ChatRequest, reply_key: tuple | None,
                  completion_ids: np.ndarray, completion_text: str, segment: int) -> ThreadState:
    """Remember a finished call so the next request of the thread can extend it.

    ``reply_key`` is the canonical key of the assistant message returned (None for
    ``completions`` calls).
    """
    old = threads.get(plan.key)
    history = tuple(canonical(m) for m in req.messages) + ((reply_key,) if reply_key is not None else ())
    th = ThreadState(old.index if old else len(threads), history, plan.template_messages, plan.prompt_text,
                     np.asarray(plan.prompt_ids, np.int32), np.asarray(completion_ids, np.int32), completion_text,
                     segment)
    threads[plan.key] = th
    return th


def new_segment(plan: PromptPlan, threads: dict[bytes, ThreadState], last_segment: int | None) -> bool:
    """Whether the call starts a new segment: a fresh render after an earlier call, or a
    call continuing a thread other than the one of the previous call."""
    if last_segment is None:
        return False
    if plan.source == "rendered":
        return True
    return threads[plan.key].segment != last_segment


def thread_index(threads: dict[bytes, ThreadState], key: bytes) -> int:
    """Index of the thread ``key`` (the next free index when new)."""
    th = threads.get(key)
    return th.index if th else len(threads)


__all__: Sequence[str] = ("MODES", "PromptPlan", "ThreadState", "commit_thread", "new_segment", "plan_chat",
                          "plan_completion", "thread_index")
