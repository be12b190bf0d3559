"""Every registered env: its walkthrough / canonical action played through ``collect`` (a
scripted policy that emits exactly those actions) scores what it scores through ``env.step``
directly (issue 19 item 1: the loop used to collapse every action's whitespace, so code
answers reached the code envs without their newlines and indents and scored 0)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentrl.env import (DataMissingError, EnvPool, MissingExtraError, action_normalization, check_kwargs, local_ids,
                         make)
from agentrl.env.contract import INFO_VALID, INFO_WALKTHROUGH, INFO_WON
from agentrl.llm.base import SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.agent_loop import EpisodeDriver, LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.types import Episode, EpisodeStatus

#: per id: (env kwargs, env seeds played). Ids not listed (a newly registered env) are played
#: with their ``check_kwargs`` and seeds 0 and 1, so no registered id goes unchecked.
PLAY = {
    "agentrl/Toy-v0": ({}, (0, 1, 2)),
    "agentrl/ALFWorld-v0": ({"split": "eval_unseen", "expert": True}, (0, 1)),  # planner: once per game, cached
    "agentrl/WebShop-v0": ({}, (0, 1, 2)),
    # seed 0 plays HumanEval/53 (a one-line body), seed 1 HumanEval/0 (nested for/for/if blocks)
    "agentrl/HumanEval-v0": ({"sandbox": "bwrap", "task_ids": ["HumanEval/0", "HumanEval/53"]}, (0, 1)),
    "agentrl/HumanEvalTools-v0": ({"sandbox": "bwrap", "task_ids": ["HumanEval/0", "HumanEval/53"]}, (0, 1)),
}
CODE_ENVS = ("agentrl/HumanEval-v0", "agentrl/HumanEvalTools-v0")


@dataclass(frozen=True)
class Outcome:
    """What a played walkthrough scored: per-step rewards, validity, and the end."""

    task_id: str
    actions: tuple[str, ...]
    rewards: tuple[float, ...]
    valid: tuple[bool, ...]
    won: bool
    terminated: bool


def _unavailable(exc: Exception) -> str | None:
    """Why an env cannot be built here (a missing extra, data or sandbox), or None."""
    if isinstance(exc, (MissingExtraError, DataMissingError)):
        return str(exc)
    from agentrl_sandboxes.base import SandboxUnavailableError

    if isinstance(exc, SandboxUnavailableError) or "SandboxUnavailableError" in str(exc):
        return f"sandbox unavailable: {exc}"
    return None


def _play_direct(env_id: str, kwargs: dict, seed: int, actions: list[str] | None = None) -> tuple[Outcome, list[str]]:
    """Reset with ``seed`` and feed ``actions`` (default: the reset walkthrough) to ``env.step``
    until the episode ends; returns the outcome and the actions given."""
    try:
        env = make(env_id, **kwargs)
    except Exception as exc:
        if (why := _unavailable(exc)) is not None:
            pytest.skip(f"{env_id}: {why}")
        raise
    try:
        _, info = env.reset(seed=seed)
        walk = [str(a) for a in info.get(INFO_WALKTHROUGH) or ()] if actions is None else list(actions)
        if not walk:
            pytest.skip(f"{env_id} gives no walkthrough at reset (seed {seed}): nothing to replay")
        acts, rewards, valid, won, term = [], [], [], False, False
        for a in walk:
            _, r, term, trunc, inf = env.step(a)
            acts.append(a)
            rewards.append(float(r))
            valid.append(bool(inf.get(INFO_VALID, True)))
            won = bool(inf.get(INFO_WON, False))
            if term or trunc:
                break
        return Outcome(str(info.get("task_id")), tuple(acts), tuple(rewards), tuple(valid), won, bool(term)), walk
    finally:
        env.close()


def _walk_engine(renderer: ChatRenderer, walk: list[str], fmt: str) -> ScriptedEngine:
    """Emits walkthrough action k at call k, wrapped in the action format (one episode per engine)."""

    def script(prompt, k):
        text = f"<action>{walk[k]}</action>" if fmt == "tag:action" else walk[k]
        return [*renderer.encode(text).tolist(), renderer.eos_token_id]

    return ScriptedEngine(script, eos_token_id=renderer.eos_token_id, max_context=1 << 22)


def _play_loop(pool: EnvPool, renderer: ChatRenderer, env_id: str, kwargs: dict, seed: int, walk: list[str],
               fmt: str) -> Outcome:
    cfg = CollectConfig(env_id=env_id, n_groups=1, seed=seed, env_kwargs=kwargs, progress=False,
                        loop=LoopConfig(max_turns=len(walk), action_format=fmt),
                        sampling=SamplingParams(max_tokens=1 << 20))
    (ep,) = collect(_walk_engine(renderer, walk, fmt), renderer, cfg, pool=pool)
    assert ep.status == EpisodeStatus.OK, ep.error
    last = ep.turns[-1]
    return Outcome(ep.task_id, tuple(t.action for t in ep.turns), tuple(float(t.reward) for t in ep.turns),
                   tuple(t.action_valid for t in ep.turns), bool(last.info["won"]), bool(last.terminated))


def _renderer(tiny_tokenizer) -> ChatRenderer:
    r = ChatRenderer(tiny_tokenizer)
    probe = "```python\ndef f(x):\n    if x:\n\t\treturn  1\n```\n  ünï 🙂 \r\n"
    assert r.completion_text([*r.encode(probe).tolist(), r.eos_token_id]) == probe  # the tokenizer round-trips
    return r


@pytest.mark.parametrize("env_id", local_ids())  # Remote-v0 needs a server: tests/envs_remote
def test_walkthrough_through_the_loop_scores_as_direct(env_id, tiny_tokenizer):
    renderer = _renderer(tiny_tokenizer)
    kwargs, seeds = PLAY.get(env_id, (check_kwargs(env_id), (0, 1)))
    kwargs = {**check_kwargs(env_id), **kwargs}
    fmts = ("tag:action", "whole") if env_id in CODE_ENVS else ("tag:action",)
    directs = [_play_direct(env_id, kwargs, seed) for seed in seeds]  # skips here when the env is unavailable
    with EnvPool(env_id, 1, env_kwargs=kwargs, num_workers=1, reset_timeout_s=600.0, step_timeout_s=120.0) as pool:
        for seed, (direct, walk) in zip(seeds, directs):
            for fmt in fmts:
                loop = _play_loop(pool, renderer, env_id, kwargs, seed, walk, fmt)
                assert loop == direct, f"{env_id} seed {seed} ({fmt}): loop {loop} != direct {direct}"
    if env_id in CODE_ENVS:  # the canonical answer passes; so it must through the loop
        assert all(o.won and o.rewards[-1] == 1.0 for o, _ in directs), directs
        assert {o.task_id for o, _ in directs} == {"HumanEval/0", "HumanEval/53"}


def test_webshop_option_with_double_spaces_is_clickable_through_the_loop(tiny_tokenizer):
    """WebShop lists ``click[8.4 ounce  |  250 ml]`` (a kept catalogue value); collapsing its
    spaces made it ``action_valid=False`` through the loop. WebShop now gets actions exactly."""
    pytest.importorskip("bm25s", reason="needs the webshop extra: pip install 'agentrl[webshop]'")
    from agentrl_envs.webshop.data import default_data_dir
    from agentrl_envs.webshop.world import get_world

    env_id, value = "agentrl/WebShop-v0", "8.4 ounce  |  250 ml"
    try:
        world = get_world(default_data_dir(), "synthetic", 0)
    except DataMissingError as exc:
        pytest.skip(str(exc))
    product = next(p for p in world.catalogue.products if any(value in vs for _, vs in p.options))
    actions = [f"search[{product.title}]", f"click[{product.asin.lower()}]", f"click[{value}]"]
    direct, _ = _play_direct(env_id, {}, 0, actions)
    assert direct.valid == (True, True, True)
    with EnvPool(env_id, 1, num_workers=1) as pool:
        loop = _play_loop(pool, _renderer(tiny_tokenizer), env_id, {}, 0, actions, "tag:action")
    assert loop == direct


def test_text_game_still_gets_collapsed_whitespace(tiny_tokenizer):
    """An env that declares ``agentrl.action_normalize: whitespace`` (Toy) still receives a
    sloppy command stripped and single-spaced, and the turn stores what it received."""
    env_id = "agentrl/Toy-v0"
    assert action_normalization(env_id) == "whitespace"
    direct, walk = _play_direct(env_id, {}, 1)
    sloppy = [f"  {a.replace(' ', chr(10) + '  ')}\t" for a in walk]
    assert _play_direct(env_id, {}, 1, sloppy)[0].valid != direct.valid  # sent as is, Toy refuses some
    with EnvPool(env_id, 1, num_workers=1) as pool:
        loop = _play_loop(pool, _renderer(tiny_tokenizer), env_id, {}, 1, sloppy, "tag:action")
    assert loop == direct  # same score, and the stored actions are the normalised ones


def test_code_env_declares_exact_and_an_unknown_mode_is_refused(tiny_tokenizer):
    assert action_normalization("agentrl/HumanEval-v0") == "exact"
    assert action_normalization("agentrl/HumanEvalTools-v0") == "exact"
    assert action_normalization("agentrl/WebShop-v0") == "exact"
    ep = Episode(episode_id=0, group_id=0, env_id="x", task_id="t", seed=0)
    with pytest.raises(ValueError, match="unknown action normalisation 'lower'"):
        EpisodeDriver(ep, ChatRenderer(tiny_tokenizer), LoopConfig(), 4096, "lower")
