"""HumanEval train/eval splits are disjoint and cover the 164 problems; the trainer's
``split``/``max_turns`` kwargs construct both code envs."""

import pytest

from agentrl_envs.code.episode import select_tasks


def test_splits_disjoint_and_complete():
    train = {t.task_id for t in select_tasks(None, "train")}
    evaluation = {t.task_id for t in select_tasks(None, "eval")}
    assert len(train) == 123 and len(evaluation) == 41
    assert not train & evaluation
    assert train | evaluation == {t.task_id for t in select_tasks(None, "all")}
    assert "HumanEval/3" in evaluation and "HumanEval/0" in train


def test_unknown_split_names_choices():
    with pytest.raises(ValueError, match="choose one of"):
        select_tasks(None, "test")


def test_trainer_kwargs_construct_both_envs():
    from agentrl_envs.code.humaneval_env import HumanEvalEnv
    from agentrl_envs.code.tools_env import HumanEvalToolsEnv

    env = HumanEvalEnv(sandbox="unsafe_local", split="eval", max_turns=2)
    assert env.max_attempts == 2 and len(env.tasks) == 41
    env.close()
    tools = HumanEvalToolsEnv(sandbox="unsafe_local", split="train", max_turns=4)
    assert tools.max_turns == 4 and len(tools.tasks) == 123
    tools.close()
