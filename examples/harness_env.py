"""The env side shared by the framework harness examples (``examples/harness_*.py``).

A framework agent gets one function tool, ``act(command)``: it sends a command to the env
that ``agentrl.rollout.harness`` asked for (``AGENTRL_ENV_ID`` reset with ``AGENTRL_SEED``, and
the task ``AGENTRL_TASK_ID`` when it is set: a held-out evaluation)
and returns the observation. Each command is appended to ``AGENTRL_ACTION_LOG`` as
``{"action": ...}``, the log the trainer replays in its own copy of the env for the reward.
Nothing here knows about the proxy: the frameworks find it through their usual
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` variables.
"""

from __future__ import annotations

import json
import os

TOOL_NAME = "act"
TOOL_DOC = "Send one command to the text game and return what happens, e.g. act(command='go east')."
COMMAND_DOC = "the game command, one of the admissible actions"
# ToolEnv.act's docstring says the same, for SDKs that read the tool from the method itself
INSTRUCTIONS = ("You are playing a text game. Call the act tool with one command at a time until you win, "
                "then answer with one short sentence.")
# the tool's JSON schema, for SDKs that take one (anthropic); the others derive it from `act`'s signature
PARAMETERS = {"type": "object", "properties": {"command": {"type": "string", "description": COMMAND_DOC}},
              "required": ["command"]}


def reset_options() -> dict | None:
    """``reset``'s options of the harness contract: the task ``AGENTRL_TASK_ID`` names, if any."""
    task = os.environ.get("AGENTRL_TASK_ID", "")
    return {"task_id": task} if task else None


def describe(obs: str, info: dict) -> str:
    """An observation followed by the admissible actions when the env lists them."""
    acts = info.get("admissible_actions")
    return f"{obs}\nAdmissible actions: {', '.join(acts)}" if acts else obs


class ToolEnv:
    """The registered env of this episode, played through ``act`` (its docstring is the tool's:
    the SDKs that derive a tool from a function read it; ``"The game is over."`` once it ended).

    Attributes:
        first_observation: the reset observation (with the admissible actions): the task.
        done: the episode ended (won, or out of turns); later commands change nothing.
        admissible: the admissible actions now (``info["admissible_actions"]``; empty when the env lists none).
    """

    def __init__(self) -> None:
        from agentrl.env import make  # any registered text env; agentrl's registry has the ids

        self._env = make(os.environ["AGENTRL_ENV_ID"], **json.loads(os.environ.get("AGENTRL_ENV_KWARGS", "{}")))
        obs, info = self._env.reset(seed=int(os.environ.get("AGENTRL_SEED", "0")), options=reset_options())
        self.first_observation = describe(obs, info)
        self.admissible: list[str] = list(info.get("admissible_actions") or ())
        self.done = False
        self._log = open(os.environ.get("AGENTRL_ACTION_LOG") or os.devnull, "a", encoding="utf-8")

    def act(self, command: str) -> str:
        """Send one command to the text game and return what happens, e.g. act(command='go east').

        Args:
            command: the game command, one of the admissible actions
        """
        if self.done:
            return "The game is over."
        self._log.write(json.dumps({"action": command}) + "\n")
        self._log.flush()
        obs, _reward, terminated, truncated, info = self._env.step(command)
        self.done = bool(terminated or truncated)
        self.admissible = list(info.get("admissible_actions") or ())
        return f"{obs}\nThe game is over." if self.done else describe(obs, info)

    def close(self) -> None:
        """Close the env and the action log."""
        self._log.close()
        self._env.close()
