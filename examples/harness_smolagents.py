"""A smolagents ``ToolCallingAgent`` on ``OpenAIModel`` playing a registered text env with
one function tool, as a harness for the recording proxy.

smolagents runs as installed: ``OpenAIModel`` builds an ``openai.OpenAI`` client that reads
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (set by ``agentrl.rollout.harness`` to the
episode's proxy endpoint), and every call of the agent is a chat completion with
``tool_choice: "required"`` and the ``stop`` strings ``["Observation:", "Calling tools:"]``
— so the model always answers with a tool call, ``act`` or smolagents' own ``final_answer``,
which ends the run. The proxy samples such forced calls under a grammar (the ``grammar``
extra; docs/proxy.md), with the HF engine.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_smolagents.py

Options: ``--max-steps`` (agent steps, one model call each; default 16); ``--enum-actions``: the
tool's ``command`` declares an ``enum`` of the env's admissible actions, renewed after every step
(smolagents sends the tool's schema with each call, so the proxy's forced-call grammar follows the
state: envs whose commands change with the state, e.g. TextWorld; ``examples/harness_smolagents_textworld.yaml``);
``--until-over``: a final answer while the game is still on is refused (smolagents' own
``final_answer_checks``: the agent is told so and goes on). SmolLM2 calls ``final_answer`` on its first
step in most episodes; greedy, it calls it again after each refusal (measured on TextWorld-CU1: 160
of 175 calls, 15 of 16 episodes past a 600 s deadline), so the flag alone does not keep it playing.
Needs ``pip install 'agentrl[harness]'``.
"""

from __future__ import annotations

import argparse

from smolagents import OpenAIModel, Tool, ToolCallingAgent

from harness_env import COMMAND_DOC, INSTRUCTIONS, TOOL_DOC, TOOL_NAME, ToolEnv


class ActTool(Tool):
    """The env's ``act`` tool as a smolagents ``Tool``."""

    name = TOOL_NAME
    description = TOOL_DOC
    inputs = {"command": {"type": "string", "description": COMMAND_DOC}}
    output_type = "string"

    def __init__(self, env: ToolEnv, enum_actions: bool = False) -> None:
        self.inputs = {"command": dict(self.inputs["command"])}  # this instance's copy: the enum is per state
        super().__init__()
        self.env, self.enum_actions = env, enum_actions
        self._declare()

    def _declare(self) -> None:
        """Put the admissible actions in the declared schema (``--enum-actions``)."""
        if self.enum_actions and self.env.admissible:
            self.inputs["command"]["enum"] = list(self.env.admissible)

    def forward(self, command: str) -> str:
        out = self.env.act(command)
        self._declare()
        return out


def game_over(env: ToolEnv):
    """A smolagents final-answer check: accept a final answer only once the game has ended."""

    def check(final_answer, memory, agent=None) -> bool:
        if not env.done:
            raise ValueError("the game is not over yet: call act with one of the admissible commands")
        return True

    return check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-steps", type=int, default=16)
    ap.add_argument("--enum-actions", action="store_true",
                    help="declare the admissible actions as the command's enum, renewed every step")
    ap.add_argument("--until-over", action="store_true", help="refuse a final answer while the game is still on")
    args = ap.parse_args()
    env = ToolEnv()
    try:
        agent = ToolCallingAgent(tools=[ActTool(env, args.enum_actions)], model=OpenAIModel(model_id="policy"),
                                 instructions=INSTRUCTIONS, max_steps=args.max_steps,
                                 final_answer_checks=[game_over(env)] if args.until_over else None)
        agent.run(env.first_observation)  # at max_steps smolagents asks for a final answer and returns
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
