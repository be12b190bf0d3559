"""agentrl — multi-turn reinforcement learning for LLM agents.

Packages along the data path (DESIGN.md): env (L1), llm (L1), proxy (L2), rollout, store,
credit, update (L3), train / eval (L4), cli (L5); types, config, registry and log are L0.
"""

__version__ = "0.1.0"
