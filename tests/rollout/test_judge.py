"""Judge rewards (``reward.judge``, issue 53): verdicts, score mapping, replace / add, retries,
timeouts and errors (``judge_error``, never a 0), the cache, and the HTTP and in-process
clients against a real grammar-constrained model."""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

from agentrl.config import ConfigError
from agentrl.config.reward import JudgeConfig
from agentrl.rollout.judge import Judge, judge_prompt, read_verdict, transcript
from agentrl.rollout.judge_clients import JudgeCallError
from agentrl.types import Episode, EpisodeStatus, Turn


class ScriptedJudge:
    """Replies from ``answer(prompt, call_index) -> str``; ``"SLEEP"`` sleeps past any timeout,
    ``"RAISE"`` raises ``JudgeCallError``."""

    name = "scripted"

    def __init__(self, answer):
        self.answer, self.calls, self.lock, self.prompts = answer, 0, threading.Lock(), []

    def complete(self, messages, schema, max_tokens):
        with self.lock:
            i = self.calls
            self.calls += 1
            self.prompts.append(messages[0]["content"])
        out = self.answer(messages[0]["content"], i)
        if out == "SLEEP":
            time.sleep(2.0)
        if out == "RAISE":
            raise JudgeCallError("endpoint down")
        return out


def _ep(eid, actions, won=False, rewards=None, status=EpisodeStatus.OK):
    ep = Episode(episode_id=eid, group_id=0, env_id="agentrl/Toy-v0", task_id="t", seed=0, status=status)
    rewards = rewards or [0.0] * len(actions)
    for t, (a, r) in enumerate(zip(actions, rewards)):
        ep.turns.append(Turn(run_id="r", episode_id=eid, group_id=0, t=t, observation=f"room {t}", anchor_obs="",
                             action=a, action_valid=True, reward=r, prompt_ids=np.array([1]),
                             completion_ids=np.array([2]), completion_logprobs=np.array([-1.0], np.float32),
                             info={"won": won and t == len(actions) - 1}))
    return ep


PASS, FAIL = '{"verdict": "pass"}', '{"verdict": "fail"}'


def test_verdicts_read_and_map():
    pf, sc = JudgeConfig(), JudgeConfig(verdict="scale", scale_max=4)
    assert read_verdict(pf, PASS) == 1.0 and read_verdict(pf, FAIL) == 0.0
    assert read_verdict(sc, '{"score": 3}') == 0.75 and read_verdict(sc, '{"score": 0}') == 0.0
    for cfg, bad in ((pf, "yes"), (pf, '{"verdict": "maybe"}'), (pf, "[1]"), (sc, '{"score": 5}'),
                     (sc, '{"score": true}'), (sc, '{"points": 2}')):
        with pytest.raises(ValueError, match="judge's reply"):
            read_verdict(cfg, bad)


def test_prompt_carries_task_transcript_and_env_with_observations_cut():
    ep = _ep(0, ["go east", "take key"])
    ep.turns[0].observation = "x" * 50
    cfg = JudgeConfig(rubric="env={env_id} task={task} || {transcript} {other}", observation_chars=10)
    task, text = transcript(ep, 10)
    assert task == "x" * 10 + " [...]"
    assert text == f"Turn 0\nObservation: {'x' * 10} [...]\nAction: go east\n\nTurn 1\nObservation: room 1\nAction: take key"
    assert judge_prompt(cfg, ep) == f"env=agentrl/Toy-v0 task={task} || {text} {{other}}"
    with pytest.raises(ConfigError, match="must contain {transcript}"):
        JudgeConfig(rubric="grade {task}")
    with pytest.raises(ConfigError, match="endpoint must be"):
        JudgeConfig(endpoint="ftp://x")


def test_replace_and_add_and_the_record_kept_for_the_viewer():
    won, lost = _ep(0, ["a", "b"], won=True, rewards=[0.0, 1.0]), _ep(1, ["c"], rewards=[0.0])
    judge = Judge(JudgeConfig(weight=2.0), ScriptedJudge(lambda p, i: PASS if "Action: c" in p else FAIL))
    stats = judge.apply([won, lost])
    assert [t.reward for t in won.turns] == [0.0, 0.0] and lost.turns[0].reward == 2.0  # the judge disagrees
    assert [t.info["env_reward"] for t in won.turns] == [0.0, 1.0]
    rec = lost.turns[0].info["judge"]
    assert rec["score"] == 1.0 and rec["reply"] == PASS and rec["attempts"] == 1 and not rec["cached"]
    assert rec["prompt"] == judge_prompt(judge.cfg, lost) and rec["latency_s"] >= 0 and rec["endpoint"] == "scripted"
    m = stats.as_metrics()
    assert m["judge/episodes"] == 2 and m["judge/errors"] == 0 and m["judge/mean_score"] == 0.5
    assert m["judge/agree_env"] == 0.0  # judged the won episode fail and the lost one pass
    add = _ep(2, ["a"], rewards=[0.5])
    Judge(JudgeConfig(mode="add", weight=0.5), ScriptedJudge(lambda p, i: PASS)).apply([add])
    assert add.turns[0].reward == 1.0 and "env_reward" not in add.turns[0].info


def test_failed_and_turnless_episodes_are_not_judged():
    client = ScriptedJudge(lambda p, i: PASS)
    failed, empty = _ep(0, ["a"], status=EpisodeStatus.ABORTED), _ep(1, [])
    assert Judge(JudgeConfig(), client).apply([failed, empty]).judged == 0 and client.calls == 0


