"""Action formats."""

from __future__ import annotations

import pytest

from agentrl.rollout.parsing import ParsedAction, parse_format


def test_tag_format_takes_first_tag_exactly_or_normalised_when_asked():
    f = parse_format("tag:action")
    text = "I think.\n<action>  go\n  north </action> <action>look</action>"
    assert f.parse(text) == ParsedAction("  go\n  north ", True)  # default "exact": as written
    assert f.parse(text, "whitespace") == ParsedAction("go north", True)
    assert f.parse("go north") == ParsedAction("", False)
    assert f.parse("<action>   </action>") == ParsedAction("", False)
    assert f.parse("<action> \n\t</action>", "whitespace") == ParsedAction("", False)
    assert "<action>" in f.instructions


def test_regex_and_whole_formats():
    assert parse_format(r"regex:Action:\s*(.+)").parse("Thought: x\nAction: open door") == ParsedAction("open door", True)
    assert parse_format("whole").parse("  take   key \n", "whitespace") == ParsedAction("take key", True)
    assert parse_format("whole").parse("  take   key \n") == ParsedAction("  take   key \n", True)
    assert parse_format("whole").parse(" \n ") == ParsedAction("", False)


def test_code_keeps_its_newlines_and_indents():
    code = "```python\ndef f(x):\n    if x:\n        return 1\n\treturn  2\n```"
    for spec, text in (("tag:action", f"<action>{code}</action>"), ("whole", code),
                       ("regex:(?s)ANSWER:(.*)", f"ANSWER:{code}")):
        assert parse_format(spec).parse(text) == ParsedAction(code, True), spec


def test_unknown_normalisation_raises():
    with pytest.raises(ValueError, match="unknown action normalisation"):
        parse_format("whole").parse("go", "lower")


@pytest.mark.parametrize("spec, msg", [("tag:", "unknown"), ("xml:a", "unknown"), ("regex:go", "capture group"),
                                       ("regex:(", "invalid regex"), ("tag:a b", "unknown")])
def test_bad_formats_raise(spec, msg):
    with pytest.raises(ValueError, match=msg):
        parse_format(spec)
