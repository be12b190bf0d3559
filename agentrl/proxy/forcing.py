"""Forced tools and structured output on the wire → a ``GrammarSpec`` (``agentrl.llm.grammar``).

Each dialect names the same two things its own way; all map onto one grammar per request:

============================  ==========================================  =================================
dialect                       forced tool call                            structured output (JSON)
============================  ==========================================  =================================
chat/completions              ``tool_choice: "required"``;                ``response_format``
                              ``{"type": "function", "function":          ``{"type": "json_object"}``;
                              {"name": N}}``                              ``{"type": "json_schema",
                                                                          "json_schema": {"schema": S}}``
responses                     ``"required"``; ``{"type": "function",      ``text.format`` ``json_object`` /
                              "name": N}``                                ``{"type": "json_schema", "schema": S}``
messages (Anthropic)          ``{"type": "any"}``; ``{"type": "tool",     ``output_config.format``
                              "name": N}``                                ``{"type": "json_schema", "schema": S}``
============================  ==========================================  =================================

``required`` / ``any`` allows a call of any offered tool, a name only that tool; either way the
arguments follow the tool's parameter schema. Asking for both a forced tool and JSON output
is a 400 (one completion cannot be both). Errors are ``WireError`` 400s naming the parameter.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.llm.grammar import GrammarSpec
from agentrl.proxy.errors import bad

__all__ = ["chat_grammar", "responses_grammar", "messages_grammar", "server_constraints"]


def _tools_spec(tools: tuple[dict, ...], name: str | None, param: str) -> GrammarSpec:
    """A tool-call grammar over the chat tool dicts ``tools`` (all, or only ``name``)."""
    offered = [(t["function"]["name"], t["function"].get("parameters")) for t in tools
               if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)]
    if not offered:
        raise bad(f"'{param}' forces a tool call but no function tool is offered; send 'tools' or drop '{param}'",
                  param)
    if name is not None:
        offered = [t for t in offered if t[0] == name]
        if not offered:
            raise bad(f"'{param}' names the tool {name!r}, which is not among the offered tools", param)
    try:
        return GrammarSpec.tool_call(offered[:1] if name is not None else offered)
    except ValueError as exc:
        raise bad(f"'{param}': {exc}", param) from None


def _schema_spec(schema: Any, param: str) -> GrammarSpec:
    if not isinstance(schema, dict):
        raise bad(f"'{param}' needs a JSON schema object, got {schema!r}", param)
    return GrammarSpec.json_schema(schema)


def _format_spec(fmt: Any, param: str, schema_of, schema_param: str, kinds: tuple[str, ...]) -> GrammarSpec | None:
    """The JSON-output grammar of a format object (``{"type": ...}``; None: free text).
    ``kinds``: the types this dialect accepts besides ``json_schema`` and a missing format;
    ``schema_of(fmt)``: where its schema sits."""
    kind = fmt.get("type") if isinstance(fmt, dict) else fmt
    if kind == "json_schema":
        return _schema_spec(schema_of(fmt), schema_param)
    if kind == "json_object" and "json_object" in kinds:
        return GrammarSpec.json_schema()
    if kind is None or (kind == "text" and "text" in kinds):
        return None
    raise bad(f"'{param}' type {kind!r} is not supported; use {', '.join(kinds + ('json_schema',))}", param)


def _one(tool: GrammarSpec | None, fmt: GrammarSpec | None, tool_param: str, fmt_param: str) -> GrammarSpec | None:
    if tool is not None and fmt is not None:
        raise bad(f"'{tool_param}' forces a tool call and '{fmt_param}' asks for JSON output; one completion "
                  f"cannot be both: send one of them", tool_param)
    return tool or fmt


def chat_grammar(choice: Any, fmt: Any, tools: tuple[dict, ...]) -> GrammarSpec | None:
    """Chat completions: ``tool_choice`` and ``response_format`` → the grammar (None: free text)."""
    tool = None
    if choice == "required":
        tool = _tools_spec(tools, None, "tool_choice")
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict) \
            and isinstance(choice["function"].get("name"), str):
        tool = _tools_spec(tools, choice["function"]["name"], "tool_choice")
    elif choice not in (None, "auto", "none"):
        raise bad("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": "
                  f"{{\"name\": ...}}}}, got {choice!r}", "tool_choice")
    spec = _format_spec(fmt, "response_format", lambda f: (f.get("json_schema") or {}).get("schema")
                        if isinstance(f.get("json_schema"), dict) else None,
                        "response_format.json_schema.schema", ("text", "json_object"))
    return _one(tool, spec, "tool_choice", "response_format")


def responses_grammar(choice: Any, fmt: Any, tools: tuple[dict, ...]) -> GrammarSpec | None:
    """Responses: ``tool_choice`` and ``text.format`` → the grammar (None: free text)."""
    tool = None
    if choice == "required":
        tool = _tools_spec(tools, None, "tool_choice")
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        tool = _tools_spec(tools, choice["name"], "tool_choice")
    elif choice not in (None, "auto", "none"):
        raise bad("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}, "
                  f"got {choice!r} (hosted tools and allowed_tools are not supported)", "tool_choice")
    spec = _format_spec(fmt, "text.format", lambda f: f.get("schema"), "text.format.schema", ("text", "json_object"))
    return _one(tool, spec, "tool_choice", "text.format")


def messages_grammar(choice: Any, fmt: Any, tools: tuple[dict, ...]) -> GrammarSpec | None:
    """Anthropic Messages: ``tool_choice`` and ``output_config.format`` → the grammar."""
    kind = choice.get("type") if isinstance(choice, dict) else choice
    tool = None
    if kind == "any":
        tool = _tools_spec(tools, None, "tool_choice")
    elif kind == "tool" and isinstance(choice.get("name"), str):
        tool = _tools_spec(tools, choice["name"], "tool_choice")
    elif kind not in (None, "auto", "none"):
        raise bad(f"'tool_choice' type {kind!r} is not supported: use auto, none, any or "
                  "{\"type\": \"tool\", \"name\": ...}", "tool_choice")
    spec = _format_spec(fmt, "output_config.format", lambda f: f.get("schema"), "output_config.format.schema", ())
    return _one(tool, spec, "tool_choice", "output_config.format")


def server_constraints(grammar: GrammarSpec | None, tools: tuple[dict, ...], tool_schemas: dict | None,
                       force_tools: bool, only_tools: tuple[str, ...] | None = None) -> GrammarSpec | None:
    """The grammar a request is decoded under once the *server's* constraints apply (declared by
    whoever runs the proxy, e.g. ``rollout.harness.tool_schemas``, never by the harness):

    - ``force_tools``: a request that offers tools and forces nothing must call one of them
      (as ``tool_choice: required``); a request that asks for JSON output keeps its own grammar;
    - ``tool_schemas`` (tool name → JSON schema): the arguments of a forced call of that tool are
      decoded under this schema instead of the one the harness sent (e.g. an ``enum`` of the
      env's commands where the framework declared a free string). The prompt still shows the
      harness's own tool definitions;
    - ``only_tools`` (tool names): a forced call may call only these of the tools it allows (e.g.
      ``act`` where smolagents also offers its own ``final_answer``); a forced call that allows none
      of them keeps its own grammar.

    Returns ``grammar`` unchanged when none applies.
    """
    if force_tools and grammar is None and any(isinstance(t.get("function"), dict) for t in tools):
        grammar = _tools_spec(tools, None, "tool_choice")
    if only_tools and grammar is not None and grammar.kind == "tool_call":
        kept = tuple((name, schema) for name, schema in grammar.tools if name in only_tools)
        grammar = GrammarSpec(kind="tool_call", tools=kept) if kept else grammar
    if not tool_schemas or grammar is None or grammar.kind != "tool_call":
        return grammar
    offered = [(name, tool_schemas[name] if name in tool_schemas else json.loads(schema))
               for name, schema in grammar.tools]
    return GrammarSpec.tool_call(offered)
