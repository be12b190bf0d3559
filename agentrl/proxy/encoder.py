"""``Encoder``: ``ChatRenderer.encode`` without the transformers wrapper, and incremental
full re-encodes of a growing conversation.

For a fast (``tokenizers``-backed) tokenizer, ``tokenizer.encode(text, add_special_tokens=False)``
is one call of the Rust backend wrapped in ~25 µs of Python (argument checks, truncation and
padding state, ``BatchEncoding``). ``Encoder`` makes that same backend call directly, and only
while the backend is in the state transformers itself would put it in before encoding (no
truncation, no padding, ``encode_special_tokens == tokenizer.split_special_tokens``);
otherwise, and for tokenizers whose class overrides the encode path or that fail the probe
check at construction, it calls ``renderer.encode``. The ids are therefore those of
``renderer.encode`` by construction (and checked on probe texts).

``Encoder.render(text, prev)`` is the full encode of ``text`` (the drift metric's re-render,
MODELS.md §5.5 step 3) reusing ``prev``, the full encode of an earlier prefix of ``text``.
The ``tokenizers`` pipeline first splits the text at added tokens (leftmost-longest match),
then normalises, pre-tokenises and encodes each piece on its own. So with an *anchor* — an
added token in ``prev`` that starts at least ``max added-token length`` characters before
the end of ``prev.text`` (no match decided there can change when text is appended), has
no ``lstrip``/``rstrip``/``single_word``/``normalized`` flag, and whose characters in the
text are its own content (a split at an added-token match; not, e.g., ``<unk>`` that the
model produced for an unknown character inside a piece) — ``encode(text) ==
prev.ids[:j] + encode(text[a:])`` where the anchor is token ``j`` at character ``a``. Only
the new tail of the conversation is encoded per call, instead of all of it. Used only when
every added token lacks those flags and special tokens are not split, and when a probe
conversation re-encodes identically both ways; otherwise ``render`` encodes in full. A
chat template that renders none of the probe conversations (e.g. one that rejects every
role but ``user``/``assistant`` *and* the generation prompt) leaves only ``renderer.encode``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.llm.chat import ChatRenderer
from agentrl.types import Message


def _direct_backend(tokenizer):
    """The ``tokenizers.Tokenizer`` behind ``tokenizer`` when calling it directly is the
    computation of ``tokenizer.encode`` (None otherwise)."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers layout: no fast path
        return None
    cls = type(tokenizer)
    if not isinstance(tokenizer, TokenizersBackend):
        return None
    if cls.encode is not PreTrainedTokenizerBase.encode or cls._encode_plus is not TokenizersBackend._encode_plus:
        return None
    return getattr(tokenizer, "_tokenizer", None)


@dataclass(frozen=True)
class Rendered:
    """A text and its full encode, with the anchors where encoding may restart.

    Attributes:
        text: the text.
        ids: int32[n], ``renderer.encode(text)``.
        cut_tokens / cut_chars: int64[k], token index and character offset of each anchor
            (ascending; empty when the encoder cannot restart).
    """

    text: str
    ids: np.ndarray
    cut_tokens: np.ndarray
    cut_chars: np.ndarray


_NO_CUTS = np.zeros(0, np.int64)


