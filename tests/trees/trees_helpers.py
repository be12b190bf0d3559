"""Shared helpers of the tree tests: the toy collection config and a scripted policy."""

from __future__ import annotations

import random

import numpy as np

from agentrl.llm.base import SamplingParams
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig

ENV_KW = {"min_rooms": 2, "max_rooms": 3, "max_turns": 5}


def _cc(seed=2, n_groups=2):
    """Toy-env collection: n_groups tasks, tiny-model friendly (constrained, 8 tokens)."""
    return CollectConfig(env_id="agentrl/Toy-v0", n_groups=n_groups, seed=seed, num_workers=1, progress=False,
                         loop=LoopConfig(max_turns=5, action_format="whole", action_constraint="admissible"),
                         sampling=SamplingParams(max_tokens=8, seed=seed), env_kwargs=ENV_KW)


def heuristic_engine(tok) -> ScriptedEngine:
    """A scripted policy that wins often but not always: it reads the admissible actions
    from the prompt, takes the key / opens the door (with the key) when it can, otherwise
    walks or looks at random (seeded by the call index)."""

    def script(prompt: np.ndarray, k: int) -> list[int]:
        text = tok.decode(prompt.tolist())
        acts = text.rsplit("Admissible actions: ", 1)[-1].split("\n", 1)[0].split(", ")
        if "take key" in acts:
            act = "take key"
        elif "open door" in acts and "You take the key" in text:
            act = "open door"
        else:
            act = random.Random(k).choice([a for a in acts if a.startswith("go")] + ["look"])
        return tok.encode(act, add_special_tokens=False) + [tok.eos_token_id]

    return ScriptedEngine(script, eos_token_id=tok.eos_token_id, max_context=4096)
