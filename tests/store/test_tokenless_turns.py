"""Issue 19 item 7: trajectories without token ids (plain {role, content} text, or prompts
without completion ids) are never trainable: the table marks them so (in memory and from the
store), estimators give them 0 and keep them out of the group statistics, and the update
path refuses a turn meant for training that lacks its sampled tokens, naming it."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import compute_advantages
from agentrl.store import TurnStore
from agentrl.train.plan import require_tokens
from agentrl.types import Episode, Turn, TurnTable


def _episode(eid: int, reward: float, *, tokens: bool, logprobs: bool = True, prompt: bool = True) -> Episode:
    turns = []
    for t in range(2):
        kw = {}
        if tokens:
            kw = dict(prompt_ids=np.arange(3 + t, dtype=np.int32) if prompt else np.zeros(0, np.int32),
                      completion_ids=np.array([7, 8], np.int32),
                      completion_logprobs=np.array([-0.5, -0.25], np.float32) if logprobs else np.zeros(0, np.float32))
        turns.append(Turn(run_id="r", episode_id=eid, group_id=0, t=t, observation=f"obs {t}", anchor_obs=f"s{t}",
                          action="go", action_valid=True, reward=reward if t == 1 else 0.0, terminated=t == 1,
                          turn_id=eid * 10 + t, **kw))
    return Episode(episode_id=eid, group_id=0, env_id="agentrl/Toy-v0", task_id="task", seed=0, turns=turns)


def test_text_only_episodes_are_not_trainable_and_get_zero_advantage(tmp_path) -> None:
    eps = [_episode(0, 1.0, tokens=False), _episode(1, 0.0, tokens=False)]
    table = TurnTable.from_episodes(eps)
    assert not table.trainable.any()  # before the fix: every row of an all-text batch was trainable
    assert np.all(compute_advantages(table, "grpo") == 0.0)
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes(eps, run_id="r")
        assert not store.table("r").trainable.any()


def test_text_only_rows_stay_out_of_the_statistics_of_token_rows() -> None:
    """A mixed group: the text-only episode (reward 1) does not enter the token episodes'
    statistics — with it, the two token episodes (rewards 1 and 0) would be normalised against
    three scores."""
    eps = [_episode(0, 1.0, tokens=True), _episode(1, 0.0, tokens=True), _episode(2, 1.0, tokens=False)]
    table = TurnTable.from_episodes(eps)
    assert table.trainable.tolist() == [True] * 4 + [False] * 2
    adv = compute_advantages(table, "grpo", stats_over="trajectories")
    only_tokens = compute_advantages(TurnTable.from_episodes(eps[:2]), "grpo", stats_over="trajectories")
    np.testing.assert_allclose(adv[:4], only_tokens)
    assert np.all(adv[4:] == 0.0) and abs(adv[0] - 1 / np.sqrt(2) / (1 + 1e-6) * 1.0) < 1e-5


@pytest.mark.parametrize("episode, what", [
    (_episode(3, 1.0, tokens=False), "no token ids"),
    (_episode(3, 1.0, tokens=True, prompt=False), "no token ids"),
    (_episode(3, 1.0, tokens=True, logprobs=False), "2 completion ids but 0 logprobs"),
])
def test_update_path_refuses_turns_without_sampled_tokens(episode: Episode, what: str) -> None:
    good = _episode(0, 1.0, tokens=True)
    require_tokens([good])  # exact tokens: accepted
    with pytest.raises(ValueError, match=rf"2 turn\(s\) to train on lack their sampled tokens, first: episode 3 t=0 has {what}"):
        require_tokens([good, episode])


def test_aborted_and_failed_turns_are_not_refused() -> None:
    """A proxy-aborted call (info trainable False) and a failed episode's turns are never trained,
    so they may lack tokens."""
    aborted = _episode(4, 1.0, tokens=False)
    for t in aborted.turns:
        t.info["trainable"] = False
    failed = _episode(5, 1.0, tokens=False)
    failed.status = failed.status.__class__("env_error")
    require_tokens([aborted, failed])


def test_turns_marked_untrainable_are_not_trainable_in_memory_or_from_the_store(tmp_path) -> None:
    """A turn with its tokens but ``info["trainable"] = False`` (what ``require_tokens`` skips) is
    not trainable in the table either, in memory and read back from the store."""
    ep = _episode(0, 1.0, tokens=True)
    ep.turns[0].info["trainable"] = False
    assert TurnTable.from_episodes([ep]).trainable.tolist() == [False, True]
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ep], run_id="r")
        assert store.table("r").trainable.tolist() == [False, True]
