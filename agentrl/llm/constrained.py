"""Constrained action decoding: a token trie over the admissible commands (no torch).

With ``policy.action_constraint: admissible`` every turn's completion must be one of the
env's admissible actions rendered in the action format (``whole``: the command itself;
``tag:NAME``: ``<NAME>command</NAME>``; ``hiper``: every ``<switch>KEEP|SWITCH</switch><subgoal>g</subgoal>
<action>command</action>`` with ``g`` one of the given subgoal texts — HiPER's tags with the choice of
switch and subgoal left to the policy), tokenized on its own
(``tokenizer.encode(text, add_special_tokens=False)``) and followed by EOS. Decoding
follows a ``TokenTrie`` of these sequences (LEARNING.md: free-form actions from a 135M
model are ~100 % invalid; the constraint gives every turn a valid action and RL signal).

The behaviour logprob of each sampled token is the log-softmax of the raw logits
**restricted to the allowed ids** at that step. The same allowed ids are rebuilt for the
update from what a turn stores (``Turn.info["allowed_actions"]``, ``Turn.info["action_format"]``
and, for ``hiper``, ``Turn.info["hiper_subgoals"]``) with ``turn_allowed_ids``, so the PPO ratio compares the
same renormalised distribution at sampling and at training time. A turn whose admissible
list holds a template with a free slot (``has_template``, e.g. WebShop's
``search[<your query>]``) is left unconstrained.

Sequences are built by ``completion_sequences``; ``TokenTrie.walk`` gives, for a
completion, the allowed ids at each position (int64 arrays); the engine
(``agentrl.llm.hf``) masks logits with ``TokenTrie.allowed``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Mapping, Sequence

import numpy as np

from agentrl.types import Turn

#: ``PolicyConfig.action_constraint`` / ``LoopConfig.action_constraint`` values.
CONSTRAINTS = ("none", "admissible")
#: ``Turn.info`` keys written by a constrained turn.
INFO_ALLOWED = "allowed_actions"
INFO_FORMAT = "action_format"
INFO_DIGEST = "allowed_digest"
INFO_SUBGOALS = "hiper_subgoals"
#: HiPER's action format and the ``<switch>`` values a constrained HiPER turn may write (§14.2).
HIPER = "hiper"
HIPER_SWITCHES = ("KEEP", "SWITCH")

Encode = Callable[[str], Sequence[int]]


def check_constraint(constraint: str, action_format: str) -> None:
    """Validate a constraint name against an action format.

    Raises:
        ValueError: unknown constraint, or ``admissible`` with a format that cannot be
            rendered from an action (``regex:...``); use ``whole`` or ``tag:NAME``.
    """
    if constraint not in CONSTRAINTS:
        raise ValueError(f"action_constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    if constraint == "admissible" and action_format != HIPER:  # hiper: needs its subgoals (rendered_completions)
        render_action("x", action_format)


_TEMPLATE = re.compile(r"<[^<>]+>")


def has_template(actions: Sequence[str]) -> bool:
    """True when an admissible action is a template with a free slot (``search[<your
    query>]`` in WebShop): such a turn cannot be enumerated and stays unconstrained."""
    return any(_TEMPLATE.search(str(a)) for a in actions)


def render_action(action: str, action_format: str) -> str:
    """The completion text (without EOS) of ``action`` in ``action_format``.

    ``whole`` → ``action``; ``tag:NAME`` → ``<NAME>action</NAME>``.
    Raises:
        ValueError: a ``regex:`` or unknown format (a regex cannot be rendered back).
    """
    kind, _, arg = action_format.partition(":")
    if kind == "whole" and not arg:
        return action
    if kind == "tag" and re.fullmatch(r"[A-Za-z_][\w-]*", arg or ""):
        return f"<{arg}>{action}</{arg}>"
    raise ValueError(f"constrained decoding cannot render actions in format {action_format!r}; "
                     f"use policy.action_format 'whole' or 'tag:NAME', or policy.action_constraint none")


def rendered_completions(action: str, action_format: str, subgoals: Sequence[str] = ()) -> list[str]:
    """The completion texts (without EOS) that write ``action`` in ``action_format``: one for
    ``whole`` / ``tag:NAME`` (``render_action``); for ``hiper`` one per (switch, subgoal), switch in
    ``HIPER_SWITCHES`` and subgoal in ``subgoals`` order: ``2 * len(subgoals)`` texts.

    Raises:
        ValueError: ``hiper`` without subgoals (set ``policy.hiper_subgoals``), a blank subgoal, or a
            format ``render_action`` refuses.
    """
    if action_format != HIPER:
        return [render_action(action, action_format)]
    if not subgoals or any(not str(g).strip() for g in subgoals):
        raise ValueError("constrained decoding in the hiper format needs the subgoal texts the policy may choose "
                         f"from (non-blank), got {list(subgoals)!r}: set policy.hiper_subgoals, e.g. "
                         "['reach the next junction', 'take the right exit']")
    return [f"<switch>{sw}</switch><subgoal>{g}</subgoal><action>{action}</action>"
            for sw in HIPER_SWITCHES for g in subgoals]


def completion_sequences(actions: Sequence[str], action_format: str, encode: Encode,
                         eos_token_id: int, subgoals: Sequence[str] = ()) -> list[np.ndarray]:
    """Allowed completions: int64[L + 1] ids of each distinct action's rendered text(s) + EOS
    (``rendered_completions``: one per action, ``2 * len(subgoals)`` per action for ``hiper``).

    Args:
        actions: admissible action strings (duplicates are dropped, order kept).
        action_format: ``whole``, ``tag:NAME`` or ``hiper``.
        encode: text → ids without special tokens (``ChatRenderer.encode``).
        eos_token_id: the id that ends an assistant message.
        subgoals: the ``<subgoal>`` texts a ``hiper`` completion may write (ignored otherwise).
    Raises:
        ValueError: no action, an action whose text encodes to no token, or a bad format.
    """
    uniq = list(dict.fromkeys(str(a) for a in actions))
    if not uniq:
        raise ValueError("constrained decoding needs at least one allowed action")
    out = []
    for a in uniq:
        for text in rendered_completions(a, action_format, subgoals):
            ids = [int(i) for i in encode(text)]
            if not ids:
                raise ValueError(f"action {a!r} encodes to no token; drop empty actions from admissible_actions")
            out.append(np.asarray(ids + [int(eos_token_id)], dtype=np.int64))
    return out


class TokenTrie:
    """Prefix tree of allowed token sequences.

    Args:
        sequences: allowed completions (int ids, each ending with EOS so that no sequence
            is a proper prefix of another).
    Raises:
        ValueError: no sequence, or an empty one.
    """

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        if len(sequences) == 0:
            raise ValueError("TokenTrie needs at least one sequence")
        self.root: dict[int, dict] = {}
        for seq in sequences:
            if len(seq) == 0:
                raise ValueError("TokenTrie got an empty sequence")
            node = self.root
            for tok in seq:
                node = node.setdefault(int(tok), {})
        self._cache: dict[tuple[int, ...], np.ndarray] = {}

    def allowed(self, prefix: Sequence[int]) -> np.ndarray | None:
        """int64[A] sorted ids allowed after ``prefix``; empty when a sequence is complete;
        None when ``prefix`` left the trie."""
        key = tuple(int(t) for t in prefix)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        node = self.root
        for tok in key:
            node = node.get(tok)
            if node is None:
                return None
        ids = np.asarray(sorted(node), dtype=np.int64)
        self._cache[key] = ids
        return ids

    def walk(self, completion_ids: Sequence[int]) -> list[np.ndarray]:
        """Allowed ids at each position of ``completion_ids``: C arrays int64[A_k], each
        containing the token actually at position k.

        Raises:
            ValueError: a token is not allowed at its position (the completion was not
                sampled under this trie).
        """
        out, node = [], self.root
        for k, tok in enumerate(int(t) for t in completion_ids):
            ids = np.asarray(sorted(node), dtype=np.int64)
            if tok not in node:
                raise ValueError(f"completion token {tok} at position {k} is not allowed by the trie "
                                 f"(allowed: {ids[:8].tolist()}...); was it sampled with this constraint?")
            out.append(ids)
            node = node[tok]
        return out

    def branching_ids(self, cap: int) -> list[int]:
        """Sorted ids allowed at the trie's branching nodes (>= 2 children), nodes taken
        breadth-first and whole, while the union stays <= ``cap`` ids (nodes that do not
        fit are skipped). Used by ``VLLMEngine`` to ask for the raw logprobs it renormalises."""
        out: set[int] = set()
        level = [self.root]
        while level:
            nxt = []
            for node in level:
                if len(node) >= 2 and len(out | node.keys()) <= cap:
                    out |= node.keys()
                nxt.extend(node.values())
            level = nxt
        return sorted(out)


def allowed_token_ids(actions: Sequence[str], action_format: str, encode: Encode, eos_token_id: int,
                      completion_ids: Sequence[int], subgoals: Sequence[str] = ()) -> list[np.ndarray]:
    """Per-position allowed ids of a constrained completion (for ``build_batch(allowed=...)``).

    Returns:
        C arrays int64[A_k] (C = ``len(completion_ids)``).
    Raises:
        ValueError: see ``completion_sequences`` and ``TokenTrie.walk``.
    """
    trie = TokenTrie(completion_sequences(actions, action_format, encode, eos_token_id, subgoals))
    return trie.walk(completion_ids)


def allowed_digest(sequences: Sequence[Sequence[int]]) -> str:
    """A digest (16 hex chars of SHA-256) of the allowed completions a constrained turn was
    sampled under: the id sequences, in order. Stored with the turn (``info["allowed_digest"]``)
    so the update can tell the mask it rebuilds from the stored list is the one the sampler used."""
    h = hashlib.sha256()
    for seq in sequences:
        ids = np.asarray(seq, dtype="<i8")
        h.update(np.int64(ids.size).tobytes() + ids.tobytes())
    return h.hexdigest()[:16]


def turn_allowed_ids(turn: Turn, encode: Encode, eos_token_id: int) -> list[np.ndarray] | None:
    """The per-position allowed ids of a stored turn, or None when it was sampled unconstrained
    (no ``allowed_actions`` in ``turn.info``).

    Raises:
        ValueError: the stored completion does not follow its stored constraint, or the stored
            list no longer gives the allowed ids the turn was sampled under (its
            ``allowed_digest``: the list was edited after sampling, or the tokenizer changed).
    """
    actions = turn.info.get(INFO_ALLOWED)
    if not actions:
        return None
    fmt = str(turn.info.get(INFO_FORMAT, "tag:action"))
    subgoals = [str(g) for g in turn.info.get(INFO_SUBGOALS) or ()]
    digest = turn.info.get(INFO_DIGEST)
    if digest is not None and allowed_digest(completion_sequences(actions, fmt, encode, eos_token_id,
                                                                  subgoals)) != digest:
        raise ValueError(f"turn {turn.turn_id} (episode {turn.episode_id}, t={turn.t}): its stored allowed_actions no "
                         f"longer encode to the allowed ids it was sampled under (digest {digest}); the list was "
                         "edited after sampling or the tokenizer changed — the rebuilt mask would move the ratio. "
                         "Train it with the original list and tokenizer, or leave the turn out")
    return allowed_token_ids(actions, fmt, encode, eos_token_id, turn.completion_ids, subgoals)


def constraint_masks(turns: Sequence[Turn], renderer) -> list[list[np.ndarray] | None] | None:
    """``build_batch(allowed=...)`` for ``turns``: per turn ``turn_allowed_ids`` (None for an
    unconstrained turn), or None when no turn was constrained.

    Args:
        turns: stored turns (their ``info`` says whether they were constrained).
        renderer: the policy's ``ChatRenderer`` (``encode`` and ``eos_token_id``).
    """
    out = [turn_allowed_ids(t, renderer.encode, renderer.eos_token_id) for t in turns]
    return out if any(a is not None for a in out) else None


def renormalised_logprob(raw: Mapping[int, float], tok: int) -> float:
    """``raw[tok] - logsumexp(raw.values())``: the logprob of ``tok`` renormalised over the ids
    of ``raw`` (id -> raw logprob, nats), as constrained decoding reports it."""
    v = np.asarray(list(raw.values()), dtype=np.float64)
    m = v.max()
    return float(raw[tok] - (m + np.log(np.exp(v - m).sum())))
