"""StepOPSD's hindsight teacher (``agentrl.train.hindsight``, ALGORITHMS.md §18.3, issue 50): the
hindsight block and the teacher context, the action-only segment, which rows are scored, the gaps
against an independent forward, the stale snapshot's refresh, λ = 0 skipping every forward, and
save/load."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from agentrl.config import AlgorithmConfig, Config, ConfigError, EnvConfig, PolicyConfig
from agentrl.train.hindsight import GAP_COLUMN, HindsightScorer, hindsight_block, scored_tokens, teacher_prompt
from agentrl.train.scorer_options import HindsightOptions
from agentrl.types import Episode, Message, Turn, TurnTable

# §17.7's groups: U = X (wins), Y (fails), Z (wins); V = P, Q (both fail). Episode ids 0..4.
SPEC = [(0, 0, [0, 10]), (1, 0, [0, 0, 0]), (2, 0, [0, 0, 10]), (3, 1, [0, 0]), (4, 1, [0, 0])]


def _episodes(renderer) -> list[Episode]:
    eps, tid = [], 0
    for e, g, rewards in SPEC:
        turns = []
        for t, r in enumerate(rewards):
            prompt = renderer.render_ids([Message("system", "You play a maze."), Message("user", f"room {e}.{t}")])
            comp = np.concatenate([renderer.encode(f"ok <action>go {['north', 'east'][t % 2]}</action>"),
                                   [renderer.eos_token_id]]).astype(np.int32)
            turns.append(Turn(run_id="r", episode_id=e, group_id=g, t=t, observation="o", anchor_obs=f"s{t}",
                              action=f"go {['north', 'east'][t % 2]} {e}", action_valid=True, reward=float(r),
                              terminated=t == len(rewards) - 1, prompt_ids=prompt, completion_ids=comp,
                              completion_logprobs=np.full(comp.size, -1.5, np.float32), turn_id=tid))
            tid += 1
        eps.append(Episode(episode_id=e, group_id=g, env_id="agentrl/Toy-v0", task_id="t", seed=g, turns=turns))
    return eps


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


def _cfg(lambda_mix=0.2, schedule=None) -> Config:
    return Config(env=EnvConfig(id="agentrl/Toy-v0"), policy=PolicyConfig(action_format="tag:action"),
                  algorithm=AlgorithmConfig(estimator="stepopsd", kwargs={"lambda_mix": lambda_mix, "c_inv": 0.1},
                                            schedule=schedule or {}))


def _scorer(tiny_dir, renderer, opts=HindsightOptions(), cfg=None) -> HindsightScorer:
    from transformers import AutoModelForCausalLM

    from agentrl.config import LoraSpec
    from agentrl.update.lora import apply_lora

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32), LoraSpec(rank=4))
    return HindsightScorer(model, renderer, renderer.tokenizer.pad_token_id, cfg or _cfg(), opts)


def test_the_scorer_writes_the_column_stepopsd_reads():
    from agentrl.credit import get_estimator
    from agentrl.credit.stepopsd import COLUMN

    assert GAP_COLUMN == COLUMN and get_estimator("stepopsd").requires == (COLUMN,)
    assert get_estimator("stepopsd").declares.scorers == ("hindsight",)


def test_the_block_and_the_teacher_context(renderer):
    block = hindsight_block(False, ["go north", "go east", "look"], max_actions=2)
    assert block == ("[Hindsight, shown only for training]\nOutcome of this attempt: FAILURE\n"
                     "A successful attempt at the same task took these actions:\n1. go north\n2. go east")
    assert hindsight_block(True, ["go north"]) == "[Hindsight, shown only for training]\nOutcome of this attempt: SUCCESS"
    msgs = [Message("system", "You play a maze."), Message("user", "room 1")]
    got = teacher_prompt(renderer, renderer.render_ids(msgs), block)
    want = renderer.render_ids([Message("system", block + "\nYou play a maze."), Message("user", "room 1")])
    np.testing.assert_array_equal(got, want)
    no_system = renderer.render_ids([Message("user", "room 1")])  # a new system message goes first
    np.testing.assert_array_equal(teacher_prompt(renderer, no_system, block),
                                  renderer.render_ids([Message("system", block), Message("user", "room 1")]))
    uncut = teacher_prompt(renderer, no_system, block)
    np.testing.assert_array_equal(teacher_prompt(renderer, no_system, block, max_tokens=5), uncut[-5:])


def test_action_only_scores_the_tag_content(renderer):
    comp = np.concatenate([renderer.encode("think <action>go north</action>"), [renderer.eos_token_id]])
    turn = Turn(run_id="r", episode_id=0, group_id=0, t=0, observation="", anchor_obs="", action="go north",
                action_valid=True, reward=0.0, completion_ids=comp.astype(np.int32))
    pat = re.compile(r"<action>(.*?)</action>", re.DOTALL)
    mask = scored_tokens(renderer, turn, "action_only", pat)
    assert renderer.tokenizer.decode(comp[mask].tolist()).strip() == "go north"
    assert scored_tokens(renderer, turn, "completion", pat).all() and scored_tokens(renderer, turn, "action_only", None).all()
    bare = dataclasses.replace(turn, completion_ids=renderer.encode("go north").astype(np.int32))
    assert scored_tokens(renderer, bare, "action_only", pat).all()  # no tag: the whole completion


def _teacher_logprobs(model, prompt: np.ndarray, comp: np.ndarray) -> np.ndarray:
    ids = torch.as_tensor(np.concatenate([prompt, comp]), dtype=torch.long)[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, prompt.size - 1:-1].double()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, prompt.size:, None])[:, 0].numpy()


def test_gaps_rows_and_values(tiny_dir, renderer):
    scorer = _scorer(tiny_dir, renderer)
    eps = _episodes(renderer)
    table = TurnTable.from_episodes(eps)
    gap = scorer.score(table, eps, 0).scores[GAP_COLUMN]
    scored = ~np.isnan(gap).all(1)
    np.testing.assert_array_equal(scored, table.group == 0)  # V's GRPO advantage is 0 (all failed): not scored
    assert scorer.learn(table, np.zeros(len(table)), eps, 0)["hindsight/rows_scored"] == 8
    # Y t1 (a failure; sibling X, the successful episode with the smallest id) against a direct forward
    row = int(np.flatnonzero((table.episode == 1) & (table.t == 1))[0])
    turn = eps[1].turns[1]
    block = hindsight_block(False, [t.action for t in eps[0].turns])
    with torch.no_grad():
        teacher = _teacher_logprobs(scorer.model, teacher_prompt(renderer, turn.prompt_ids, block), turn.completion_ids)
    keep = scored_tokens(renderer, turn, "action_only", scorer.pattern)
    want = (teacher - (-1.5))[keep]
    got = gap[row][~np.isnan(gap[row])]
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert 0 < got.size < turn.completion_ids.size  # only the action's tokens
    span = scorer.score(table, eps, 0).scores["gap_span"]
    at = np.flatnonzero(keep)
    assert span[row].tolist() == [at[0], at[-1] + 1] and np.isnan(span[table.group == 1]).all()


def test_lambda_zero_runs_no_teacher(tiny_dir, renderer, monkeypatch):
    scorer = _scorer(tiny_dir, renderer, cfg=_cfg(schedule={"lambda_mix": {"to": 0.0, "iterations": 50}}))
    eps = _episodes(renderer)
    table = TurnTable.from_episodes(eps)
    calls = []
    import agentrl.train.hindsight as H

    real = H.row_logprobs
    monkeypatch.setattr(H, "row_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert not np.isnan(scorer.score(table, eps, 25).scores[GAP_COLUMN]).all()  # λ = 0.1 at iteration 25
    assert calls == [1]
    assert np.isnan(scorer.score(table, eps, 50).scores[GAP_COLUMN]).all() and calls == [1]  # λ = 0: no forward


def _adapter(model, name):
    return {n.replace(f".{name}.", "."): p.detach().clone() for n, p in model.named_parameters()
            if f".{name}." in n and ".lora_" in n}


def test_the_stale_teacher_refreshes_every_k_iterations_and_round_trips(tiny_dir, renderer, tmp_path):
    scorer = _scorer(tiny_dir, renderer, HindsightOptions(teacher_refresh=10))
    eps = _episodes(renderer)
    table = TurnTable.from_episodes(eps)
    scorer.score(table, eps, 0)
    initial = _adapter(scorer.model, "default")
    with torch.no_grad():  # the policy trains
        for n, p in scorer.model.named_parameters():
            if ".default." in n and "lora_B" in n:
                p.add_(0.01)
    scorer.score(table, eps, 5)  # not a refresh iteration: the teacher is still the initial policy
    assert all(torch.equal(initial[k], v) for k, v in _adapter(scorer.model, "teacher").items())
    scorer.save(tmp_path)
    scorer.score(table, eps, 10)
    assert all(torch.equal(_adapter(scorer.model, "default")[k], v) for k, v in _adapter(scorer.model, "teacher").items())
    fresh = _scorer(tiny_dir, renderer, HindsightOptions(teacher_refresh=10))
    assert fresh.load(tmp_path) and fresh.refreshed_at == 0
    assert all(torch.equal(initial[k], v) for k, v in _adapter(fresh.model, "teacher").items())


def test_stale_teacher_needs_lora(tiny_dir, renderer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    with pytest.raises(ConfigError, match="teacher: current"):
        HindsightScorer(model, renderer, 0, _cfg(), HindsightOptions())
    assert HindsightScorer(model, renderer, 0, _cfg(), HindsightOptions(teacher="current")).params == []
