"""HiPER's tags (ALGORITHMS.md §14.2): ``parse_hiper`` on text, ``ChatRenderer.token_spans`` on
real tokenizers, the agent loop recording them in ``Turn.info`` with ``action_format: hiper``, and the
store's ``table()`` reading them back exactly as ``TurnTable.from_episodes``."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.env.pool import EnvPool
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.parsing import parse_format, parse_hiper
from agentrl.store import TurnStore
from agentrl.types import NO_SUBGOAL, TurnTable

TEXT = "I think. <switch> keep </switch><subgoal>find apple</subgoal> then <action>go east</action>"


def test_parse_hiper_reads_the_three_tags_and_their_spans():
    tags = parse_hiper(TEXT)
    assert tags.switch is False and tags.subgoal == "find apple" and tags.has_switch
    assert TEXT[slice(*tags.spans["switch"])] == "<switch> keep </switch>"
    assert TEXT[slice(*tags.spans["subgoal"])] == "<subgoal>find apple</subgoal>"
    assert TEXT[slice(*tags.spans["action"])] == "<action>go east</action>"
    assert parse_hiper("<switch>switch</switch>").switch is True  # upper-cased before the comparison
    assert parse_hiper("<switch>NEXT</switch>", keep_values=("next",)).switch is False
    assert parse_format("hiper").parse(TEXT).text == "go east"


def test_parse_hiper_missing_tags():
    none = parse_hiper("go east")
    assert (none.switch, none.subgoal, none.has_switch) == (False, None, False)  # missing switch = KEEP
    assert none.spans == {"switch": None, "subgoal": None, "action": (0, 7)}  # no <action>: the whole text
    empty = parse_hiper("<switch></switch><subgoal></subgoal>")
    assert empty.switch is False and empty.subgoal == "" and empty.has_switch  # empty switch = KEEP


@pytest.mark.parametrize("tok", ["tiny_tokenizer", "smollm2_tokenizer"])
def test_token_spans_cover_exactly_the_tag_text(tok, request):
    r = ChatRenderer(request.getfixturevalue(tok))
    ids = np.array([*r.encode(TEXT).tolist(), r.eos_token_id])
    tags = parse_hiper(r.completion_text(ids))
    names = ("switch", "subgoal", "action")
    spans = r.token_spans(ids, [tags.spans[k] for k in names])
    contents = {"switch": " keep ", "subgoal": "find apple", "action": "go east"}
    for name, (a, b) in zip(names, spans):
        text = r.tokenizer.decode(ids[a:b].tolist())
        assert contents[name] in text and len(text) <= len(TEXT[slice(*tags.spans[name])]) + 2, (name, text)
        assert 0 <= a < b <= ids.size - 1  # never the EOS
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0]  # disjoint: a token is in one span only
    whole = r.tokenizer.decode(ids[spans[0][0]:spans[2][1]].tolist())
    assert whole.strip().startswith("<switch>") and whole.endswith("</action>")
    none, empty = r.token_spans(ids, [None, (5, 5)])
    assert none is None and empty[0] == empty[1]


@pytest.fixture(scope="module")
def toy_pool():
    with EnvPool("agentrl/Toy-v0", 4, num_workers=1) as pool:
        yield pool


def test_agent_loop_records_the_tags_and_the_store_reads_them_back(tiny_tokenizer, toy_pool, tmp_path):
    r = ChatRenderer(tiny_tokenizer)
    outs = ["<switch>SWITCH</switch><subgoal>go east</subgoal><action>go east</action>",
            "<switch>KEEP</switch><subgoal>go east</subgoal><action>go east</action>",
            "<action>go east</action>"]
    script = [[*r.encode(o).tolist(), r.eos_token_id] for o in outs]
    eng = ScriptedEngine(script, eos_token_id=r.eos_token_id)
    cfg = CollectConfig(env_id="agentrl/Toy-v0", loop=LoopConfig(max_turns=3, action_format="hiper"), progress=False,
                        n_groups=1, group_size=1)
    (ep,) = collect(eng, r, cfg, pool=toy_pool)
    info = [t.info for t in ep.turns]
    assert len(info) >= 2  # KEEP after SWITCH is recorded
    assert [i["switch"] for i in info] == [True, False, False][: len(info)]
    assert [i["switch_span"] for i in info] == [True, True, False][: len(info)]
    assert [i.get("subgoal") for i in info] == ["go east", "go east", None][: len(info)]
    assert all(t.action == "go east" for t in ep.turns)
    first = ep.turns[0]
    a, b = info[0]["hiper_spans"]["action"]
    assert "<action>go east</action>" in r.tokenizer.decode(first.completion_ids[a:b].tolist())
    if len(info) == 3:
        assert info[2]["hiper_spans"]["switch"] is None and info[2]["hiper_spans"]["subgoal"] is None
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ep], run_id="r")
        table = store.table("r")
        ref = TurnTable.from_episodes(store.load_episodes("r"))
    for col in ("switch", "has_switch", "subgoal_key"):
        np.testing.assert_array_equal(getattr(table, col), getattr(ref, col))
    assert table.switch.tolist() == [True, False, False][: len(info)]
    assert table.subgoal_key.tolist() == [0, 0, NO_SUBGOAL][: len(info)]


def test_tables_without_tags_have_no_hiper_columns():
    assert TurnTable.from_episodes([]).switch is None
