"""``agentrl_envs`` (this ``envs/`` folder, installed under that name): only the
``gymnasium.register`` calls of our env ids (DESIGN.md). Imported by ``import agentrl``
(``agentrl._gym_ids``), by ``agentrl.env.registry.load_plugins`` through the ``gymnasium.envs``
entry-point group, or by Gymnasium itself for ``gymnasium.make("agentrl_envs:agentrl/Toy-v0")``.
Entry points are strings, so nothing heavy is imported until an env is made."""

from gymnasium import register

register(id="agentrl/ALFWorld-v0", entry_point="agentrl_envs.alfworld.env:ALFWorldEnv", kwargs={"split": "train"})
register(id="agentrl/Toy-v0", entry_point="agentrl_envs.toy.env:ToyEnv")
register(id="agentrl/JunctionMaze-v0", entry_point="agentrl_envs.junction.env:JunctionMazeEnv")
register(id="agentrl/TextWorld-v0", entry_point="agentrl_envs.textworld.env:TextWorldEnv", kwargs={"family": "custom", "params": {"world_size": 2, "nb_objects": 3, "quest_length": 1}, "max_turns": 50})
register(id="agentrl/TextWorld-CU1-v0", entry_point="agentrl_envs.textworld.env:TextWorldEnv", kwargs={"family": "custom", "params": {"world_size": 2, "nb_objects": 3, "quest_length": 1}, "max_turns": 8})
register(id="agentrl/TextWorld-CC3-v0", entry_point="agentrl_envs.textworld.env:TextWorldEnv", kwargs={"family": "tw-coin_collector", "params": {"level": 3}, "max_turns": 10})
register(id="agentrl/WebShop-v0", entry_point="agentrl_envs.webshop.env:WebShopEnv")
register(id="agentrl/HumanEval-v0", entry_point="agentrl_envs.code.humaneval_env:HumanEvalEnv")
register(id="agentrl/HumanEvalTools-v0", entry_point="agentrl_envs.code.tools_env:HumanEvalToolsEnv")
register(id="agentrl/Remote-v0", entry_point="agentrl_envs.remote.env:RemoteEnv")
