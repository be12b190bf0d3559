"""Helpers of the framework harness tests (tests/proxy/test_harness_frameworks.py): play one
agentrl/Toy-v0 episode with an ``examples/harness_*.py`` agent through the recording proxy
on scripted tool calls, check it is recorded token-exact, store it and run the trainer's
update on it with the tiny model."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentrl.env import make
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.harness import HarnessSpec, run_harness
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "agentrl/Toy-v0"
FINAL = "I won the game."


class GrammarScriptedEngine(ScriptedEngine):
    """A ``ScriptedEngine`` that takes ``generate(grammars=...)``, as forced tool calls need:
    each scripted completion of a constrained row is replayed through its grammar (a
    ``ValueError`` when the script is not a completion the grammar allows) and carries the
    grammar's per-step bitmasks, as ``HFEngine`` returns them."""

    def generate(self, prompts, sampling, *, return_hidden=False, allowed=None, grammars=None):
        """The scripts, with ``Completion.grammar_masks`` on rows that have a grammar."""
        outs = super().generate(prompts, sampling, return_hidden=return_hidden, allowed=allowed)
        for c, g in zip(outs, grammars or [None] * len(outs)):
            if g is not None:
                c.grammar_masks = g.masks(c.token_ids).rows()
        return outs


def walkthrough(seed: int) -> list[str]:
    """The winning commands of the toy task drawn by ``seed``."""
    env = make(ENV_ID)
    _, info = env.reset(seed=seed)
    env.close()
    return info["walkthrough"]


def tool_call(arguments: dict, name: str = "act") -> str:
    """What the model writes to call a tool (Hermes format, as the proxy parses it)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@dataclass(frozen=True)
class Game:
    """One framework's episode: ``examples/<example>`` on the toy task of ``seed``; the
    scripted policy calls ``act`` with each walkthrough command, then answers ``FINAL`` (as
    text, or as the argument ``answer`` of a call to ``final_tool``)."""

    example: str
    seed: int
    final_tool: str = ""

    def scripts(self, reply_ids) -> list[list[int]]:
        """The scripted completions (ids, EOS included), one per model call."""
        last = tool_call({"answer": FINAL}, self.final_tool) if self.final_tool else FINAL
        return [reply_ids(tool_call({"command": a})) for a in walkthrough(self.seed)] + [reply_ids(last)]

    def play(self, renderer, reply_ids) -> Episode:
        """Run the harness once through a fresh recording proxy; the closed episode."""
        from agentrl.proxy import RecordingProxy

        engine = GrammarScriptedEngine(self.scripts(reply_ids), eos_token_id=renderer.eos_token_id, logprob=-0.25)
        spec = HarnessSpec(command=("{python}", str(ROOT / "examples" / self.example)), env_id=ENV_ID, timeout_s=120)
        proxy = RecordingProxy(engine, renderer)
        with proxy.serve():
            return run_harness(proxy, spec, seed=self.seed)


def play_all(games: dict[str, Game], renderer, reply_ids, pool: ThreadPoolExecutor) -> dict[str, Future]:
    """Start every game on ``pool`` (most of a harness episode is its framework's import, in
    its own process: two at a time halve the wall time on two cores); name → future episode."""
    return {name: pool.submit(g.play, renderer, reply_ids) for name, g in games.items()}


def check_token_exact(ep: Episode, scripts: list, seed: int, dialect: str, *, final_tool_calls: int = 0,
                      rewrites: bool = False) -> None:
    """The episode won through the tool; every call is one turn carrying exactly the sampled
    ids and logprobs; each turn's prompt extends the previous prompt + completion token for
    token (one segment, no fork) — or, with ``rewrites`` (a harness that re-writes its own
    earlier replies into its history), extends the previous prompt and starts a new segment,
    a counted fork; the verifier's reward sits on the last turn."""
    assert ep.status == EpisodeStatus.OK, ep.error
    plan = walkthrough(seed)
    assert len(ep.turns) == len(plan) + 1, [t.info.get("cause") for t in ep.turns]
    assert [t.completion_ids.tolist() for t in ep.turns] == scripts
    assert all(np.allclose(t.completion_logprobs, -0.25) for t in ep.turns)
    assert all(t.info["dialect"] == dialect for t in ep.turns)
    later = "rewritten" if rewrites else "extends"
    assert [t.info["cause"] for t in ep.turns] == ["first_call"] + [later] * len(plan)
    assert [t.info["segment"] for t in ep.turns] == (list(range(len(plan) + 1)) if rewrites else [0] * (len(plan) + 1))
    assert ep.turns[-1].info["forks"] == (len(plan) if rewrites else 0)
    assert all(t.info["prompt_source"] == ("rendered" if rewrites else "tito") for t in ep.turns[1:])
    for a, b in zip(ep.turns, ep.turns[1:]):
        head = a.prompt_ids if rewrites else np.concatenate([a.prompt_ids, a.completion_ids])
        assert b.prompt_ids.size > head.size and np.array_equal(b.prompt_ids[: head.size], head)
    assert [t.info["tool_calls"] for t in ep.turns] == [1] * len(plan) + [final_tool_calls]
    assert ep.success and ep.return_ == 1.0 and ep.turns[-1].reward == 1.0 and ep.turns[-1].terminated
    assert [t.reward for t in ep.turns[:-1]] == [0.0] * len(plan)
    assert all(t.info["reward_alignment"] == "episode" for t in ep.turns)  # n + 1 calls for n env steps


def store_and_train(ep: Episode, renderer, tiny_dir: Path, tmp_path: Path) -> list:
    """Store the episode, read it back (ids, logprobs and rewards unchanged) and run the
    trainer's update phase (``agentrl.train.plan.update_policy``, examples/harness_toy.yaml's
    update settings) on a fresh tiny model over its turns, each with advantage +1 (one
    episode has no group contrast). Returns the steps' ``UpdateStats``."""
    import torch

    from agentrl.config import load_config
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.policy import Policy
    from agentrl.train.plan import update_policy
    from agentrl.update import make_optimizer, prepare_policy

    with TurnStore(tmp_path / "store.sqlite") as store:
        store.add_episodes([ep], run_id=ep.run_id)
        (back,) = store.load_episodes(ep.run_id)
        table = store.table(ep.run_id)
    for t, u in zip(ep.turns, back.turns, strict=True):
        assert np.array_equal(t.prompt_ids, u.prompt_ids) and np.array_equal(t.completion_ids, u.completion_ids)
        assert np.array_equal(t.completion_logprobs, u.completion_logprobs) and t.reward == u.reward
    cfg = load_config(ROOT / "examples" / "harness_toy.yaml", [f"policy.model={tiny_dir}"])
    engine = HFEngine.from_pretrained(tiny_dir)
    model = prepare_policy(engine.model, cfg.update)
    policy = Policy(engine=engine, renderer=renderer, model=model, pad_id=engine.pad_token_id)
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    stats, _, _ = update_policy(policy, make_optimizer(model, cfg.update.lr, cfg.update.weight_decay), cfg, table,
                             np.ones(len(table)), [back], iteration=0)
    assert sum(s.tokens for s in stats) == sum(t.completion_ids.size for t in back.turns)
    assert any(not torch.equal(a, b) for a, b in zip(before, (p for p in model.parameters() if p.requires_grad)))
    return stats
