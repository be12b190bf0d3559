"""What a proxied call writes into its turn besides tokens: the observation the agent was
newly shown, the sampling parameters in effect, the marks of an aborted call and its failure
cause (``agentrl.failures``), and the tool-call parse checks.

**Tool-call parse fidelity.** A reply can hold tool-call markup that never became a call (a
``<tool_call>`` block whose body is not JSON with a string ``name``: the harness saw text, not a
call — the silent drop users of other stacks report, e.g. vLLM#39056), or a call whose name
was not offered or whose arguments break that tool's ``parameters`` schema. ``tool_call_checks``
counts both on every call that offered tools: ``info["tool_markup_unparsed"]`` (blocks seen, not
parsed) and ``info["tool_args_invalid"]`` (calls that fail their schema), with the first
problems in ``info["tool_call_errors"]``; ``agentrl.rollout.stats.proxy_metrics`` sums them per
iteration and the viewer flags the turn.
"""

from __future__ import annotations

from typing import Sequence

import orjson

from agentrl.llm.base import SamplingParams
from agentrl.llm.tool_text import tool_call_blocks
from agentrl.proxy.wire import ChatRequest, ToolCall

#: Problems listed per turn in ``info["tool_call_errors"]`` (the counts are exact).
MAX_LISTED = 5


def failure_of(version_start: int, version_end: int, delivered: bool) -> tuple[str, str]:
    """(cause, text) of an aborted call (``agentrl.failures.HARNESS_CAUSES``): the weights
    changed while it was generated, the client hung up, or the engine aborted it."""
    if version_end != version_start:
        return "mixed_versions", (f"the weights changed from policy version {version_start} to {version_end} while the "
                                  "reply was generated (update weights through RecordingProxy.update_weights, which "
                                  "holds calls meanwhile)")
    if not delivered:
        return "client_disconnected", "the client hung up before the whole reply was delivered"
    return "model_call_failed", "the engine aborted the generation"


def mark_aborted(info: dict, n_tokens: int) -> None:
    """Mark a turn's ``info`` as an aborted call whose ``n_tokens`` sampled ids are dropped."""
    info.update(fork=False, finish_reason="abort", trainable=False, aborted_completion_tokens=n_tokens)


def sampling_info(s: SamplingParams) -> dict:
    """The sampling parameters in effect, for ``info["sampling"]``."""
    return {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
            "seed": s.row_seeds[0] if s.row_seeds else s.seed, "greedy": s.greedy}


def observation_of(req: ChatRequest) -> str:
    """What the agent was newly shown: the messages after the last assistant message
    (the raw prompt for ``completions``)."""
    if req.prompt is not None:
        return req.prompt if isinstance(req.prompt, str) else ""
    last = max((i for i, m in enumerate(req.messages) if m.role == "assistant"), default=-1)
    return "\n".join(m.content for m in req.messages[last + 1:])


def tool_call_checks(text: str, calls: Sequence[ToolCall], tools: Sequence[dict]) -> dict:
    """The tool-call fidelity fields of a reply (see the module docstring); ``{}`` when no tool
    was offered. ``text``: the decoded reply (stop-cut); ``calls``: what the parser made of it;
    ``tools``: the request's tool objects (``{"type": "function", "function": {...}}``)."""
    if not tools:
        return {}
    import jsonschema

    schemas = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools
               if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)}
    errors = []
    unparsed = max(0, len(tool_call_blocks(text)) - len(calls))
    if unparsed:
        errors.append(f"{unparsed} <tool_call> block(s) not parsed into a call (not JSON with a string 'name')")
    invalid = 0
    for c in calls:
        if c.name not in schemas:
            invalid += 1
            errors.append(f"call of {c.name!r}, which was not offered (offered: {sorted(schemas)})")
            continue
        try:
            args = orjson.loads(c.arguments)
            jsonschema.validate(args, schemas[c.name])
        except orjson.JSONDecodeError:
            invalid += 1
            errors.append(f"{c.name}: arguments are not JSON: {c.arguments[:100]!r}")
        except jsonschema.ValidationError as exc:
            invalid += 1
            errors.append(f"{c.name}: arguments break its schema: {exc.message[:200]}")
        except jsonschema.SchemaError as exc:
            invalid += 1
            errors.append(f"{c.name}: the tool's parameters are not a valid JSON schema: {exc.message[:200]}")
    out = {"tool_markup_unparsed": unparsed, "tool_args_invalid": invalid}
    if errors:
        out["tool_call_errors"] = errors[:MAX_LISTED]
    return out
