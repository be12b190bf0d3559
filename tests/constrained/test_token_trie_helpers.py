"""TokenTrie.branching_ids and renormalised_logprob (used by VLLMEngine's constrained decoding)."""

from __future__ import annotations

import math

import pytest

from agentrl.llm.constrained import TokenTrie, renormalised_logprob


def test_branching_ids_takes_whole_branching_nodes_within_the_cap():
    # root branches {1, 2}; under 1: {3, 4, 5}; under 2: a single chain (not branching)
    trie = TokenTrie([[1, 3, 0], [1, 4, 0], [1, 5, 0], [2, 6, 0]])
    assert trie.branching_ids(10) == [1, 2, 3, 4, 5]
    assert trie.branching_ids(4) == [1, 2]  # the {3, 4, 5} node would make 5 ids: skipped whole
    assert trie.branching_ids(1) == []
    assert TokenTrie([[7, 0]]).branching_ids(10) == []


def test_renormalised_logprob_is_log_softmax_over_the_given_ids():
    raw = {3: math.log(0.2), 4: math.log(0.1), 5: math.log(0.1)}
    assert renormalised_logprob(raw, 3) == pytest.approx(math.log(0.5))
    assert renormalised_logprob(raw, 4) == pytest.approx(math.log(0.25))
    assert renormalised_logprob({9: -1e4, 8: -1e4 - math.log(3)}, 9) == pytest.approx(math.log(0.75))
