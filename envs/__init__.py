"""Env registrations: only ``gymnasium.register`` calls (DESIGN.md). Loaded through the
``gymnasium.envs`` entry-point group; entry points are strings so nothing heavy is imported
until an env is made."""

from gymnasium import register

register(id="agentrl/ALFWorld-v0", entry_point="envs.alfworld.env:ALFWorldEnv", kwargs={"split": "train"})
