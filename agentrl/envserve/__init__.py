"""agentrl.envserve — agentrl env ids served over env-hub protocols (OpenEnv), L2 beside
``agentrl.proxy``: it imports ``agentrl.env`` (the ``EnvPool``) and, lazily, ``openenv-core``,
FastAPI and uvicorn (the ``hubs`` extra); never torch.

- ``dispatch.PoolHub``: one ``EnvPool`` shared by many sessions, calls batched per round;
- ``openenv_app.build_openenv_app``: OpenEnv's own server around a ``PoolHub``;
- ``auth.TokenGate``: the optional token check;
- ``runner.serve_env``: bind, print the URL, run uvicorn (``agentrl envs serve``).
"""

from agentrl.envserve.runner import PROTOCOLS, ServeOptions, serve_env

__all__ = ["PROTOCOLS", "ServeOptions", "serve_env"]
