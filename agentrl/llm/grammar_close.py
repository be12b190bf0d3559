"""Budget-aware closing of a grammar-constrained completion (no torch).

A grammar guarantees the *shape* of what is written, not that it ends within ``max_tokens``:
a small model keeps writing an unbounded JSON string, array or number until the budget runs
out, and the truncated completion does not parse (benchmarks/grammar.py: 4 of 50 at T = 1 on
SmolLM2). ``GrammarLogits`` therefore watches each row's remaining budget and, when the
shortest way to finish from the current state no longer fits with ``MARGIN`` tokens to spare,
*forces* that way: from then on the row's mask allows exactly one id per step (logprob 0 under
the constrained distribution, recomputed as 0 by the update from the same one-hot mask), and
the completion ends with EOS inside its budget.

``closing_path`` finds that way greedily on a copy of the llguidance matcher: at each step EOS
when the grammar accepts, else the first allowed id from a ranked list of closers — inside a
free string (``x`` is allowed) ``"}`` → ``"]`` → ``"``; elsewhere ``}`` → ``]`` → ``,`` → ``""``
→ ``0`` → ``[]`` → ``true`` … (each also with a leading space, as after ``": "``) — else the
allowed id with the most bytes (an enum's word, a forced key). The path is a deterministic function of the matcher state, so the stored
completion and ``turn.info["grammar_close_at"]`` (the first forced position) are enough for
``Grammar.masks`` to rebuild the same masks.

The guarantee has two limits, both measured in benchmarks/grammar.py: a budget shorter than
the shortest completion still truncates, and one free token that lengthens the shortest
completion by more than ``MARGIN`` (e.g. opening a deeply nested object with many required
keys close to the budget) can leave too little room.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

__all__ = ["WINDOW", "MARGIN", "PATH_LIMIT", "CloseTable", "closing_path", "close_table"]

#: A row's closing path is computed at every step once at most this many tokens of its budget remain.
WINDOW = 96
#: Spare tokens kept: closing is forced when len(path) + MARGIN ≥ tokens left.
MARGIN = 8
#: A path longer than this is not looked for (no forcing; the row may then truncate).
PATH_LIMIT = 128
#: Closers inside a string (where ``}``, ``]`` and ``,`` are content) and elsewhere, in preference order.
_IN_STRING = ('"}}', '"}', '"]', '"')
_ELSEWHERE = ('}}', ']}', '}]', '}', ']', ',', '""', '0', '[]', '{}', 'true', 'null', '[', '{')
_PROBE = b"x"  # allowed inside a free string, never in a number, a literal or between values


class CloseTable:
    """Per-tokenizer tables for ``closing_path`` (built once, ~50 ms for a 49k vocabulary).

    Attributes:
        nbytes: int32[V], the byte length of each id's text (special tokens: 0).
        in_string / elsewhere: int64[K], ids whose text is a closer inside a string / elsewhere,
            in preference order (each closer also with a leading space, then a lone space).
        probe: the id of ``x`` (allowed ⇒ inside a free string), or -1.
        eos: the id that ends the completion.
    """

    def __init__(self, lltok, vocab: int, eos: int) -> None:
        self.eos = int(eos)
        self.nbytes = np.zeros(vocab, dtype=np.int32)
        lists = [[t.encode() for c in cl for t in (c, " " + c)] + [b" "] for cl in (_IN_STRING, _ELSEWHERE)]
        rank: dict[bytes, list[int]] = {t: [] for t in (*lists[0], *lists[1], _PROBE)}
        for i in range(vocab):
            if lltok.is_special_token(i):
                continue
            b = lltok.decode_bytes([i])
            self.nbytes[i] = len(b)
            if b in rank:
                rank[b].append(i)
        self.in_string, self.elsewhere = (np.asarray([i for t in ts for i in rank[t]], dtype=np.int64) for ts in lists)
        self.probe = rank[_PROBE][0] if rank[_PROBE] else -1


_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def close_table(grammar) -> CloseTable:
    """The (cached) ``CloseTable`` of a compiled ``Grammar``'s tokenizer and EOS."""
    with _LOCK:
        key = grammar.compiler
        hit = _TABLES.get(key)
        if hit is None:
            hit = _TABLES[key] = CloseTable(key._ll, grammar.vocab, key.eos_token_id)
        return hit


def _bits(buf: np.ndarray, vocab: int) -> np.ndarray:
    """bool[vocab] from an int32[W] bitmask (little-endian bit order)."""
    return np.unpackbits(buf.view(np.uint8), bitorder="little")[:vocab].astype(bool)


def closing_path(grammar, matcher, limit: int = PATH_LIMIT) -> list[int] | None:
    """The ids that finish the completion from ``matcher``'s state, EOS last (``matcher`` untouched).

    Args:
        grammar: the compiled ``agentrl.llm.grammar.Grammar`` the matcher walks.
        matcher: its ``llguidance.LLMatcher`` at the current position.
        limit: the longest path looked for.
    Returns:
        list of ≤ ``limit`` token ids, each allowed where it stands, ending with EOS; None when
        no path of that length was found (or the matcher is in error).
    """
    table = close_table(grammar)
    m = matcher.deep_copy()
    buf = np.empty(grammar.width, dtype=np.int32)
    path: list[int] = []
    while len(path) < limit:
        if m.is_error():
            return None
        grammar.fill(m, buf)
        allowed = _bits(buf, grammar.vocab)
        if table.eos < grammar.vocab and allowed[table.eos] and m.is_accepting():
            path.append(table.eos)
            return path
        closers = table.in_string if table.probe >= 0 and allowed[table.probe] else table.elsewhere
        hit = closers[allowed[closers]]
        if hit.size:
            tok = int(hit[0])
        else:
            ids = np.flatnonzero(allowed)
            if ids.size == 0:
                return None
            tok = int(ids[np.argmax(table.nbytes[ids])])
        if not m.consume_token(tok):
            return None
        path.append(tok)
    return None
