"""agentrl — multi-turn reinforcement learning for LLM agents.

Packages along the data path (DESIGN.md, layers enforced by import-linter in pyproject.toml):
L0 types, config (a package: sections, loader, checks), registry, log; L1 env, llm, store; L2 proxy; L3 rollout,
credit, update; L3½ distributed (process groups, FSDP2, weight gather; imports update); L4 eval <
train (loop > steps > critic, run_dir); view; L5 cli.

Importing ``agentrl`` registers the ``agentrl/`` env ids with Gymnasium (``agentrl._gym_ids``:
entry-point strings only, and Gymnasium itself is not imported for it)::

    import gymnasium as gym
    import agentrl

    gym.register_envs(agentrl)  # optional: a no-op that keeps linters from dropping the import
    env = gym.make("agentrl/Toy-v0")
"""

__version__ = "0.1.0"

from agentrl import _gym_ids

_gym_ids.install()
del _gym_ids
