"""The LLM runner behind ``agentrl rollout --policy <model>`` (``agentrl.rollout.LLM_RUNNER``).

Loads the policy (a packaged name such as ``smollm2-135m-instruct`` or a path to an HF
folder) into an ``HFEngine`` and plays the request with ``collector.collect``. The engine
module (and torch) is imported lazily, only when an LLM policy is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agentrl.llm.base import SamplingParams
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.prompt import DEFAULT_SYSTEM_PROMPT
from agentrl.rollout.request import RolloutRequest
from agentrl.types import Episode


@dataclass(frozen=True)
class LLMPolicyOptions:
    """LLM-specific knobs of a rollout (CLI flags of ``agentrl rollout``).

    Attributes:
        max_tokens: new tokens per turn (clamped to the model's context).
        temperature / top_p: sampling parameters.
        context: ``"chat"`` or ``"window"``; window_k: pairs kept by ``window``.
        action_format: see ``agentrl.rollout.parsing``.
        system_prompt: the system message template (``agentrl.rollout.prompt``).
        max_batch: most prompts per engine call (default: all active slots).
        return_hidden: store final-layer hidden states (BiPACE).
    """

    max_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    context: str = "chat"
    window_k: int = 3
    action_format: str = "tag:action"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_batch: int | None = None
    return_hidden: bool = False


def collect_config(req: RolloutRequest, opts: LLMPolicyOptions, *, progress: bool = False) -> CollectConfig:
    """Translate a ``RolloutRequest`` + options into a ``CollectConfig``."""
    loop = LoopConfig(context=opts.context, window_k=opts.window_k, max_turns=req.max_turns,
                      action_format=opts.action_format, system_prompt=opts.system_prompt)
    sampling = SamplingParams(temperature=opts.temperature, top_p=opts.top_p, max_tokens=opts.max_tokens, seed=req.seed)
    return CollectConfig(env_id=req.env_id, n_groups=req.episodes // req.group, group_size=req.group, seed=req.seed,
                         loop=loop, sampling=sampling, env_kwargs=dict(req.env_kwargs),
                         num_slots=req.num_slots or min(req.episodes, 8), num_workers=req.num_workers,
                         step_timeout_s=req.step_timeout_s, max_observation_chars=req.max_observation_chars,
                         max_batch=opts.max_batch,
                         return_hidden=opts.return_hidden, progress=progress)


def run_llm_rollout(req: RolloutRequest, on_episode: Callable[[Episode], None], *,
                    options: LLMPolicyOptions | None = None) -> None:
    """Play ``req`` with the LLM policy ``req.policy``; ``on_episode`` gets each finished episode.

    Raises:
        FileNotFoundError: the model is not prepared / not a folder. KeyError: unknown
            policy name. EnvPoolError: the env cannot be constructed.
    """
    from agentrl.llm.hf import load_hf_policy

    engine, renderer = load_hf_policy(req.policy)
    collect(engine, renderer, collect_config(req, options or LLMPolicyOptions()), on_episode=on_episode, keep=False)
