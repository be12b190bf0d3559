"""agentrl — multi-turn reinforcement learning for LLM agents.

Packages along the data path (DESIGN.md, layers enforced by import-linter in pyproject.toml):
L0 types, config (+ config_sections), registry, log; L1 env, llm, store; L2 proxy; L3 rollout,
credit, update; L3½ dist (process groups, FSDP2, weight gather; imports update); L4 eval <
train (loop > steps > critic, run_dir); view; L5 cli.
"""

__version__ = "0.1.0"
