"""``stop`` strings: where a sampled completion ends, without breaking token fidelity.

The engine samples with its stop *ids* only (EOS); the proxy then cuts the completion at the
first stop string, as OpenAI does for the client: the reply's text ends just before the
stop string (which is not returned). What is **recorded** is different on purpose:

* the recorded completion ids are exactly the sampled ones up to and including the token
  that completed the first stop string (the shortest prefix ``ids[:k]`` whose decoded text
  contains a stop string), with their logprobs; the ids sampled after it are dropped
  (``info["stop_cut_tokens"]``). A prefix of an autoregressive sample is itself a sample
  of the policy, so these ids and logprobs are exactly what a stop-aware sampler would have
  produced, and nothing is re-tokenized;
* that last token may hold the stop string and more text (a token ``"\\nObs"`` completing
  the stop ``"\\nO"``); it is kept: the training sequence is what was sampled;
* the next call of the thread continues the *recorded* ids (TITO): prompt + these ids +
  EOS (the completion did not sample it) + the template's bridge + the new messages, so
  the model's context holds the stop string it wrote, exactly as sampled. The harness sends
  back the cut text as the assistant message; that is what the history test compares, so
  the thread extends without a fork.

The finish reason is ``stop`` and ``info["stop"]`` names the stop string matched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from agentrl.llm.base import FINISH_STOP, Completion

__all__ = ["StopCut", "find_stop", "cut_completion"]


@dataclass(frozen=True)
class StopCut:
    """Where a completion ends at a stop string.

    Attributes:
        tokens: ids kept (``ids[:tokens]``; the token completing the stop string is the last).
        chars: length of the reply text (the decoded kept ids before the stop string).
        stop: the stop string matched.
        dropped: sampled ids after the cut (not recorded).
    """

    tokens: int
    chars: int
    stop: str
    dropped: int


def find_stop(decode: Callable[[Sequence[int]], str], ids: Sequence[int], stops: Sequence[str]) -> StopCut | None:
    """The shortest prefix of ``ids`` whose decoded text contains one of ``stops`` (binary
    search over prefixes: ``decode`` runs O(log C) times), or None when the text of all the
    ids contains none. ``chars`` is where the earliest stop string starts in that text."""
    ids = [int(i) for i in ids]
    if not stops or not ids or not any(s in decode(ids) for s in stops):
        return None
    lo, hi = 1, len(ids)  # invariant: decode(ids[:hi]) contains a stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in decode(ids[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    text = decode(ids[:hi])
    chars, stop = min((text.find(s), i, s) for i, s in enumerate(stops) if s in text)[::2]
    return StopCut(hi, chars, stop, len(ids) - hi)


def cut_completion(completion: Completion, cut: StopCut) -> Completion:
    """``completion`` keeping its first ``cut.tokens`` ids (and logprobs, top alternatives),
    finish reason ``stop``."""
    k = cut.tokens
    top = completion.top_ids
    return dataclasses.replace(completion, token_ids=completion.token_ids[:k], logprobs=completion.logprobs[:k],
                               finish_reason=FINISH_STOP, top_ids=None if top is None else top[:k],
                               top_logprobs=None if top is None else completion.top_logprobs[:k])
