"""An estimator run on a table with no trainable row says so (issue 41).

Every registered estimator goes through ``compute_advantages``; on a non-empty ``TurnTable``
whose ``trainable`` column is all False (e.g. built with ``TurnTable.from_episodes`` from
text-only turns, another framework's data without token ids) every advantage is 0, and it
warns with a ``RuntimeWarning`` naming ``TurnTable.from_episodes(..., trainable=...)``. The
advantages are the same as the estimator function's own, warning or not.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest
from credit_tables import estimator_table

from agentrl.credit import compute_advantages, estimator_params, get_estimator, list_estimators
from agentrl.credit.registry import warn_if_untrainable
from agentrl.types import Episode, Turn, TurnTable

WARNING = r"none of the table's \d+ rows is trainable.*TurnTable\.from_episodes\(episodes, trainable="


def _direct(name: str, table: TurnTable) -> np.ndarray:
    """What the registered function itself returns (no registry checks, no warning)."""
    return np.asarray(get_estimator(name).fn(table, **estimator_params(name)))


@pytest.mark.parametrize("name", list_estimators())
def test_all_untrainable_table_warns_and_gives_the_same_zeros(name):
    table = estimator_table(name, 0)
    untrainable = dataclasses.replace(table, trainable=np.zeros(len(table), dtype=bool))
    with pytest.warns(RuntimeWarning, match=WARNING) as record:
        out = compute_advantages(untrainable, name)
    assert len(record) == 1
    assert Path(record[0].filename) == Path(__file__)  # names the caller's line, not the registry's
    assert f"estimator {name!r}" in str(record[0].message)
    np.testing.assert_array_equal(out, np.zeros(len(table)))
    np.testing.assert_array_equal(out, _direct(name, untrainable))


@pytest.mark.parametrize("name", list_estimators())
def test_a_table_with_trainable_rows_does_not_warn(name):
    table = estimator_table(name, 0)
    trainable = table.trainable.copy()
    trainable[0] = False  # one non-trainable row does not warn: only a table without any
    table = dataclasses.replace(table, trainable=trainable)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = compute_advantages(table, name)
    np.testing.assert_array_equal(out, _direct(name, table))
    assert np.any(out != 0.0), "the fixture must give some contrast, else the check above proves little"


def _text_only_episodes() -> list[Episode]:
    """One group of two single-turn episodes with text and no token ids: one won, one lost."""
    episodes = []
    for e, reward in enumerate((1.0, 0.0)):
        turn = Turn(run_id="r", episode_id=e, group_id=0, t=0, observation="a room", anchor_obs="a room",
                    action="open door", action_valid=True, reward=reward, terminated=True, turn_id=e,
                    info={"won": bool(reward)})
        episodes.append(Episode(episode_id=e, group_id=0, env_id="x/Text-v0", task_id="t0", seed=0, turns=[turn]))
    return episodes


def test_text_only_episodes_warn_until_marked_trainable():
    episodes = _text_only_episodes()
    with pytest.warns(RuntimeWarning, match=WARNING):
        silent = compute_advantages(TurnTable.from_episodes(episodes), "grpo")
    np.testing.assert_array_equal(silent, [0.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scored = compute_advantages(TurnTable.from_episodes(episodes, trainable=[True, True]), "grpo")
    assert scored[0] > 0.5 and scored[1] == -scored[0]  # the winner above the group mean, the loser below


def test_warn_if_untrainable_only_for_a_non_empty_all_false_column():
    table = TurnTable.from_episodes(_text_only_episodes(), trainable=[True, False])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_untrainable(table, "grpo") is False
        assert warn_if_untrainable(TurnTable.from_episodes([]), "grpo") is False
    with pytest.warns(RuntimeWarning, match="estimator 'grpo'"):
        assert warn_if_untrainable(dataclasses.replace(table, trainable=np.zeros(2, dtype=bool)), "grpo") is True
