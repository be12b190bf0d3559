"""An OpenAI Agents SDK agent (``openai-agents``: ``agents.Agent`` / ``Runner``) playing a
registered text env with one function tool, as a harness for the recording proxy.

The SDK runs with its defaults: its default model and model settings and its default API,
the **Responses API** (``POST {OPENAI_BASE_URL}/responses``), the client built from
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` — which ``agentrl.rollout.harness`` sets to the
episode's proxy endpoint, so every model call is a recorded, token-faithful turn. The one
change is that tracing is off: the SDK would otherwise upload each run's trace (prompts and
tool outputs) to OpenAI's servers with that key.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_openai_agents.py

The SDK raises on a reply cut by the token budget (``status: "incomplete"``) or a malformed
tool call; the agent then stops and the episode is scored as far as it got (a harness error
would leave it unscored). Options: ``--max-turns`` (model calls per episode, default 16);
``--enum-actions``: the tool's ``command`` declares an ``enum`` of the env's admissible actions,
renewed after every step (the SDK sends the tool's JSON schema with each call, so a proxy that
decodes tool calls under their schema follows the state; ``examples/harness_agents_textworld.yaml``);
``--stop-when-over``: the run ends with the tool call that ends the game (the SDK's own
``tool_use_behavior``), not at the model's next answer — with the proxy forcing a tool call on
every step (``rollout.harness.force_tool_call``) the model never answers in text, so without it
the run would go on to ``--max-turns``. Needs ``pip install 'agentrl[harness]'``.
"""

from __future__ import annotations

import argparse

from agents import (Agent, FunctionTool, MaxTurnsExceeded, ModelBehaviorError, Runner, ToolsToFinalOutputResult,
                    function_tool, set_tracing_disabled)

from harness_env import INSTRUCTIONS, ToolEnv


class EnumTool:
    """``env.act`` as the SDK's function tool; with ``enum_actions`` its declared ``command`` is an
    enum of the admissible actions, renewed after every step (the SDK reads ``params_json_schema``
    for each request)."""

    def __init__(self, env: ToolEnv, enum_actions: bool) -> None:
        self.env, self.enum_actions = env, enum_actions
        self.tool: FunctionTool = function_tool(self.act, name_override="act")
        self._declare()

    def act(self, command: str) -> str:
        """Send one command to the text game and return what happens, e.g. act(command='go east').

        Args:
            command: the game command, one of the admissible actions
        """
        out = self.env.act(command)
        self._declare()
        return out

    def _declare(self) -> None:
        if self.enum_actions and self.env.admissible:
            self.tool.params_json_schema["properties"]["command"]["enum"] = list(self.env.admissible)


def build_agent(env: ToolEnv, enum_actions: bool = False, stop_when_over: bool = False) -> Agent:
    """The agent: the game instructions and ``env.act`` as its function tool."""
    behavior = "run_llm_again"
    if stop_when_over:
        def behavior(_context, results) -> ToolsToFinalOutputResult:  # the SDK's hook: end the run with the game
            return ToolsToFinalOutputResult(is_final_output=env.done, final_output=results[-1].output if env.done
                                            else None)
    return Agent(name="player", instructions=INSTRUCTIONS, tools=[EnumTool(env, enum_actions).tool],
                 tool_use_behavior=behavior)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-turns", type=int, default=16)
    ap.add_argument("--enum-actions", action="store_true",
                    help="declare the admissible actions as the command's enum, renewed every step")
    ap.add_argument("--stop-when-over", action="store_true", help="end the run with the tool call that ends the game")
    args = ap.parse_args()
    set_tracing_disabled(True)
    env = ToolEnv()
    try:
        Runner.run_sync(build_agent(env, args.enum_actions, args.stop_when_over), env.first_observation,
                        max_turns=args.max_turns)
    except (MaxTurnsExceeded, ModelBehaviorError):
        # out of model calls, or a reply the SDK rejects (cut by the token budget: `response.incomplete`;
        # a malformed or unknown tool call): the episode ends where it is, and the verifier scores the log
        pass
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
