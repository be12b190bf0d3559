"""Grammar-constrained generation (forced tool calls, JSON output) on llguidance (no torch).

A ``GrammarSpec`` says what a completion must be:

* ``json_schema`` — one JSON value valid under ``schema`` (``json_object``: any JSON object,
  the schema ``{"type": "object"}``), then EOS;
* ``tool_call`` — one call of one of ``tools`` in the Hermes / Qwen format that
  ``agentrl.llm.tool_text`` parses, ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>``,
  the arguments valid under that tool's parameter schema, then EOS. The tags are the
  tokenizer's special tokens when it has them as single tokens (Qwen, the tiny test
  tokenizer), else plain text (SmolLM2).

JSON is written compactly and deterministically (``", "`` and ``": "`` separators, no free
whitespace: ``x-guidance`` options unless the schema sets its own), so a small model cannot
spend its budget on blank lines. ``GrammarCompiler`` binds specs to one Hugging Face fast
tokenizer (llguidance's ``LLTokenizer``, ~1 s to build, cached) and compiles each into a
``Grammar`` whose ``matcher()`` walks a completion token by token.

**Exactness.** At each step the engine allows exactly the ids of the matcher's bitmask
(int32[W], W = ceil(V_tok / 32), bit ``i % 32`` of word ``i // 32`` = id i allowed; ids ≥
V_tok are never allowed) and the behaviour logprob is the raw-logit log-softmax renormalised
over them. A turn stores ``info["grammar"]`` (``GrammarSpec.to_info()``) and
``info["grammar_digest"]`` (``mask_digest`` of the per-step bitmasks as sampled);
``turn_grammar_masks`` replays the stored completion through a fresh matcher and returns the
same bitmasks as ``TokenMasks`` for ``build_batch(grammar=...)``. When the budget forced the
shortest way to finish (``agentrl.llm.grammar_close``), ``info["grammar_close_at"]`` is the
first forced position; from there each mask allows only the stored id (logprob 0 both sides).

Representation: the allowed set inside a JSON string is most of the vocabulary (48,769 of
SmolLM2's 49,152 ids), so a per-position id list would be (C, ~V) int64 — 393 KB a token.
A bitmask is V / 8 bytes (6 KB for SmolLM2), and a completion's steps share few distinct
masks (every step inside a string has the same one), so a turn stores its distinct masks once
(``TokenMasks.bits``, int32[U, W]) and an index per position (``TokenMasks.index``, int32[C]).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from agentrl.llm.tool_text import CLOSE_TAG, OPEN_TAG
from agentrl.types import Turn

__all__ = ["KINDS", "INFO_GRAMMAR", "INFO_DIGEST", "INFO_CLOSE", "GrammarSpec", "Grammar", "GrammarCompiler",
           "TokenMasks", "allowed_of", "one_hot_mask", "mask_digest", "compiler_for", "grammar_info", "turn_grammar_masks", "grammar_masks"]

#: ``GrammarSpec.kind`` values.
KINDS = ("json_schema", "tool_call")
#: ``Turn.info`` keys written by a grammar-constrained turn (``grammar_close_at``: only when
#: the budget forced the closing path, its first position).
INFO_GRAMMAR, INFO_DIGEST, INFO_CLOSE = "grammar", "grammar_digest", "grammar_close_at"
_COMPACT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True)
class GrammarSpec:
    """What a constrained completion must be (hashable; the compile cache key).

    Attributes:
        kind: ``json_schema`` or ``tool_call``.
        schema: ``json_schema``: the JSON schema as compact JSON text (keys in the order sent).
        tools: ``tool_call``: ``(name, parameters schema as compact JSON text)`` per allowed
            tool, in the order offered.
    Raises:
        ValueError: unknown kind, a schema that is not a JSON object, no tool, or a tool name
            outside ``[A-Za-z0-9_.:-]{1,128}``.
    """

    kind: str
    schema: str = ""
    tools: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"grammar kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "json_schema" and not isinstance(json.loads(self.schema or "null"), dict):
            raise ValueError("a json_schema grammar needs a JSON schema object, e.g. {\"type\": \"object\"}")
        if self.kind == "tool_call":
            if not self.tools:
                raise ValueError("a tool_call grammar needs at least one tool; offer the tool in 'tools'")
            for name, params in self.tools:
                if not _NAME.fullmatch(name):
                    raise ValueError(f"tool name {name!r} cannot be forced: use letters, digits, '_', '.', ':' "
                                     "or '-' (at most 128)")
                if not isinstance(json.loads(params), dict):
                    raise ValueError(f"tool {name!r}: its parameters must be a JSON schema object")

    @classmethod
    def json_schema(cls, schema: Mapping | None = None) -> "GrammarSpec":
        """Any JSON object (``schema`` None) or a value valid under ``schema``."""
        return cls("json_schema", _canonical(schema if schema is not None else {"type": "object"}))

    @classmethod
    def tool_call(cls, tools: Sequence[tuple[str, Mapping | None]]) -> "GrammarSpec":
        """One call of one of ``tools`` (``(name, parameters schema or None)``; None = any object)."""
        return cls("tool_call", tools=tuple((str(n), _canonical(p or {"type": "object"})) for n, p in tools))

    def to_info(self) -> dict:
        """JSON-able form for ``Turn.info["grammar"]`` (read back by ``from_info``)."""
        return {"kind": self.kind, "schema": self.schema, "tools": [list(t) for t in self.tools]}

    @classmethod
    def from_info(cls, info: Mapping) -> "GrammarSpec":
        """Inverse of ``to_info``. Raises ``ValueError`` on a malformed record."""
        try:
            return cls(str(info["kind"]), str(info.get("schema", "")),
                       tuple((str(n), str(p)) for n, p in info.get("tools", ())))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed stored grammar {dict(info)!r} ({exc})") from None


def _canonical(obj: Mapping) -> str:
    """Compact JSON text, keys in the order sent: llguidance writes an object's properties in
    schema order, so sorting them would make the model write ``body`` before ``to``."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _json_rule(schema_text: str) -> str:
    schema = json.loads(schema_text)
    if "x-guidance" not in schema:
        schema = {**schema, "x-guidance": _COMPACT}
    return "%json " + json.dumps(schema, ensure_ascii=False)


