"""Token trie, action rendering and per-position allowed ids (no torch)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agentrl.llm.constrained import (TokenTrie, allowed_token_ids, check_constraint, completion_sequences,
                                     render_action, turn_allowed_ids)
from agentrl.types import Turn

EOS = 99


def _encode(text: str) -> list[int]:
    """Toy encoder: one id per character (ord)."""
    return [ord(c) for c in text]


def test_render_action_formats():
    assert render_action("go east", "whole") == "go east"
    assert render_action("go east", "tag:action") == "<action>go east</action>"
    with pytest.raises(ValueError, match="whole"):
        render_action("go east", "regex:(.*)")
    with pytest.raises(ValueError, match="action_constraint"):
        check_constraint("maybe", "whole")
    check_constraint("none", "regex:(.*)")  # no constraint: any format


def test_completion_sequences_dedupe_and_eos():
    seqs = completion_sequences(["ab", "ac", "ab"], "whole", _encode, EOS)
    assert [s.tolist() for s in seqs] == [[97, 98, EOS], [97, 99, EOS]]
    with pytest.raises(ValueError, match="at least one"):
        completion_sequences([], "whole", _encode, EOS)


def test_trie_allowed_and_walk_by_hand():
    trie = TokenTrie([[1, 2, EOS], [1, 3, EOS], [4, EOS]])
    assert trie.allowed([]).tolist() == [1, 4]
    assert trie.allowed([1]).tolist() == [2, 3]
    assert trie.allowed([1, 3]).tolist() == [EOS]
    assert trie.allowed([1, 3, EOS]).tolist() == []
    assert trie.allowed([5]) is None
    walk = trie.walk([1, 3, EOS])
    assert [w.tolist() for w in walk] == [[1, 4], [2, 3], [EOS]]
    assert [w.tolist() for w in trie.walk([1])] == [[1, 4]]  # a completion cut by length
    with pytest.raises(ValueError, match="not allowed"):
        trie.walk([1, 4])


def test_turn_allowed_ids_rebuilds_the_trie():
    comp = np.asarray([ord(c) for c in "<a>x</a>"] + [EOS])
    turn = Turn(run_id="r", episode_id=0, group_id=0, t=0, observation="", anchor_obs="", action="x",
                action_valid=True, reward=0.0, prompt_ids=[1], completion_ids=comp, completion_logprobs=np.zeros(9),
                info={"allowed_actions": ["x", "y"], "action_format": "tag:a"})
    got = turn_allowed_ids(turn, _encode, EOS)
    want = allowed_token_ids(["x", "y"], "tag:a", _encode, EOS, comp)
    assert len(got) == 9 and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert got[3].tolist() == [ord("x"), ord("y")]  # the only branching position
    assert all(g.size == 1 for k, g in enumerate(got) if k != 3)
    turn.info = {}
    assert turn_allowed_ids(turn, _encode, EOS) is None


def test_constraint_masks_none_when_no_turn_is_constrained():
    from agentrl.llm.constrained import constraint_masks

    class R:
        eos_token_id = EOS

        @staticmethod
        def encode(text):
            return _encode(text)

    free = Turn(run_id="r", episode_id=0, group_id=0, t=0, observation="", anchor_obs="", action="x",
                action_valid=True, reward=0.0, prompt_ids=[1], completion_ids=[120, EOS], completion_logprobs=[0, 0])
    assert constraint_masks([free], R) is None
    held = dataclasses.replace(free, info={"allowed_actions": ["x", "yz"], "action_format": "whole"})
    got = constraint_masks([free, held], R)
    assert got[0] is None and [a.tolist() for a in got[1]] == [[120, 121], [EOS]]


def test_template_actions_are_detected():
    from agentrl.llm.constrained import has_template

    assert has_template(["search[<your query>]"])
    assert not has_template(["click[buy now]", "go east", "put a < b"])
