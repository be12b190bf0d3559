"""Action formats."""

from __future__ import annotations

import pytest

from agentrl.rollout.parsing import ParsedAction, parse_format


def test_tag_format_takes_first_tag_and_normalises_space():
    f = parse_format("tag:action")
    assert f.parse("I think.\n<action>  go\n  north </action> <action>look</action>") == ParsedAction("go north", True)
    assert f.parse("go north") == ParsedAction("", False)
    assert f.parse("<action>   </action>") == ParsedAction("", False)
    assert "<action>" in f.instructions


def test_regex_and_whole_formats():
    assert parse_format(r"regex:Action:\s*(.+)").parse("Thought: x\nAction: open door") == ParsedAction("open door", True)
    assert parse_format("whole").parse("  take   key \n") == ParsedAction("take key", True)
    assert parse_format("whole").parse(" \n ") == ParsedAction("", False)


@pytest.mark.parametrize("spec, msg", [("tag:", "unknown"), ("xml:a", "unknown"), ("regex:go", "capture group"),
                                       ("regex:(", "invalid regex"), ("tag:a b", "unknown")])
def test_bad_formats_raise(spec, msg):
    with pytest.raises(ValueError, match=msg):
        parse_format(spec)
