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

In ``tito`` mode the drift metric does not change the ids fed, so ``plan_chat`` leaves it
pending (``PromptPlan.drift_head``) and the caller measures it with ``drift_of`` after the
turn was recorded and the reply sent. ``retokenize`` and ``strict`` need it before
generating and measure it at once. Either way the full re-encode reuses the thread's last
one (``ThreadState.rendered``, ``Encoder.render``): only the new tail of the conversation is
encoded, not all of it.

Every function that encodes takes ``encoder`` (an ``agentrl.proxy.encoder.Encoder``; a new
one for ``renderer`` when None): its ids equal ``renderer.encode``'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.llm.chat import ChatRenderer
from agentrl.proxy.encoder import Encoder, Rendered
from agentrl.proxy.errors import WireError
from agentrl.proxy.messages import canonical, thread_key, to_template
from agentrl.proxy.wire import ChatRequest
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
        rendered: the full encode of ``prompt_text`` when one was made (the base of the
            next call's incremental re-encode), else None.
    """

    index: int
    history: tuple
    template_messages: tuple[Message, ...]
    prompt_text: str
    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    completion_text: str
    segment: int
    rendered: Rendered | None = None


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
        drift_head: tito mode with drift measured later: the number of leading
            ``prompt_ids`` (the canonical ids) that ``drift_of`` compares with the
            re-encoded ``prompt_text``; None when nothing is pending.
        rendered: the full encode of ``prompt_text`` when it was made, else None.
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
    drift_head: int | None = None
    rendered: Rendered | None = None


def _drift(canonical_ids: np.ndarray, rendered: np.ndarray) -> tuple[bool, int | None]:
    n = canonical_ids.size
    head = rendered[:n]
    if head.size == n and np.array_equal(head, canonical_ids):
        return True, None
    m = min(n, head.size)
    diff = np.flatnonzero(head[:m] != canonical_ids[:m])
    return False, int(diff[0]) if diff.size else m


def drift_of(plan: PromptPlan, encoder: Encoder, prev: Rendered | None) -> PromptPlan:
    """The plan with its pending drift measured (``drift_head`` set: the full re-encode of
    ``prompt_text``, incremental from ``prev``, the thread's ``rendered`` before this call
    was committed); other plans unchanged."""
    if plan.drift_head is None:
        return plan
    rendered = encoder.render(plan.prompt_text, prev)
    ok, mismatch = _drift(plan.prompt_ids[: plan.drift_head], rendered.ids)
    return dataclasses.replace(plan, token_prefix_ok=ok, first_mismatch=mismatch, drift_head=None, rendered=rendered)


def _fresh(renderer: ChatRenderer, msgs: tuple[Message, ...], key: bytes, cause: str, fork: bool,
           encoder: Encoder) -> PromptPlan:
    text = renderer.render_text(msgs, add_generation_prompt=True)
    r = encoder.render(text)
    return PromptPlan(r.ids, msgs, text, key, "rendered", cause, fork, rendered=r)


def plan_chat(renderer: ChatRenderer, threads: dict[bytes, ThreadState], req: ChatRequest, *, mode: str = "tito",
              measure_drift: bool = True, encoder: Encoder | None = None) -> PromptPlan:
    """The prompt for a chat request given the episode's threads.

    One template render per call: the conversation (history + our reply + new messages)
    must render to text that starts with the last prompt's text + the reply + EOS + the
    template tail (the text of the canonical ids); the ids of the rest are appended. This
    is ``ChatRenderer.extend``'s append-only test with the previous render cached, and it
    also catches templates that render an earlier assistant turn differently (e.g. strip
    ``<think>``): then the prompt is re-rendered and the call forks.

    With ``measure_drift`` in ``tito`` mode the drift is left pending (``drift_head``; see
    ``drift_of``).

    Raises:
        WireError: 400 in ``strict`` mode when the history was rewritten or the re-render
            drifts from the canonical ids.
    """
    encoder = encoder or Encoder(renderer)
    key = thread_key(req.messages, req.tools)
    th = threads.get(key)
    if th is None:
        return _fresh(renderer, to_template(req.messages, req.tools), key, "new_thread" if threads else "first_call",
                      False, encoder)
    k = len(th.history)
    if len(req.messages) < k or tuple(canonical(m) for m in req.messages[:k]) != th.history:
        if mode == "strict":
            raise WireError(400, "strict mode: the messages rewrite the episode's history (they do not extend the "
                                 "previous request + reply); send the full history or use mode=tito", param="messages")
        return _fresh(renderer, to_template(req.messages, req.tools), key, "rewritten", True, encoder)
    conv = (*th.template_messages, Message("assistant", th.completion_text), *to_template(req.messages[k:], ()))
    text = renderer.render_text(conv, add_generation_prompt=True)
    hist = th.prompt_text + th.completion_text + renderer.eos_text + renderer.tail_text
    if not text.startswith(hist):
        if mode == "strict":
            raise WireError(400, "strict mode: the chat template rewrites history; use mode=tito", param="messages")
        r = encoder.render(text)
        return PromptPlan(r.ids, conv, text, key, "rendered", "template", True, rendered=r)
    head = np.concatenate([th.prompt_ids, th.completion_ids, renderer.bridge_ids(th.completion_ids)]).astype(np.int32)
    ok, mismatch, r = None, None, None
    if mode != "tito":
        r = encoder.render(text, th.rendered)
        ok, mismatch = _drift(head, r.ids)
        if mode == "strict" and not ok:
            raise WireError(400, f"strict mode: re-rendering the history changes token {mismatch} of the canonical "
                                 "ids (re-tokenization drift); use mode=tito", param="messages")
        if mode == "retokenize":
            return PromptPlan(r.ids, conv, text, key, "rendered", "retokenize", False, ok, mismatch, rendered=r)
    ids = np.concatenate([head, encoder(text[len(hist):])]).astype(np.int32)
    pending = int(head.size) if mode == "tito" and measure_drift else None
    return PromptPlan(ids, conv, text, key, "tito", "extends", False, ok, mismatch, drift_head=pending, rendered=r)


def plan_completion(renderer: ChatRenderer, threads: dict[bytes, ThreadState], req: ChatRequest, *,
                    encoder: Encoder | None = None) -> PromptPlan:
    """The prompt of a legacy ``completions`` request: token ids verbatim, or the text
    encoded without special tokens. It continues the segment when it starts with the last
    completions call's prompt + completion; otherwise a new segment starts (a fork when an
    earlier completions call exists)."""
    key = b"<completions>"
    encode = encoder or renderer.encode
    ids = np.asarray(req.prompt if isinstance(req.prompt, tuple) else encode(req.prompt), np.int32)
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
    k = len(old.history) if old is not None and plan.source == "tito" else 0  # plan_chat checked that prefix
    history = ((old.history if k else ()) + tuple(canonical(m) for m in req.messages[k:])
               + ((reply_key,) if reply_key is not None else ()))
    th = ThreadState(old.index if old else len(threads), history, plan.template_messages, plan.prompt_text,
                     np.asarray(plan.prompt_ids, np.int32), np.asarray(completion_ids, np.int32), completion_text,
                     segment, plan.rendered)
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


__all__: Sequence[str] = ("MODES", "PromptPlan", "ThreadState", "commit_thread", "drift_of",
                          "new_segment", "plan_chat", "plan_completion", "thread_index")
