"""agentrl.rollout — env × policy → ``Episode``s (layer L3).

Owns: the agent loop and group collection (LLM policies), tree branching, and the
model-free policies of ``scripted`` (random over admissible actions, expert walkthrough).
May import ``agentrl.env``, ``agentrl.llm``, ``agentrl.types``, ``agentrl.registry``; never
the store (train / cli / proxy write Episodes to it) and never torch directly.

This ``__init__`` stays import-light: it re-exports the request that ``agentrl rollout`` builds
(``request``, where the runners read it) and holds ``get_runner``, which maps a policy name to
the function that plays the episodes (imported only when asked for).
"""

from __future__ import annotations

import importlib

from agentrl.rollout.request import RolloutRequest, Runner

__all__ = ["LLM_RUNNER", "SCRIPTED_POLICIES", "RolloutRequest", "Runner", "get_runner"]

#: Policies that need no model (``agentrl.rollout.scripted``).
SCRIPTED_POLICIES = ("random", "walkthrough", "noisy_walkthrough")

#: Module and function that run LLM policies (any other policy name); added by the LLM rollout.
LLM_RUNNER = ("agentrl.rollout.llm_runner", "run_llm_rollout")


def get_runner(policy: str) -> Runner:
    """The runner of ``policy``: ``scripted.run_scripted`` for random/walkthrough, else the
    LLM runner ``LLM_RUNNER``.

    Raises:
        ValueError: an LLM policy while the LLM runner is not available.
    """
    if policy in SCRIPTED_POLICIES:
        from agentrl.rollout.scripted import run_scripted

        return run_scripted
    module, name = LLM_RUNNER
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ValueError(
            f"policy {policy!r} is not one of the model-free policies {SCRIPTED_POLICIES}; LLM policies need "
            f"the LLM rollout ({module}.{name}) and the llm extra (pip install 'agentrl[llm]'), which this "
            f"installation lacks. Use --policy random or --policy walkthrough"
        ) from None