def test_a_timeout_then_a_verdict_is_a_retry_not_an_error():
    client = ScriptedJudge(lambda p, i: "SLEEP" if i == 0 else PASS)
    ep = _ep(0, ["a"])
    Judge(JudgeConfig(timeout_s=0.3, retries=1), client).apply([ep])
    assert ep.status == EpisodeStatus.OK and ep.turns[0].reward == 1.0 and ep.turns[0].info["judge"]["attempts"] == 2


@pytest.mark.parametrize("answer, words", [("SLEEP", "no verdict within 0.3 s"), ("RAISE", "endpoint down"),
                                           ("not json", "not JSON")])
def test_a_judge_that_keeps_failing_flags_judge_error_never_zero(answer, words):
    client = ScriptedJudge(lambda p, i: answer)
    ep = _ep(0, ["a"], rewards=[0.7])
    stats = Judge(JudgeConfig(timeout_s=0.3, retries=1), client).apply([ep])
    assert ep.status == EpisodeStatus.ENV_ERROR and ep.cause == "judge_error" and words in ep.error
    assert ep.turns[0].reward == 0.7 and "env_reward" not in ep.turns[0].info  # the reward is left alone, not 0
    assert ep.turns[0].info["judge"]["score"] is None and words in ep.turns[0].info["judge"]["error"]
    assert client.calls == 2 and stats.errors == 1 and stats.as_metrics()["judge/calls"] == 2


def test_identical_prompts_are_judged_once():
    client = ScriptedJudge(lambda p, i: PASS)
    judge = Judge(JudgeConfig(concurrency=4), client)
    a, b, c = _ep(0, ["x"]), _ep(1, ["x"]), _ep(2, ["y"])
    stats = judge.apply([a, b, c])
    assert client.calls == 2 and stats.cache_hits == 1 and b.turns[0].info["judge"]["cached"]
    again = _ep(3, ["y"])
    stats = judge.apply([again])
    assert client.calls == 2 and stats.cache_hits == 1 and again.turns[0].reward == 1.0


def test_http_judge_through_a_grammar_constrained_server(tiny_dir, renderer_tiny):
    """The HTTP client against agentrl's own OpenAI-compatible proxy serving the tiny model:
    response_format json_schema comes back as a readable verdict."""
    from agentrl.llm.hf import HFEngine
    from agentrl.proxy import RecordingProxy
    from agentrl.rollout.judge_clients import HTTPJudgeClient

    with RecordingProxy(HFEngine.from_pretrained(tiny_dir), renderer_tiny) as proxy:
        proxy.start()
        h = proxy.create_episode()
        import os
        os.environ["AGENTRL_TEST_JUDGE_KEY"] = h.api_key
        try:
            client = HTTPJudgeClient(f"{proxy.url}/v1", api_key_env="AGENTRL_TEST_JUDGE_KEY", timeout_s=60)
            ep = _ep(0, ["go east"])
            stats = Judge(JudgeConfig(endpoint=f"{proxy.url}/v1", max_tokens=16), client).apply([ep])
        finally:
            del os.environ["AGENTRL_TEST_JUDGE_KEY"]
    rec = ep.turns[0].info["judge"]
    assert stats.errors == 0 and json.loads(rec["reply"])["verdict"] in ("pass", "fail")
    assert ep.turns[0].reward == rec["score"] in (0.0, 1.0)


def test_http_judge_that_never_answers_is_judge_error():
    from agentrl.rollout.judge_clients import HTTPJudgeClient

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        ep = _ep(0, ["a"])
        Judge(JudgeConfig(endpoint=url, timeout_s=0.5, retries=0), HTTPJudgeClient(url, timeout_s=0.5)).apply([ep])
    assert ep.status == EpisodeStatus.ENV_ERROR and ep.cause == "judge_error"


def test_engine_judge_constrains_the_policy_itself(tiny_engine, renderer_tiny):
    from agentrl.rollout.judge_clients import EngineJudgeClient

    ep = _ep(0, ["go east"])
    stats = Judge(JudgeConfig(verdict="scale", scale_max=10, max_tokens=16),
                  EngineJudgeClient(tiny_engine, renderer_tiny)).apply([ep])
    assert stats.errors == 0 and 0.0 <= ep.turns[0].reward <= 1.0
    assert json.loads(ep.turns[0].info["judge"]["reply"])["score"] == round(ep.turns[0].reward * 10)
    from agentrl.llm.scripted import ScriptedEngine

    with pytest.raises(ValueError, match="grammar-constrained decoding"):
        EngineJudgeClient(ScriptedEngine([[1]], eos_token_id=0), renderer_tiny)


@pytest.fixture(scope="module")
def renderer_tiny(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


def test_a_failing_prompt_twice_in_a_batch_is_tried_once_and_both_flagged():
    client = ScriptedJudge(lambda p, i: "RAISE")
    a, b = _ep(0, ["x"]), _ep(1, ["x"])
    stats = Judge(JudgeConfig(retries=1), client).apply([a, b])
    assert client.calls == 2 and stats.calls == 2 and stats.errors == 2 and stats.cache_hits == 0
    assert a.cause == b.cause == "judge_error" and b.turns[0].info["judge"]["attempts"] == 0