def lark_text(spec: GrammarSpec, special_tags: bool) -> str:
    """The Lark grammar (llguidance dialect) of ``spec``; ``special_tags``: the tool-call tags
    are single special tokens of the tokenizer (written ``<tool_call>``, unquoted)."""
    if spec.kind == "json_schema":
        return f"start: {_json_rule(spec.schema)}\n"
    tag = (lambda t: t) if special_tags else json.dumps
    lines = [f'start: {tag(OPEN_TAG)} "\\n" call "\\n" {tag(CLOSE_TAG)}',
             "call: " + " | ".join(f"c{i}" for i in range(len(spec.tools)))]
    for i, (name, params) in enumerate(spec.tools):
        head = json.dumps(f'{{"name": {json.dumps(name)}, "arguments": ')
        lines.append(f'c{i}: {head} a{i} "}}"')
        lines.append(f"a{i}: {_json_rule(params)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, eq=False)
class TokenMasks:
    """The allowed ids at each position of one constrained completion.

    Attributes:
        index: int32[C], row of ``bits`` that holds position k's mask.
        bits: int32[U, W] distinct bitmasks (W = ceil(V_tok / 32); bit ``i % 32`` of word
            ``i // 32`` set = id i allowed).
    """

    index: np.ndarray
    bits: np.ndarray

    def rows(self) -> np.ndarray:
        """int32[C, W]: the bitmask of every position, in order."""
        return self.bits[self.index]


def allowed_of(mask: np.ndarray, vocab: int) -> np.ndarray:
    """bool[V] from one int32[W] bitmask (ids ≥ 32·W are False)."""
    bits = ((mask.astype(np.int64)[:, None] >> np.arange(32)) & 1).reshape(-1).astype(bool)
    out = np.zeros(vocab, dtype=bool)
    n = min(vocab, bits.size)
    out[:n] = bits[:n]
    return out


def one_hot_mask(tok: int, out: np.ndarray) -> np.ndarray:
    """Write into ``out`` (int32[W]) the bitmask that allows only id ``tok``; returns ``out``."""
    out[:] = 0
    out.view(np.uint32)[tok // 32] = 1 << (tok % 32)
    return out


def mask_digest(rows: np.ndarray) -> str:
    """16 hex chars of SHA-256 over int32[C, W] per-position bitmasks (little-endian, in order)."""
    rows = np.ascontiguousarray(rows, dtype="<i4")
    return hashlib.sha256(np.int64(rows.shape[0]).tobytes() + rows.tobytes()).hexdigest()[:16]


class Grammar:
    """A spec compiled for one tokenizer. ``matcher()`` gives a fresh ``llguidance.LLMatcher``;
    ``width`` is W, the int32 words of one bitmask; ``vocab`` is V_tok."""

    def __init__(self, spec: GrammarSpec, tokenizer, lark: str, compiler: "GrammarCompiler | None" = None) -> None:
        self.spec, self._tok, self.lark, self.compiler = spec, tokenizer, lark, compiler
        self.vocab = int(tokenizer.vocab_size)
        self.width = (self.vocab + 31) // 32

    def matcher(self):
        """A fresh matcher at the start of the completion.

        Raises:
            ValueError: llguidance rejects the grammar (names its error).
        """
        import llguidance

        m = llguidance.LLMatcher(self._tok, self.lark, log_level=0)
        if m.is_error():
            raise ValueError(f"the {self.spec.kind} grammar does not compile: {m.get_error()}")
        return m

    def fill(self, matcher, out: np.ndarray) -> None:
        """Write the matcher's next-token bitmask into ``out`` (int32[W], C-contiguous)."""
        matcher.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)

    def masks(self, completion_ids: Sequence[int], close_at: int | None = None) -> TokenMasks:
        """Replay ``completion_ids`` (C ids, EOS included when sampled) through a fresh
        matcher: the bitmask before each token, deduplicated. From position ``close_at`` on
        (``Completion.grammar_close_at``: the budget forced the closing path there,
        ``agentrl.llm.grammar_close``) each mask allows only the stored id.

        Raises:
            ValueError: a token the grammar does not allow at its position (the completion was
                not sampled under this grammar).
        """
        m, rows, index = self.matcher(), {}, []
        buf = np.empty(self.width, dtype=np.int32)
        for k, tok in enumerate(int(t) for t in completion_ids):
            self.fill(m, buf)
            if not (0 <= tok < self.vocab and (int(buf[tok // 32]) >> (tok % 32)) & 1):
                raise ValueError(f"completion token {tok} at position {k} is not allowed by the stored "
                                 f"{self.spec.kind} grammar; was it sampled with this grammar and tokenizer?")
            if close_at is not None and k >= close_at:
                one_hot_mask(tok, buf)
            index.append(rows.setdefault(buf.tobytes(), len(rows)))
            if k + 1 < len(completion_ids):
                m.consume_token(tok)
        bits = np.frombuffer(b"".join(rows), dtype=np.int32).reshape(len(rows), self.width) if rows else \
            np.zeros((0, self.width), np.int32)
        return TokenMasks(np.asarray(index, dtype=np.int32), bits.copy())


class GrammarCompiler:
    """Compile ``GrammarSpec``s for one Hugging Face fast tokenizer (thread-safe, cached).

    Args:
        tokenizer: a ``PreTrainedTokenizerFast`` (the policy's).
        eos_token_id: the id that ends an assistant message (allowed once the grammar is complete).
    Raises:
        ImportError: llguidance is not installed (``pip install 'agentrl[grammar]'``).
    """

    def __init__(self, tokenizer, eos_token_id: int) -> None:
        try:
            import llguidance.hf
        except ImportError as exc:
            raise ImportError("constrained generation needs llguidance: pip install 'agentrl[grammar]'") from exc
        self._hf, self.eos_token_id = tokenizer, int(eos_token_id)
        self._ll = llguidance.hf.from_tokenizer(tokenizer, eos_token=self.eos_token_id)
        self._special = all(len(tokenizer.encode(t, add_special_tokens=False)) == 1 for t in (OPEN_TAG, CLOSE_TAG))
        self._cache: dict[GrammarSpec, Grammar] = {}
        self._lock = threading.Lock()

    def compile(self, spec: GrammarSpec) -> Grammar:
        """The compiled grammar of ``spec``. Raises ``ValueError`` when llguidance rejects it
        (e.g. an unsupported schema keyword), naming the error."""
        import llguidance

        with self._lock:
            hit = self._cache.get(spec)
            if hit is None:
                lark = lark_text(spec, self._special)
                err = llguidance.LLMatcher.validate_grammar(lark, self._ll)
                if err and not err.startswith("WARNING"):
                    raise ValueError(f"the {spec.kind} grammar cannot be built: {err}")
                hit = self._cache[spec] = Grammar(spec, self._ll, lark, self)
                if len(self._cache) > 256:
                    self._cache.pop(next(iter(self._cache)))
            return hit


_COMPILERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_COMPILERS_LOCK = threading.Lock()


def compiler_for(renderer) -> GrammarCompiler:
    """The (cached) ``GrammarCompiler`` of a ``ChatRenderer`` (its tokenizer and EOS)."""
    with _COMPILERS_LOCK:
        hit = _COMPILERS.get(renderer)
        if hit is None:
            hit = _COMPILERS[renderer] = GrammarCompiler(renderer.tokenizer, renderer.eos_token_id)
        return hit


def grammar_info(spec: GrammarSpec, completion) -> dict:
    """The ``Turn.info`` entries of a completion sampled under ``spec`` (an
    ``agentrl.llm.base.Completion``; ``token_ids`` may have been cut, e.g. by a stop string):
    ``grammar``, ``grammar_digest`` of its masks, and ``grammar_close_at`` when the budget
    forced the closing path inside what was kept."""
    info: dict = {INFO_GRAMMAR: spec.to_info()}
    n = int(np.asarray(completion.token_ids).size)
    if completion.grammar_masks is not None:
        info[INFO_DIGEST] = mask_digest(completion.grammar_masks[:n])
    close_at = getattr(completion, "grammar_close_at", None)
    if close_at is not None and close_at < n:
        info[INFO_CLOSE] = int(close_at)
    return info


def turn_grammar_masks(turn: Turn, compiler: GrammarCompiler) -> TokenMasks | None:
    """The per-position allowed ids of a stored turn, or None when no grammar constrained it.

    Raises:
        ValueError: a malformed stored grammar, a completion the grammar does not allow, or
            masks that differ from those it was sampled under (``grammar_digest``: another
            tokenizer or llguidance version) — the rebuilt mask would move the ratio.
    """
    stored = turn.info.get(INFO_GRAMMAR)
    if not stored or turn.completion_ids is None or len(turn.completion_ids) == 0:
        return None
    close_at = turn.info.get(INFO_CLOSE)
    masks = compiler.compile(GrammarSpec.from_info(stored)).masks(
        turn.completion_ids, None if close_at is None else int(close_at))
    digest = turn.info.get(INFO_DIGEST)
    if digest is not None and mask_digest(masks.rows()) != digest:
        raise ValueError(f"turn {turn.turn_id} (episode {turn.episode_id}, t={turn.t}): the rebuilt grammar masks "
                         f"differ from those it was sampled under (digest {digest}); train it with the tokenizer "
                         "and llguidance version that sampled it, or leave the turn out")
    return masks


def grammar_masks(turns: Sequence[Turn], renderer) -> list[TokenMasks | None] | None:
    """``build_batch(grammar=...)`` for ``turns``: per turn ``turn_grammar_masks`` (None when
    unconstrained), or None when no turn was grammar-constrained (llguidance is then not needed)."""
    if not any(t.info.get(INFO_GRAMMAR) for t in turns):
        return None
    comp = compiler_for(renderer)
    return [turn_grammar_masks(t, comp) for t in turns]
