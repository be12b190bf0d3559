"""Grammar masks in the HF engine's decoding loop (torch side of ``agentrl.llm.grammar``).

``GrammarLogits`` is a transformers logits processor: per row it advances that row's
llguidance matcher by the token sampled at the previous step, writes the next bitmask
(int32[W]) into the row's record and sets the scores of the ids it does not allow to −inf
(before temperature / top-p, which transformers applies after custom processors, so they
warp the restricted distribution). ``agentrl.llm.step_logprobs`` then takes the logprobs of
the sampled ids from the raw logits, renormalised over the recorded masks — the numbers the
update recomputes from the same masks (``agentrl.update.bitmask``). ``unpack_bits`` is the
one bitmask → bool decoder both sides use.
"""

from __future__ import annotations

import numpy as np
import torch

from agentrl.llm.grammar import Grammar, one_hot_mask
from agentrl.llm.grammar_close import MARGIN, WINDOW, closing_path

__all__ = ["unpack_bits", "GrammarLogits"]

_SHIFTS = torch.arange(32, dtype=torch.int32)


def unpack_bits(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """(..., W) int32 bitmasks → (..., vocab) bool (ids ≥ 32·W are False)."""
    shifts = _SHIFTS.to(bits.device)
    out = ((bits.unsqueeze(-1) >> shifts) & 1).bool().flatten(-2)  # (..., 32·W)
    if out.shape[-1] >= vocab:
        return out[..., :vocab]
    return torch.cat([out, out.new_zeros(*out.shape[:-1], vocab - out.shape[-1])], dim=-1)


class GrammarLogits:
    """Logits processor: row b may only sample what its grammar allows next.

    With ``budgets``, a row whose shortest way to finish no longer fits its remaining budget
    (plus ``grammar_close.MARGIN``) follows that way from then on: one allowed id per step,
    EOS last (``agentrl.llm.grammar_close``), so it ends well-formed instead of truncated.

    Args:
        grammars: per row a compiled ``Grammar`` or None (left alone).
        prompt_width: columns of the (left-padded) prompt in ``input_ids``.
        stops: ids that end a completion (a row is finished once it sampled one).
        budgets: per row the most new tokens it may sample, or None (no budget-aware closing).
    Attributes:
        masks: per row the list of int32[W] bitmasks, one per step it was constrained at.
        close_at: per row the first step of the forced closing path, or None.
    Raises:
        ValueError: a grammar does not compile (from ``Grammar.matcher``).
    """

    def __init__(self, grammars: list[Grammar | None], prompt_width: int, stops: set[int],
                 budgets: list[int] | None = None) -> None:
        self.grammars, self.width, self.stops = grammars, prompt_width, stops
        self.budgets = list(budgets) if budgets is not None else [None] * len(grammars)
        self.matchers = [None if g is None else g.matcher() for g in grammars]
        self.masks: list[list[np.ndarray]] = [[] for _ in grammars]
        self.close_at: list[int | None] = [None] * len(grammars)
        self._paths: list[list[int] | None] = [None] * len(grammars)
        self._done = [g is None for g in grammars]

    def _next_mask(self, b: int, g: Grammar, m, step: int) -> np.ndarray:
        """Row b's int32[W] bitmask at ``step``: the grammar's, or one-hot on the closing path."""
        buf = np.empty(g.width, dtype=np.int32)
        left = None if self.budgets[b] is None else self.budgets[b] - step  # this step included
        if self._paths[b] is None and left is not None and left <= WINDOW:
            path = closing_path(g, m)
            if path is not None and len(path) + MARGIN >= left:
                self._paths[b], self.close_at[b] = path, step
        path = self._paths[b]
        if path is None or step - self.close_at[b] >= len(path):
            g.fill(m, buf)
            return buf
        return one_hot_mask(path[step - self.close_at[b]], buf)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.width
        for b, (g, m) in enumerate(zip(self.grammars, self.matchers)):
            if self._done[b]:
                continue
            if step > 0:
                tok = int(input_ids[b, -1])
                if tok in self.stops or not m.consume_token(tok):
                    self._done[b] = True
                    continue
            buf = self._next_mask(b, g, m, step)
            self.masks[b].append(buf)
            allowed = unpack_bits(torch.from_numpy(buf).to(scores.device), scores.shape[-1])
            if allowed.any():  # an empty mask (matcher error) would leave nothing to sample
                scores[b] = scores[b].masked_fill(~allowed, float("-inf"))
        return scores

