"""Issue 23 item 11: one Hermes ``<tool_call>`` parser. The proxy (sampled text → OpenAI
tool_calls) and the tool-use code env (an action → its call) read the same blocks: closed
ones and a final unterminated one (vLLM's Hermes parser does the same), so a completion
cut right after the JSON is a call in both places."""

from __future__ import annotations

import pytest

from agentrl.llm.tool_text import tool_call_blocks
from agentrl.proxy.messages import split_tool_calls
from agentrl_envs.code.tool_calls import ToolCallError, parse_tool_call

SUBMIT = '{"name": "submit", "arguments": {"code": "def f():\\n    return 1\\n"}}'


@pytest.mark.parametrize("text", [
    f"<tool_call>\n{SUBMIT}\n</tool_call>",
    f"Let me submit.\n<tool_call>{SUBMIT}</tool_call>",
    f"Let me submit.\n<tool_call>\n{SUBMIT}\n",  # unterminated: the stop id came right after the JSON
])
def test_proxy_and_env_read_the_same_call(text: str) -> None:
    (block,) = tool_call_blocks(text)
    assert block.body == SUBMIT and text[block.start:block.end].startswith("<tool_call>")
    content, calls = split_tool_calls(text, tools_offered=True)
    assert [c.name for c in calls] == ["submit"] and "tool_call" not in content
    call = parse_tool_call(text)
    assert call.name == "submit" and call.code == "def f():\n    return 1\n"
    assert calls[0].arguments == '{"code":"def f():\\n    return 1\\n"}'


def test_no_block_and_malformed_blocks() -> None:
    assert tool_call_blocks("just text") == []
    text = "<tool_call>{not json}</tool_call> done"
    assert split_tool_calls(text, tools_offered=True) == (text, ())  # kept as content
    with pytest.raises(ToolCallError, match="not valid JSON"):
        parse_tool_call(text)
    two = f"<tool_call>{SUBMIT}</tool_call><tool_call>{SUBMIT}</tool_call>"
    assert len(tool_call_blocks(two)) == 2 and len(split_tool_calls(two, tools_offered=True)[1]) == 2
    with pytest.raises(ToolCallError, match="exactly one tool call"):
        parse_tool_call(two)