class Encoder:
    """``text -> int32[n]`` ids, equal to ``renderer.encode(text)``; ``render`` for full
    encodes of a growing text.

    Args:
        renderer: the policy's ``ChatRenderer``.
    Attributes:
        direct: the backend fast path is in use.
        incremental: ``render`` restarts at anchors (see the module docstring).
    Not thread-safe on its own (neither is the tokenizer): the proxy calls it under its
    render lock.
    """

    def __init__(self, renderer: ChatRenderer) -> None:
        self.renderer = renderer
        self._split = bool(getattr(renderer.tokenizer, "split_special_tokens", False))
        self._backend = _direct_backend(renderer.tokenizer)
        self._anchors, self._max_added = {}, 0
        self.direct = self.incremental = False
        try:  # a template that renders no probe conversation (TemplateError): renderer.encode only
            self.direct = self._backend is not None and self._probe_direct()
            if self.direct and not self._split:
                added = self._backend.get_added_tokens_decoder()
                if added and not any(t.lstrip or t.rstrip or t.single_word for t in added.values()):
                    self._anchors = {i: t.content for i, t in added.items() if not t.normalized}
                    self._max_added = max(len(t.content) for t in added.values())
            self.incremental = bool(self._anchors) and self._probe_incremental()
        except Exception:  # noqa: BLE001 - any probe failure means: do not trust the fast paths
            self.direct = self.incremental = False

    def _probe_direct(self) -> bool:
        for text in renderer_probe(self.renderer):
            want = self.renderer.encode(text)  # also puts the backend in transformers' encode state
            got = self._encoding(text)
            if got is None or not np.array_equal(got.ids, want):
                return False
        return True

    def _probe_incremental(self) -> bool:
        text = renderer_probe(self.renderer)[0]
        step = max(1, len(text) // 7)
        prev = self.render(text[:step])
        for end in range(2 * step, len(text) + step, step):
            prev = self.render(text[:end], prev)
            if not np.array_equal(prev.ids, self.renderer.encode(prev.text)):
                return False
        return True

    def _encoding(self, text: str):
        """The backend ``Encoding`` of ``text``, or None when the backend is not in
        transformers' encode state."""
        be = self._backend
        if be.truncation is not None or be.padding is not None or be.encode_special_tokens != self._split:
            return None
        return be.encode(text, add_special_tokens=False)

    def __call__(self, text: str) -> np.ndarray:
        if self.direct:
            enc = self._encoding(text)
            if enc is not None:
                return np.asarray(enc.ids, np.int32)
        return self.renderer.encode(text)

    def render(self, text: str, prev: Rendered | None = None) -> Rendered:
        """The full encode of ``text`` (``ids == renderer.encode(text)``), reusing ``prev``
        when ``text`` starts with ``prev.text`` and ``prev`` has an anchor far enough from
        its end; only the text from that anchor on is encoded."""
        a = j = k = 0
        if self.incremental and prev is not None and prev.cut_chars.size and text.startswith(prev.text):
            k = int(np.searchsorted(prev.cut_chars, len(prev.text) - self._max_added, side="right"))
            if k:
                j, a = int(prev.cut_tokens[k - 1]), int(prev.cut_chars[k - 1])
        enc = self._encoding(text[a:]) if self.direct else None
        if enc is None:
            return Rendered(text, self.renderer.encode(text), _NO_CUTS, _NO_CUTS)
        ids, anchors = enc.ids, self._anchors
        tail = np.asarray(ids, np.int32)
        cut_list, char_list = [], []
        for c, i in enumerate(ids):
            content = anchors.get(i)
            if content is not None:
                s, e = enc.token_to_chars(c)
                # an anchor only where the text is the token's own content (an added-token
                # match), not where the model produced it (e.g. <unk> for an unknown char)
                if e - s == len(content) and text.startswith(content, a + s):
                    cut_list.append(c)
                    char_list.append(a + s)
        cuts, chars = np.asarray(cut_list, np.int64), np.asarray(char_list, np.int64)
        if a == 0 and j == 0:
            return Rendered(text, tail, cuts, chars)
        return Rendered(text, np.concatenate([prev.ids[:j], tail]), np.concatenate([prev.cut_tokens[:k - 1], cuts + j]),
                        np.concatenate([prev.cut_chars[:k - 1], chars]))


def renderer_probe(renderer: ChatRenderer) -> list[str]:
    """Texts the fast path must encode exactly as ``renderer.encode``: a rendered
    conversation with every role (with fewer roles when the template rejects some: no tool
    message, then no system message), the template tail, EOS, and non-ASCII text.

    Raises:
        Exception: the template's error (``jinja2.TemplateError``) when it renders none of them.
    """
    conv = [Message("system", "You are an agent."), Message("user", "Héllo wörld — 你好 🙂\n\tx  y"),
            Message("assistant", 'look <tool_call>{"a": 1}</tool_call>'), Message("tool", "ok"),
            Message("user", "  spaced  ")]
    for probe in (conv, conv[:2], conv[1:2]):  # templates that reject tool / system roles: fewer
        try:
            rendered = renderer.render_text(probe, add_generation_prompt=True)
            break
        except Exception as exc:  # noqa: BLE001 - jinja2 TemplateError, or any raise_exception
            error = exc
    else:
        raise error
    return [rendered, renderer.tail_text, renderer.eos_text, " leading space", "trailing space ", ""]
