"""Issue 23 item 6: the store records each run's tokenizer, so the viewer and ``agentrl replay``
decode token ids without a config beside the store; replay shows the decoded completion of a
turn whose action failed to parse (the action itself is empty)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the viewer needs the view extra: pip install 'agentrl[view]'")
from fastapi.testclient import TestClient  # noqa: E402

from agentrl.cli import main  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.types import Episode, Turn  # noqa: E402
from agentrl.view import ViewerOptions, create_app  # noqa: E402


def _store(path, tokenizer=None):
    turn = Turn(run_id="r", episode_id=0, group_id=0, t=0, observation="a door", anchor_obs="s0", action="",
                action_valid=False, reward=0.0, terminated=True, prompt_ids=np.array([1, 2, 3]),
                completion_ids=np.array([4, 3, 5]), completion_logprobs=np.array([-0.5, -0.25, -0.125]))
    with TurnStore(path) as store:
        store.add_episodes([Episode(0, 0, "agentrl/Toy-v0", "task", 0, turns=[turn])], run_id="r")
        if tokenizer is not None:
            store.set_tokenizer("r", tokenizer)


def test_replay_shows_the_decoded_completion_of_an_unparsed_action(tmp_path, word_tokenizer, capsys):
    _store(tmp_path / "s.sqlite", word_tokenizer)
    with TurnStore(tmp_path / "s.sqlite", readonly=True) as store:
        assert store.tokenizer("r") == str(word_tokenizer) and store.tokenizer("other") is None
    assert main(["replay", str(tmp_path / "s.sqlite"), "--episode", "0"]) == 0
    out = capsys.readouterr().out
    assert "completion: open door <eos>" in out


def test_replay_without_a_tokenizer_shows_the_ids(tmp_path, capsys):
    _store(tmp_path / "s.sqlite")
    assert main(["replay", str(tmp_path / "s.sqlite"), "--episode", "0"]) == 0
    assert "completion: (no tokenizer recorded) ids [4, 3, 5]" in capsys.readouterr().out


def test_viewer_decodes_with_the_recorded_tokenizer(tmp_path, word_tokenizer):
    _store(tmp_path / "s.sqlite", word_tokenizer)  # no config.yaml beside the store
    html = TestClient(create_app(ViewerOptions(store=tmp_path / "s.sqlite"))).get("/episode?run=r&episode=0").text
    assert f"decoded with {word_tokenizer}" in html and '<pre class="prompt-text">look north door</pre>' in html
