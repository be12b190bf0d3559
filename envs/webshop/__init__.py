"""``agentrl_envs.webshop``: our re-implementation of WebShop's text mode (ENVIRONMENTS.md §3).

Owns: data loading (``data``), goals (``goals``), BM25 search (``search``), page rendering and
``anchor_obs`` (``pages``), the page state machine (``session``), the reward (``reward``),
reference policies (``policies``), the cached per-process world (``world``), evaluation
panels (``panels``) and the gymnasium env ``WebShopEnv`` (``env``, registered as
``agentrl/WebShop-v0``). May import ``agentrl.env``; optional deps (``bm25s``, ``PyStemmer``,
``thefuzz``) come with the ``webshop`` extra and are imported lazily.
"""

from agentrl_envs.webshop.env import VERSION, WebShopEnv

__all__ = ["VERSION", "WebShopEnv"]
