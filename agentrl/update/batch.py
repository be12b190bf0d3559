"""Turns → padded training tensors (``TrainBatch``), optionally packing an episode's turns.

One row holds one turn's ``prompt_ids + completion_ids`` (right padded), or, with
``pack=True``, a chain of consecutive turns where each next prompt starts with the previous
prompt + completion (DESIGN.md invariant 1): the row is the last turn's sequence and every
turn's completion tokens are masked in at their own positions. A causal model scores each
token from its prefix only, so packed and unpacked rows give the same logprobs with fewer
tokens. The loss mask is 1 exactly on sampled completion tokens (PITFALLS P3).

Positions: column ``t`` of every (B, T) tensor is token ``input_ids[:, t]``; its logprob is
read from the logits at ``t − 1`` (``agentrl.update.logprobs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.update.bitmask import BatchMasks, pack_masks

__all__ = ["TrainBatch", "build_batch", "pack_chains", "minibatches", "model_device"]


@dataclass(frozen=True, eq=False)
class TrainBatch:
    """Padded tensors for the policy loss; B rows, T columns, N turns.

    Attributes:
        input_ids: (B, T) int64 token ids, right padded with ``pad_id``.
        attention_mask: (B, T) int64, 1 on real tokens, 0 on padding.
        loss_mask: (B, T) float32, 1 exactly on sampled completion tokens, else 0 (and 0 on the
            completion tokens outside ``build_batch``'s ``token_mask``: HiPER's span union).
        advantages: (B, T) float32, each turn's advantage on its completion tokens, else 0.
        old_logprobs: (B, T) float32, π_old of the PPO ratio on completion tokens, else 0: the
            behaviour-policy logprobs as sampled, or the trainer's recomputed ones after
            ``agentrl.update.correction.apply_rollout_correction``.
        turn_ids: (B, T) int64, index (0..N-1) of the turn owning each completion token, −1
            elsewhere; sequence-level aggregations and GSPO group tokens by it.
        turn_row: (N,) int64, the row that holds turn n.
        turn_value_pos: (N,) int64, position of turn n's last prompt token in its row (where
            the turn-level critic reads V(s_n), ALGORITHMS.md §10).
        ref_logprobs: optional (B, T) float32, frozen-reference logprobs (for the KL term).
        returns: optional (N,) float32 critic targets (turn-PPO).
        old_values: optional (N,) float32 critic values at rollout time (value clipping).
        allowed_ids: optional (B, T, A) int64, for constrained completion tokens the ids the
            policy could sample at that position (−1 padded; the sampled id is among them),
            all −1 elsewhere; logprobs and entropy there are renormalised over these ids
            (``agentrl.llm.constrained``). None when no turn was constrained.
        is_weights: optional (B, T) float32 detached importance weights of the rollout
            correction (``agentrl.update.correction``), 0 off the loss mask; the per-token
            policy loss is multiplied by them. None = no correction (weight 1).
        grammar_mask: optional ``agentrl.update.bitmask.BatchMasks``: for grammar-constrained
            completion tokens (forced tool calls, JSON output) the bitmask of the ids the
            policy could sample there; logprobs and entropy are renormalised over them.
        token_episode: optional (B, T) int64, the episode index (0..E-1 over the whole batch,
            not renumbered by ``select``) of each completion token, −1 elsewhere; the
            ``episode-mean-token-mean`` aggregation weighs episodes by it. None = unknown.
        value_low_pos: optional (N,) int64, HiPER's three-head critic: where its low head reads
            V(s_n, g_n) in turn n's row (the last token of its subgoal, ALGORITHMS.md §14.2).
        position_ids: optional (B, T) int64 position of each token in its own sequence; set
            only on a packed micro-batch (``agentrl.update.packing.pack_rows``: several rows
            end to end, positions restarting at 0). None = right padded, position = column.
        turn_key: optional (N,) int64, each turn's own id (the store's turn id), carried through
            ``select`` and packing so the credit audit (``agentrl.update.audit``) can look up the
            estimator's advantage of the turn a token claims to belong to.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor
    turn_ids: torch.Tensor
    turn_row: torch.Tensor
    turn_value_pos: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    allowed_ids: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None
    token_episode: torch.Tensor | None = None
    grammar_mask: BatchMasks | None = None
    position_ids: torch.Tensor | None = None
    value_low_pos: torch.Tensor | None = None
    turn_key: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_turns(self) -> int:
        return int(self.turn_row.shape[0])

    @property
    def num_tokens(self) -> int:
        """Number of trained (loss-mask) tokens."""
        return int(self.loss_mask.sum().item())

    def select(self, rows: Sequence[int] | torch.Tensor) -> "TrainBatch":
        """Sub-batch of ``rows`` (in the given order) with its turns renumbered 0..N'-1
        (in order of their original index) and padding trimmed to the longest selected row."""
        rows = torch.as_tensor(rows, dtype=torch.int64)
        length = max(int(self.attention_mask[rows].sum(1).max().item()), 1) if len(rows) else 1
        new_row = torch.full((self.num_rows,), -1, dtype=torch.int64)
        new_row[rows] = torch.arange(len(rows))
        keep = new_row[self.turn_row] >= 0  # (N,) turns living in the selected rows
        lut = torch.full((self.num_turns + 1,), -1, dtype=torch.int64)  # index −1 → −1
        lut[:-1][keep] = torch.arange(int(keep.sum()))

        def cut(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[rows, :length]

        return TrainBatch(
            input_ids=cut(self.input_ids), attention_mask=cut(self.attention_mask),
            loss_mask=cut(self.loss_mask), advantages=cut(self.advantages),
            old_logprobs=cut(self.old_logprobs), turn_ids=lut[cut(self.turn_ids)],
            turn_row=new_row[self.turn_row[keep]], turn_value_pos=self.turn_value_pos[keep],
            ref_logprobs=cut(self.ref_logprobs),
            returns=None if self.returns is None else self.returns[keep],
            old_values=None if self.old_values is None else self.old_values[keep],
            allowed_ids=cut(self.allowed_ids), is_weights=cut(self.is_weights),
            token_episode=cut(self.token_episode),
            grammar_mask=None if self.grammar_mask is None else self.grammar_mask.select(rows, length),
            position_ids=cut(self.position_ids),
            value_low_pos=None if self.value_low_pos is None else self.value_low_pos[keep],
            turn_key=None if self.turn_key is None else self.turn_key[keep],
        )

    def to(self, device: torch.device | str) -> "TrainBatch":
        """Copy with every tensor on ``device`` (a no-op copy when already there)."""
        moved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return TrainBatch(**{k: None if v is None else v.to(device) for k, v in moved.items()})

    def with_(self, **changes: torch.Tensor | None) -> "TrainBatch":
        """Copy with fields replaced (e.g. ``ref_logprobs=...``, ``returns=...``)."""
        return dataclasses.replace(self, **changes)


def _as_ids(x: object, what: str, i: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what}[{i}] must be a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def _check_inputs(prompt_ids, completion_ids, old_logprobs, advantages) -> tuple[list, list, list, list]:
    n = len(prompt_ids)
    if not (len(completion_ids) == len(old_logprobs) == n):
        raise ValueError(f"prompt_ids, completion_ids and old_logprobs must have one entry per turn; "
                         f"got {n}, {len(completion_ids)}, {len(old_logprobs)}")
    if n == 0:
        raise ValueError("build_batch needs at least one turn")
    prompts = [_as_ids(p, "prompt_ids", i) for i, p in enumerate(prompt_ids)]
    comps = [_as_ids(c, "completion_ids", i) for i, c in enumerate(completion_ids)]
    lps = [np.asarray(lp, dtype=np.float32).reshape(-1) for lp in old_logprobs]
    for i, (p, c, lp) in enumerate(zip(prompts, comps, lps)):
        if p.size == 0:
            raise ValueError(f"turn {i} has an empty prompt; a completion token needs at least one token before it")
        if c.size == 0:
            raise ValueError(f"turn {i} has no completion ids (a text-only turn?): there is nothing to train on; "
                             f"pass only turns with their exact sampled token ids")
        if lp.size != c.size:
            raise ValueError(f"turn {i}: {lp.size} old logprobs for {c.size} completion tokens (need one per token)")
    adv = np.asarray(advantages, dtype=object if _ragged(advantages) else np.float64)
    if adv.dtype != object and adv.ndim == 1:
        if adv.shape != (n,):
            raise ValueError(f"advantages must be float64[N] with N={n} turns, got shape {adv.shape}")
        per_tok = [np.full(c.size, a, dtype=np.float64) for a, c in zip(adv, comps)]
    else:
        per_tok = [np.asarray(a, dtype=np.float64).reshape(-1) for a in advantages]
        if len(per_tok) != n or any(a.size != c.size for a, c in zip(per_tok, comps)):
            raise ValueError("per-token advantages must give one array per turn with one value per completion token")
    if not all(np.isfinite(a).all() for a in per_tok):
        raise ValueError("advantages contain NaN or inf; check the estimator output (failed episodes must be excluded, not NaN)")
    return prompts, comps, lps, per_tok


def _ragged(x: object) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and np.ndim(x[0]) > 0


def pack_chains(prompt_ids: Sequence[np.ndarray], completion_ids: Sequence[np.ndarray]) -> list[list[int]]:
    """Group consecutive turns into chains where turn i+1's prompt starts with turn i's
    prompt + completion (exact token prefix). Returns lists of turn indices, in order."""
    chains: list[list[int]] = [[0]]
    for i in range(1, len(prompt_ids)):
        prev = np.concatenate([np.asarray(prompt_ids[i - 1]), np.asarray(completion_ids[i - 1])])
        p = np.asarray(prompt_ids[i])
        if p.size >= prev.size and np.array_equal(p[: prev.size], prev):
            chains[-1].append(i)
        else:
            chains.append([i])
    return chains


def build_batch(prompt_ids: Sequence[np.ndarray], completion_ids: Sequence[np.ndarray],
                old_logprobs: Sequence[np.ndarray], advantages: np.ndarray | Sequence[np.ndarray],
                pad_id: int, pack: bool = False,
                allowed: Sequence[Sequence[np.ndarray] | None] | None = None,
                episodes: Sequence[int] | np.ndarray | None = None, grammar: Sequence | None = None,
                token_mask: Sequence[np.ndarray | None] | None = None,
                turn_keys: Sequence[int] | np.ndarray | None = None) -> TrainBatch:
    """Build the padded batch for N turns.

    Args:
        prompt_ids: N int arrays (P_i,), exactly the ids the engine was given (non-empty).
        completion_ids: N int arrays (C_i,), exactly the sampled ids (EOS included).
        old_logprobs: N float arrays (C_i,), behaviour logprobs of the sampled ids.
        advantages: float64[N] one value per turn (broadcast over its completion tokens), or
            N float arrays (C_i,) of per-token advantages (token-level GAE, ALGORITHMS.md §11).
        pad_id: id written at padding positions (masked out everywhere).
        pack: put prefix-consistent consecutive turns (same episode, in ``t`` order) in one row.
        allowed: optional, per turn None (unconstrained) or C_i int arrays (A_k,): the ids
            allowed at each completion position under constrained decoding
            (``agentrl.llm.constrained.turn_allowed_ids``); fills ``TrainBatch.allowed_ids``.
        episodes: optional int[N], the episode id of each turn (any integers); fills
            ``TrainBatch.token_episode`` (dense indices in order of first appearance).
        grammar: optional, per turn None or its ``agentrl.llm.grammar.TokenMasks`` (index
            int32[C_i], bits int32[U_i, W]; ``agentrl.llm.grammar.grammar_masks``); fills
            ``TrainBatch.grammar_mask``.
        token_mask: optional, per turn None (every completion token trains) or bool[C_i]: the
            completion tokens that train (HiPER's union of its action, subgoal and switch spans,
            ALGORITHMS.md §14.3, decision D-14a); ``loss_mask`` is 0 on the others, so they get no
            gradient, no KL and no entropy term, and their advantage is 0.
        turn_keys: optional int[N], each turn's own id (e.g. the store's turn id): fills
            ``TrainBatch.turn_key`` for the credit audit.
    Returns:
        ``TrainBatch`` with B = N rows (or one per chain when packing), T = longest row.
    Raises:
        ValueError: mismatched lengths, an empty prompt, non-integer ids, NaN/inf advantages,
            ``allowed`` not matching the completions (or not containing the sampled id),
            ``episodes`` not one per turn, ``grammar`` masks that do not allow the sampled ids,
            ``token_mask`` not one bool[C_i] (or None) per turn, ``turn_keys`` not one per turn.
    """
    prompts, comps, lps, advs = _check_inputs(prompt_ids, completion_ids, old_logprobs, advantages)
    keys = None if turn_keys is None else np.asarray(turn_keys, dtype=np.int64).reshape(-1)
    if keys is not None and keys.size != len(prompts):
        raise ValueError(f"turn_keys has {keys.size} entries for {len(prompts)} turns; pass one id per turn")
    keep = _check_token_mask(token_mask, comps)
    allowed = _check_allowed(allowed, comps)
    chains = pack_chains(prompts, comps) if pack else [[i] for i in range(len(prompts))]
    lengths = [prompts[c[-1]].size + comps[c[-1]].size for c in chains]
    b, t, n = len(chains), max(lengths), len(prompts)
    ids = np.full((b, t), pad_id, dtype=np.int64)
    attn = np.zeros((b, t), dtype=np.int64)
    mask, adv, old = (np.zeros((b, t), dtype=np.float32) for _ in range(3))
    tid = np.full((b, t), -1, dtype=np.int64)
    ep_of_turn = _episode_index(episodes, n)
    tep = None if ep_of_turn is None else np.full((b, t), -1, dtype=np.int64)
    turn_row, value_pos = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for r, chain in enumerate(chains):
        last = chain[-1]
        ids[r, : lengths[r]] = np.concatenate([prompts[last], comps[last]])
        attn[r, : lengths[r]] = 1
        for i in chain:
            s, e = prompts[i].size, prompts[i].size + comps[i].size
            on = 1.0 if keep is None or keep[i] is None else keep[i].astype(np.float32)
            mask[r, s:e], adv[r, s:e], old[r, s:e], tid[r, s:e] = on, advs[i] * on, lps[i], i
            turn_row[i], value_pos[i] = r, s - 1
            if tep is not None:
                tep[r, s:e] = ep_of_turn[i]
    return TrainBatch(
        allowed_ids=_allowed_tensor(allowed, chains, prompts, b, t),
        input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(attn),
        loss_mask=torch.from_numpy(mask), advantages=torch.from_numpy(adv),
        old_logprobs=torch.from_numpy(old), turn_ids=torch.from_numpy(tid),
        turn_row=torch.from_numpy(turn_row), turn_value_pos=torch.from_numpy(value_pos),
        token_episode=None if tep is None else torch.from_numpy(tep),
        grammar_mask=pack_masks(grammar, comps, chains, prompts, b, t),
        turn_key=None if keys is None else torch.from_numpy(keys.copy()),
    )


def _check_token_mask(token_mask, comps: list[np.ndarray]) -> list | None:
    """Validated per-turn bool token masks (None when absent)."""
    if token_mask is None:
        return None
    if len(token_mask) != len(comps):
        raise ValueError(f"token_mask has {len(token_mask)} entries for {len(comps)} turns; pass one (or None) per turn")
    out = []
    for i, (m, c) in enumerate(zip(token_mask, comps)):
        m = None if m is None else np.asarray(m, dtype=bool).reshape(-1)
        if m is not None and m.size != c.size:
            raise ValueError(f"token_mask[{i}] has {m.size} entries for {c.size} completion tokens; pass one per token")
        out.append(m)
    return out


def _episode_index(episodes: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray | None:
    """Dense int64[N] episode index per turn (order of first appearance), or None."""
    if episodes is None:
        return None
    ids = np.asarray(episodes).reshape(-1)
    if ids.size != n:
        raise ValueError(f"episodes has {ids.size} entries for {n} turns; pass the episode id of every turn")
    if ids.dtype.kind == "f" and not np.isfinite(ids).all():  # np.unique would merge every NaN into one episode
        raise ValueError("episodes has NaN or inf ids; pass the episode id of every turn")
    try:
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    except TypeError as exc:  # e.g. None among the ids
        raise ValueError(f"episodes must be comparable ids (ints or strings), got {ids[:5].tolist()} ({exc})") from None
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse]


def _check_allowed(allowed, comps: list[np.ndarray]) -> list | None:
    """Validated per-turn allowed ids (None when absent or no turn is constrained)."""
    if allowed is None or all(a is None for a in allowed):
        return None
    if len(allowed) != len(comps):
        raise ValueError(f"allowed has {len(allowed)} entries for {len(comps)} turns; pass one (or None) per turn")
    out = []
    for i, (a, c) in enumerate(zip(allowed, comps)):
        if a is None:
            out.append(None)
            continue
        sets = [np.asarray(x, dtype=np.int64).reshape(-1) for x in a]
        if len(sets) != c.size or any(tok not in s for tok, s in zip(c.tolist(), sets)):
            raise ValueError(f"turn {i}: allowed ids must give one set per completion token ({c.size}), "
                             f"each containing the sampled id; rebuild them with turn_allowed_ids")
        out.append(sets)
    return out


def _allowed_tensor(allowed: list | None, chains: list[list[int]], prompts: list[np.ndarray], b: int,
                    t: int) -> torch.Tensor | None:
    """(B, T, A) int64 allowed ids at constrained completion positions, −1 elsewhere."""
    if allowed is None:
        return None
    width = max(len(s) for a in allowed if a is not None for s in a) if any(a for a in allowed if a) else 1
    out = np.full((b, t, max(width, 1)), -1, dtype=np.int64)
    for r, chain in enumerate(chains):
        for i in chain:
            for k, ids in enumerate(allowed[i] or ()):
                out[r, prompts[i].size + k, : ids.size] = ids
    return torch.from_numpy(out)


def minibatches(num_rows: int, size: int, *, seed: int | None = None) -> list[torch.Tensor]:
    """Split rows 0..num_rows-1 into consecutive chunks of ``size`` (0 = one chunk), after a
    seeded shuffle when ``seed`` is given. Returns int64 index tensors."""
    if num_rows < 1:
        raise ValueError("minibatches needs at least one row")
    order = torch.arange(num_rows)
    if seed is not None:
        order = order[torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))]
    size = num_rows if size <= 0 else size
    return list(order.split(size))


def model_device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for a parameterless module)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))
