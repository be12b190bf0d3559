"""Data package: the shipped ALFWorld panel manifests (JSON), see ``envs.alfworld.panels``."""
