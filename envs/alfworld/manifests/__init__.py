"""Data package: the shipped ALFWorld panel manifests (JSON), see ``agentrl_envs.alfworld.panels``."""
