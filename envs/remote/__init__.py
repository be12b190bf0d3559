"""``agentrl/Remote-v0``: play an env that another process serves — over OpenEnv (its official
client, ``openenv-core``) or NeMo-Gym's ``GymnasiumServer`` wire — as a TextEnv (``env.RemoteEnv``).
Install the clients with ``pip install 'agentrl[hubs]'``."""
