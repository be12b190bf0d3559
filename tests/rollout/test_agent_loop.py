"""Agent loop + collector with the scripted engine on real envs (Toy-v0 through EnvPool)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from agentrl.env.pool import EnvPool
from agentrl.llm.base import SamplingParams
from agentrl.llm.chat import ChatRenderer, episode_segments
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.agent_loop import LoopConfig, WindowContext
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.types import EpisodeStatus

TOY = "agentrl/Toy-v0"


@pytest.fixture(scope="module")
def toy_pool():
    with EnvPool(TOY, 8, num_workers=1) as pool:
        yield pool


def _cfg(**kw) -> CollectConfig:
    loop = LoopConfig(**{k: kw.pop(k) for k in list(kw) if k in ("context", "window_k", "window_history", "max_turns", "action_format")})
    return CollectConfig(env_id=TOY, loop=loop, progress=False, **{"n_groups": 1, "group_size": 1, **kw})


def _admissible_policy(renderer: ChatRenderer, split: bool):
    """Picks admissible[call % n] from the prompt's last 'Admissible actions' line; optionally
    emits it as single-character tokens (a non-canonical split)."""

    def script(prompt, call):
        text = renderer.tokenizer.decode(prompt)
        acts = re.findall(r"Admissible actions: ([^<\n]*)", text)[-1].split(", ")
        out = f"<action>{acts[call % len(acts)]}</action>"
        ids = np.concatenate([renderer.encode(ch) for ch in out]) if split else renderer.encode(out)
        return [*ids.tolist(), renderer.eos_token_id]

    return script


def _assert_chat_prefix(ep):
    for a, b in zip(ep.turns, ep.turns[1:]):
        before = np.concatenate([a.prompt_ids, a.completion_ids])
        np.testing.assert_array_equal(b.prompt_ids[: before.size], before)
        assert b.info["segment"] == a.info["segment"] == 0


def test_p1_non_canonical_split_stored_verbatim_and_extended(tiny_tokenizer, toy_pool):
    r = ChatRenderer(tiny_tokenizer)
    policy = _admissible_policy(r, split=True)
    emitted = []
    eng = ScriptedEngine(lambda p, k: emitted.append(policy(p, k)) or emitted[-1], eos_token_id=r.eos_token_id)
    (ep,) = collect(eng, r, _cfg(max_turns=3, seed=5), pool=toy_pool)
    assert ep.status == EpisodeStatus.OK and len(ep.turns) == 3
    for turn, ids in zip(ep.turns, emitted):
        np.testing.assert_array_equal(turn.completion_ids, ids)  # verbatim
        assert turn.action_valid and turn.info["parse_ok"]
        np.testing.assert_allclose(turn.completion_logprobs, -0.5)
    _assert_chat_prefix(ep)
    assert ep.turns[-1].info["forks"] == 0
    # a re-tokenizing loop would diverge (token_prefix_ok = False): the canonical encoding is shorter
    retok = r.encode(r.completion_text(ep.turns[0].completion_ids))
    assert retok.size < ep.turns[0].completion_ids.size - 1
    (seg,) = episode_segments(ep.turns)
    np.testing.assert_array_equal(seg.ids[seg.loss_mask == 1], np.concatenate([t.completion_ids for t in ep.turns]))


def test_groups_share_seeds_and_finished_episodes_generate_nothing(tiny_tokenizer, toy_pool):
    r = ChatRenderer(tiny_tokenizer)
    eng = ScriptedEngine(_admissible_policy(r, split=False), eos_token_id=r.eos_token_id)
    finished = []
    cfg = _cfg(n_groups=3, group_size=3, seed=10, max_turns=6, num_slots=4)
    eps = collect(eng, r, cfg, pool=toy_pool, on_episode=finished.append)
    assert [e.episode_id for e in eps] == list(range(9)) and len(finished) == 9
    assert [e.group_id for e in eps] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [e.seed for e in eps] == [10, 10, 10, 11, 11, 11, 12, 12, 12]
    for g in range(3):
        assert len({e.task_id for e in eps if e.group_id == g}) == 1
    assert eng.calls == sum(len(e.turns) for e in eps)  # one generation per played turn, none after the end
    for e in eps:
        last = e.turns[-1]
        assert last.terminated or last.truncated
        assert all(not (t.terminated or t.truncated) for t in e.turns[:-1])
        assert last.terminated == last.info["won"]
        assert [t.t for t in e.turns] == list(range(len(e.turns)))
        for a, b in zip(e.turns, e.turns[1:]):
            assert b.anchor_obs == a.next_anchor_obs


def test_unparsable_action_is_sent_as_invalid(tiny_tokenizer, toy_pool):
    r = ChatRenderer(tiny_tokenizer)
    eng = ScriptedEngine([[*r.encode("I would go east").tolist(), r.eos_token_id]], eos_token_id=r.eos_token_id)
    (ep,) = collect(eng, r, _cfg(max_turns=3), pool=toy_pool)
    assert [t.action for t in ep.turns] == ["", "", ""]
    assert not any(t.action_valid for t in ep.turns) and not any(t.info["parse_ok"] for t in ep.turns)
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 0.0]
    assert ep.turns[-1].truncated and not ep.turns[-1].terminated
    assert "Nothing happens." in ep.turns[1].observation


def test_context_limit_cuts_episode(tiny_tokenizer, toy_pool):
    r = ChatRenderer(tiny_tokenizer)
    script = [[*r.encode("<action>look</action>").tolist(), r.eos_token_id]]
    first = r.render_ids(_first_messages(r, toy_pool))
    eng = ScriptedEngine(script, eos_token_id=r.eos_token_id, max_context=first.size + 40)
    (ep,) = collect(eng, r, _cfg(max_turns=10), pool=toy_pool)
    assert ep.status == EpisodeStatus.OK and 1 <= len(ep.turns) < 10
    assert ep.turns[-1].truncated and ep.turns[-1].info["cut"] == "context"
    assert all(t.prompt_ids.size + t.completion_ids.size <= first.size + 40 for t in ep.turns)
    tiny = ScriptedEngine(script, eos_token_id=r.eos_token_id, max_context=first.size)
    (ep2,) = collect(tiny, r, _cfg(max_turns=10), pool=toy_pool)
    assert ep2.status == EpisodeStatus.ABORTED and not ep2.turns and "fills the context" in ep2.error


def _first_messages(r, pool):
    from agentrl.rollout.agent_loop import DEFAULT_SYSTEM, shown_observation
    from agentrl.rollout.parsing import parse_format
    from agentrl.types import Message

    res = pool.reset([7], [0])[7]
    system = f"{DEFAULT_SYSTEM} {parse_format('tag:action').instructions}"
    return [Message("system", system), Message("user", shown_observation(res, True))]


def test_window_context_is_fresh_render_with_last_k_pairs(tiny_tokenizer, toy_pool):
    r = ChatRenderer(tiny_tokenizer)
    eng = ScriptedEngine(_admissible_policy(r, split=True), eos_token_id=r.eos_token_id)
    (ep,) = collect(eng, r, _cfg(context="window", window_k=2, max_turns=5, seed=3), pool=toy_pool)
    for turn in ep.turns:
        text = r.tokenizer.decode(turn.prompt_ids)
        np.testing.assert_array_equal(turn.prompt_ids, r.encode(text))  # a fresh (canonical) render
        assert text.count("\n> ") == min(turn.t, 2)
        assert text.count("Admissible actions:") == 1  # only the current observation lists them
        assert "segment" not in turn.info
        assert text.rstrip("\n").endswith("<|im_start|>assistant")
    assert len(episode_segments(ep.turns)) == len(ep.turns)


def test_env_error_marks_episode_and_siblings_continue(tiny_tokenizer):
    import rollout_boom_env

    rollout_boom_env.register()
    r = ChatRenderer(tiny_tokenizer)
    ok = [*r.encode("<action>hello</action>").tolist(), r.eos_token_id]
    boom = [*r.encode("<action>boom</action>").tolist(), r.eos_token_id]
    eng = ScriptedEngine([ok, ok, ok, boom], eos_token_id=r.eos_token_id)  # the 2nd episode's 2nd turn is boom
    cfg = CollectConfig(env_id=rollout_boom_env.BOOM_ID, n_groups=1, group_size=2, loop=LoopConfig(max_turns=3),
                        progress=False, num_workers=1)
    a, b = collect(eng, r, cfg)
    assert a.status == EpisodeStatus.OK and len(a.turns) == 3 and a.return_ == 1.5
    assert b.status == EpisodeStatus.ENV_ERROR and "boom" in b.error
    assert len(b.turns) == 2 and b.turns[-1].reward is None and b.return_ is None


def test_property_chat_prefix_smollm2_tokenizer_random_completions(smollm2_tokenizer, toy_pool):
    """Many sampled episodes with the real SmolLM2 tokenizer and template: random token ids
    (most do not re-tokenize to themselves), char-split and canonical actions."""
    r = ChatRenderer(smollm2_tokenizer)
    rng = np.random.default_rng(0)
    act = _admissible_policy(r, split=True)

    def script(prompt, call):
        kind = call % 3
        if kind == 0:
            return rng.integers(17, len(smollm2_tokenizer), int(rng.integers(1, 12))).tolist()  # maybe no EOS
        if kind == 1:
            return [*rng.integers(17, 5000, 4).tolist(), r.eos_token_id]
        return act(prompt, call)

    eng = ScriptedEngine(script, eos_token_id=r.eos_token_id)
    eps = collect(eng, r, _cfg(n_groups=4, group_size=4, max_turns=6, seed=20), pool=toy_pool)
    not_self = 0
    for ep in eps:
        _assert_chat_prefix(ep)
        (seg,) = episode_segments(ep.turns)
        comps = np.concatenate([t.completion_ids for t in ep.turns])
        np.testing.assert_array_equal(seg.ids[seg.loss_mask == 1], comps)
        assert seg.loss_mask.sum() == comps.size
        for t in ep.turns:
            body = t.completion_ids[:-1] if t.completion_ids[-1] == r.eos_token_id else t.completion_ids
            not_self += not np.array_equal(r.encode(r.tokenizer.decode(body)), body)
    assert not_self >= 10


class _TextRenderer:
    """Stands in for ChatRenderer: 'renders' the messages as their text, one id per char."""

    def render_ids(self, messages):
        self.last = messages
        return np.frombuffer("|".join(m.content for m in messages).encode(), dtype=np.uint8).astype(np.int32)


@pytest.mark.parametrize("history, expected", [
    ("full", "Task:\nstart room\n\nRecent history:\n> a2\nsaw 2\n> a3\n\nCurrent observation:\nsaw 3\nAdm: x"),
    ("actions", "Task:\nstart room\n\nRecent history:\n> a2\n> a3\n\nCurrent observation:\nsaw 3\nAdm: x"),
])
def test_window_context_text_orders_each_action_before_its_result(history, expected):
    r = _TextRenderer()
    ctx = WindowContext(r, "SYS", k=2, history=history)
    ctx.first("start room\nAdm: a1", task="start room")
    assert r.last[1].content == "Task:\nstart room\nAdm: a1"  # t = 0: the reset text once
    for i in (1, 2, 3):  # past observations are shown without their admissible-action list
        ctx.next(np.zeros(1, np.int32), f"a{i}", f"saw {i}\nAdm: x", past=f"saw {i}")
    assert r.last[0].content == "SYS" and r.last[1].content == expected
    assert ctx.segment == 3


def test_window_history_is_validated():
    with pytest.raises(ValueError, match="window_history"):
        LoopConfig(context="window", window_history="obs")
