"""Chat rendering with the tokenizer's own template, token-faithful continuation, loss masks.

- ``ChatRenderer`` renders messages with the tokenizer's ``chat_template`` and encodes the
  text without adding special tokens. The **bridge** between an assistant completion and
  the next message (the template *tail* after EOS, e.g. ``"\\n"`` after ``<|im_end|>`` in
  ChatML) is read from the template once, never assumed (PITFALLS P2).
- ``ChatRenderer.extend`` builds the next prompt as previous prompt ids + sampled
  completion ids + bridge + the rendered new messages, i.e. an exact token prefix
  extension (PITFALLS P1). When the template rewrites history (the render of the longer
  conversation does not extend the shorter one), it re-renders and reports a fork: the
  caller starts a new segment and counts it.
- ``build_segment`` / ``episode_segments`` turn stored prompts and completions into one
  training sequence per segment with ``loss_mask == 1`` exactly on sampled tokens
  (PITFALLS P3; used by ``agentrl.update``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.types import Message, Turn


@dataclass(frozen=True)
class Extension:
    """The next prompt of a conversation.

    Attributes:
        prompt_ids: int32[P'], the next prompt.
        messages: the conversation it renders (history + new messages).
        forked: True when the template rewrote history and ``prompt_ids`` is a fresh render
            (a new segment starts); False when it extends prompt + completion exactly.
        bridge_len: number of template bridge tokens appended after the completion (0 on fork).
    """

    prompt_ids: np.ndarray
    messages: tuple[Message, ...]
    forked: bool
    bridge_len: int


@dataclass(frozen=True)
class RenderedChat:
    """A rendered conversation with per-message token spans.

    Attributes:
        ids: int32[L] token ids of the full render.
        spans: one ``(start, end)`` token range per message (the generation prompt, if
            any, is after the last span); template text injected before the first message
            (e.g. a default system prompt) belongs to the first span.
    """

    ids: np.ndarray
    spans: tuple[tuple[int, int], ...]


class ChatRenderer:
    """Render messages with a tokenizer's chat template, token-faithfully.

    Args:
        tokenizer: a transformers tokenizer with a ``chat_template`` and an EOS token
            that ends assistant messages.
    Raises:
        ValueError: no chat template or no EOS token, or the template does not end an
            assistant message with EOS.
    """

    def __init__(self, tokenizer) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template; set tokenizer.chat_template to a Jinja template")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token; the renderer needs the id that ends an assistant turn")
        self.tokenizer = tokenizer
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.eos_text = tokenizer.convert_ids_to_tokens(self.eos_token_id)
        self.tail_text = self._template_tail()
        self.tail_ids = self.encode(self.tail_text)

    def _template_tail(self) -> str:
        probe = [Message("user", "ping"), Message("assistant", "pong")]
        text = self.render_text(probe, add_generation_prompt=False)
        cut = text.rfind("pong" + self.eos_text)
        if cut < 0:
            raise ValueError(
                f"the chat template does not end an assistant message with {self.eos_text!r}; "
                "token-faithful continuation needs an append-only template with EOS after each assistant turn"
            )
        return text[cut + len("pong" + self.eos_text) :]

    # ------------------------------------------------------------------ rendering
    def render_text(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (with the assistant header when asked)."""
        dicts = [{"role": m.role, "content": m.content} for m in messages]
        return self.tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> np.ndarray:
        """int32 ids of ``text`` (no BOS/EOS added)."""
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)

    def render_ids(self, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> np.ndarray:
        """int32[L] ids of the full render (a fresh prompt: tokenization of the text)."""
        return self.encode(self.render_text(messages, add_generation_prompt=add_generation_prompt))

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> RenderedChat:
        """Render and locate each message's tokens (offsets of a fast tokenizer).

        Raises:
            ValueError: the template is not append-only for these messages.
        """
        ends = [len(self.render_text(messages[: k + 1], add_generation_prompt=False)) for k in range(len(messages))]
        text = self.render_text(messages, add_generation_prompt=add_generation_prompt)
        if ends and not text.startswith(self.render_text(messages, add_generation_prompt=False)):
            raise ValueError("the chat template is not append-only; per-message spans are undefined")
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        starts = np.asarray([a for a, _ in enc["offset_mapping"]])
        bounds = [0] + [int(np.searchsorted(starts, e, side="left")) for e in ends]
        spans = tuple((bounds[k], bounds[k + 1]) for k in range(len(messages)))
        return RenderedChat(ids=np.asarray(enc["input_ids"], dtype=np.int32), spans=spans)

    # ------------------------------------------------------------------ continuation
    def completion_text(self, completion_ids: Sequence[int]) -> str:
        """The assistant message content of a completion (decoded, trailing EOS dropped)."""
        ids = [int(i) for i in completion_ids]
        if ids and ids[-1] == self.eos_token_id:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def token_spans(self, completion_ids: Sequence[int],
                    char_spans: Sequence[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
        """Token ranges of character ranges of ``completion_text(completion_ids)``.

        A token belongs to the range that holds its first character, or to the range that starts
        inside it when everything before that start in the token is whitespace (``" <action>"``
        as one token), so disjoint character ranges give disjoint token ranges. Token offsets come
        from decoding prefixes of the ids (binary search), so any tokenization works, canonical or not.

        Args:
            completion_ids: int[C] sampled ids (a trailing EOS is never in a range).
            char_spans: (start, end) character ranges, or None.
        Returns:
            One ``(start, end)`` int pair (0 ≤ start ≤ end ≤ C) or None per range.
        """
        ids = [int(i) for i in completion_ids]
        n = len(ids) - (1 if ids and ids[-1] == self.eos_token_id else 0)
        text = self.tokenizer.decode(ids[:n], skip_special_tokens=False)
        cache: dict[int, int] = {0: 0, n: len(text)}

        def chars(k: int) -> int:  # characters decoded from the first k tokens
            if k not in cache:
                cache[k] = len(self.tokenizer.decode(ids[:k], skip_special_tokens=False))
            return cache[k]

        def first_token_from(c: int) -> int:  # smallest k with chars(k) >= c (n when none)
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if chars(mid) >= c:
                    hi = mid
                else:
                    lo = mid + 1
            return lo

        out: list[tuple[int, int] | None] = []
        for span in char_spans:
            if span is None:
                out.append(None)
                continue
            a, b = span
            start, end = first_token_from(a), first_token_from(b)
            if b > a and start > 0 and chars(start) > a and not text[chars(start - 1):a].strip():
                start -= 1  # a token of whitespace + the range's first characters
            out.append((start, max(start, end)))
        return out

    def bridge_ids(self, completion_ids: Sequence[int]) -> np.ndarray:
        """Template tokens between a completion and the next message: the tail after EOS,
        preceded by EOS itself when the completion did not sample it (cut by length)."""
        ended = len(completion_ids) > 0 and int(completion_ids[-1]) == self.eos_token_id
        head = np.zeros(0, np.int32) if ended else np.asarray([self.eos_token_id], np.int32)
        return np.concatenate([head, self.tail_ids]).astype(np.int32)

    def extend(
        self,
        prompt_ids: Sequence[int],
        messages: Sequence[Message],
        completion_ids: Sequence[int],
        new_messages: Sequence[Message],
    ) -> Extension:
        """Next prompt after ``completion_ids`` answered the prompt rendered from ``messages``.

        Args:
            prompt_ids: int[P], the ids that were fed to the engine (rendered from
                ``messages`` with the generation prompt, possibly by earlier ``extend`` calls).
            messages: the conversation before the completion.
            completion_ids: int[C], the sampled ids, kept verbatim.
            new_messages: the messages to append after the assistant turn (e.g. the new
                observation as a user message).
        Returns:
            ``Extension``; when not forked, ``prompt_ids' = prompt_ids + completion_ids +
            bridge + ids(rendered new messages + generation prompt)``.
        """
        content = self.completion_text(completion_ids)
        history = (*messages, Message("assistant", content))
        conv = (*history, *new_messages)
        prev_text = self.render_text(messages, add_generation_prompt=True)
        hist_text = self.render_text(history, add_generation_prompt=False)
        full_text = self.render_text(conv, add_generation_prompt=True)
        append_only = (
            hist_text.startswith(prev_text)
            and hist_text[len(prev_text) :] == content + self.eos_text + self.tail_text
            and full_text.startswith(hist_text)
        )
        if not append_only:
            return Extension(self.encode(full_text), conv, forked=True, bridge_len=0)
        bridge = self.bridge_ids(completion_ids)
        delta = self.encode(full_text[len(hist_text) :])
        parts = [np.asarray(prompt_ids, np.int32), np.asarray(completion_ids, np.int32), bridge, delta]
        return Extension(np.concatenate(parts).astype(np.int32), conv, forked=False, bridge_len=int(bridge.size))


# ---------------------------------------------------------------------- loss masks
@dataclass(frozen=True)
class SegmentTokens:
    """One training sequence (a segment of consecutive turns sharing a token prefix).

    Attributes:
        ids: int32[L], the last turn's prompt + completion.
        loss_mask: uint8[L], 1 exactly on sampled completion tokens (EOS included), 0 on
            prompts, template scaffolding and bridge tokens.
        logprobs: float32[L], behaviour logprob on mask positions, 0.0 elsewhere.
        turn_index: int32[L], index (into the given turns) of the turn that sampled the
            token, -1 where the mask is 0.
    """

    ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    turn_index: np.ndarray


def build_segment(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None = None,
) -> SegmentTokens:
    """Merge turns whose prompts extend each other into one sequence with its loss mask.

    Args:
        prompts: K prompts, int[P_k]; prompt k+1 must start with prompt k + completion k.
        completions: K completions, int[C_k].
        logprobs: K arrays float[C_k] or None (zeros).
    Raises:
        ValueError: empty input, mismatched lengths, or a prompt that does not extend the
            previous prompt + completion (names the turn; start a new segment there).
    """
    if not prompts or len(prompts) != len(completions):
        raise ValueError(f"build_segment needs K >= 1 prompts and K completions, got {len(prompts)} and {len(completions)}")
    p = [np.asarray(x, np.int32).reshape(-1) for x in prompts]
    c = [np.asarray(x, np.int32).reshape(-1) for x in completions]
    lp = [np.zeros(x.size, np.float32) for x in c] if logprobs is None else [np.asarray(x, np.float32) for x in logprobs]
    for k in range(1, len(p)):
        before = np.concatenate([p[k - 1], c[k - 1]])
        if p[k].size < before.size or not np.array_equal(p[k][: before.size], before):
            raise ValueError(f"turn {k}: prompt does not extend turn {k - 1}'s prompt + completion; start a new segment")
    ids = np.concatenate([p[-1], c[-1]]).astype(np.int32)
    mask = np.zeros(ids.size, np.uint8)
    out_lp = np.zeros(ids.size, np.float32)
    turn = np.full(ids.size, -1, np.int32)
    for k in range(len(p)):
        s = slice(p[k].size, p[k].size + c[k].size)
        mask[s], out_lp[s], turn[s] = 1, lp[k], k
    return SegmentTokens(ids=ids, loss_mask=mask, logprobs=out_lp, turn_index=turn)


def episode_segments(turns: Sequence[Turn]) -> list[SegmentTokens]:
    """Split an episode's turns (in order of ``t``) by ``turn.info["segment"]`` and build
    each segment (``turn_index`` refers to positions in ``turns``).

    Turns without a ``"segment"`` key (window context) are one segment each.
    """
    out: list[SegmentTokens] = []
    start = 0
    for k in range(1, len(turns) + 1):
        seg_k = turns[k].info.get("segment") if k < len(turns) else None
        if k == len(turns) or seg_k is None or seg_k != turns[start].info.get("segment"):
            group = turns[start:k]
            has_lp = all(t.completion_logprobs.size == t.completion_ids.size for t in group)
            lps = [t.completion_logprobs for t in group] if has_lp else None
            seg = build_segment([t.prompt_ids for t in group], [t.completion_ids for t in group], lps)
            ti = np.where(seg.turn_index >= 0, seg.turn_index + start, -1).astype(np.int32)
            out.append(SegmentTokens(seg.ids, seg.loss_mask, seg.logprobs, ti))
            start = k
    return out
