"""Env registrations: only ``gymnasium.register`` calls (DESIGN.md). Loaded through the
``gymnasium.envs`` entry-point group; entry points are strings so nothing heavy is imported
until an env is made."""

from gymnasium import register

register(id="agentrl/ALFWorld-v0", entry_point="envs.alfworld.env:ALFWorldEnv", kwargs={"split": "train"})
register(id="agentrl/Toy-v0", entry_point="envs.toy.env:ToyEnv")
register(id="agentrl/TextWorld-v0", entry_point="envs.textworld.env:TextWorldEnv", kwargs={"family": "custom", "params": {"world_size": 2, "nb_objects": 3, "quest_length": 1}, "max_turns": 50})
register(id="agentrl/TextWorld-CU1-v0", entry_point="envs.textworld.env:TextWorldEnv", kwargs={"family": "custom", "params": {"world_size": 2, "nb_objects": 3, "quest_length": 1}, "max_turns": 8})
register(id="agentrl/TextWorld-CC3-v0", entry_point="envs.textworld.env:TextWorldEnv", kwargs={"family": "tw-coin_collector", "params": {"level": 3}, "max_turns": 10})
register(id="agentrl/WebShop-v0", entry_point="envs.webshop.env:WebShopEnv")
register(id="agentrl/HumanEval-v0", entry_point="envs.code.humaneval_env:HumanEvalEnv")
register(id="agentrl/HumanEvalTools-v0", entry_point="envs.code.tools_env:HumanEvalToolsEnv")
