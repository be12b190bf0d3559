"""Toy text env (dependency-free, deterministic): a corridor of rooms with a key and a locked
door. States repeat when the agent walks back and forth, so anchor groups form; it has
admissible actions and a walkthrough. Registered as ``agentrl/Toy-v0``."""
