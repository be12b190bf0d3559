"""The proxy's ``Encoder``: the same ids as ``ChatRenderer.encode`` (direct backend path),
incremental full re-encodes equal to full encodes, the fallbacks, and the drift metric of a
multi-turn episode equal to a full re-render's (MODELS.md §5.5 step 3)."""

from __future__ import annotations

import copy

import numpy as np
import openai
import pytest

from agentrl.llm.chat import ChatRenderer
from agentrl.llm.scripted import ScriptedEngine
from agentrl.proxy.encoder import Encoder
from agentrl.types import Message

TEXTS = ["", " ", "go east", "  two  spaces\n\n\ttab", "Héllo wörld — 你好 🙂",
         "<|im_start|>user\nx<|im_end|>\n", "a<|im_end|>b<tool_call>{\"n\": 1}</tool_call>", "<|im_start",
         "trailing <|im_end"]


class _Spy:
    """Wraps a ``tokenizers.Tokenizer``, recording the length of every text encoded."""

    def __init__(self, backend) -> None:
        self.backend, self.lengths = backend, []

    def encode(self, text, **kw):
        self.lengths.append(len(text))
        return self.backend.encode(text, **kw)

    def __getattr__(self, name):
        return getattr(self.backend, name)


def _conversation(turns: int) -> list[list[Message]]:
    """Growing conversations with multi-byte text and special-token text inside messages."""
    msgs = [Message("system", "You are an agent."), Message("user", "You are in room 1.")]
    out = [list(msgs)]
    for k in range(turns):
        msgs += [Message("assistant", f"go east {k} ünï ∑"), Message("user", f"obs {k}:\n  a door.\t<|im_end|> x")]
        out.append(list(msgs))
    return out


def test_direct_encode_equals_renderer_encode(renderer):
    enc = Encoder(renderer)
    assert enc.direct and enc.incremental
    for text in TEXTS:
        ids = enc(text)
        assert ids.dtype == np.int32 and ids.tolist() == renderer.encode(text).tolist(), text


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_incremental_render_equals_full_encode(which, request):
    tok = request.getfixturevalue("tiny_tokenizer" if which == "tiny" else "smollm2_tokenizer")
    renderer = ChatRenderer(tok)
    enc = Encoder(renderer)
    assert enc.incremental
    enc._backend = spy = _Spy(enc._backend)
    prev = None
    for conv in _conversation(12):
        text = renderer.render_text(conv, add_generation_prompt=True)
        spy.lengths.clear()
        prev = enc.render(text, prev)
        assert prev.ids.tolist() == renderer.encode(text).tolist()
        assert prev.cut_tokens.size == prev.cut_chars.size > 0
    # the last call encoded only the tail: from the last assistant header on
    assert spy.lengths == [len(text) - text.rindex("<|im_start|>assistant", 0, len(text) - 30)]
    # arbitrary prefixes, cut inside words and inside special tokens, one character at a time near the end
    full = text
    prev = enc.render(full[:40])
    for end in list(range(41, len(full) - 60, 37)) + list(range(len(full) - 60, len(full) + 1)):
        prev = enc.render(full[:end], prev)
        assert prev.ids.tolist() == renderer.encode(full[:end]).tolist(), end
    # a text that does not extend prev is encoded in full
    other = enc.render("unrelated text", prev)
    assert other.ids.tolist() == renderer.encode("unrelated text").tolist()


def test_fallback_when_backend_state_differs(renderer):
    enc = Encoder(renderer)
    text = renderer.render_text(_conversation(3)[-1], add_generation_prompt=True)
    want = renderer.encode(text).tolist()
    renderer.tokenizer.backend_tokenizer.enable_truncation(8)  # not transformers' encode state
    try:
        assert enc(text).tolist() == want  # renderer.encode (which resets the state), not the backend as set
        renderer.tokenizer.backend_tokenizer.enable_truncation(8)
        assert enc.render(text).ids.tolist() == want
    finally:
        renderer.tokenizer.backend_tokenizer.no_truncation()


def test_no_incremental_with_stripping_added_tokens(tiny_tokenizer):
    from tokenizers import AddedToken

    tok = copy.deepcopy(tiny_tokenizer)
    tok.add_tokens([AddedToken("<obs>", lstrip=True, rstrip=True, special=True)], special_tokens=True)
    renderer = ChatRenderer(tok)
    enc = Encoder(renderer)
    assert enc.direct and not enc.incremental
    prev = None
    for conv in _conversation(3):
        text = renderer.render_text(conv + [Message("user", "see  <obs>  here")], add_generation_prompt=True)
        prev = enc.render(text, prev)
        assert prev.ids.tolist() == renderer.encode(text).tolist()


def test_multi_turn_drift_equals_full_rerender(serve, renderer):
    """Turns alternate canonical and non-canonical completions; the recorded drift metric of
    every continued turn equals the comparison with a full re-render of its conversation."""
    tok = renderer.tokenizer

    def split(text: str) -> list[int]:
        return [i for c in text for i in tok.encode(c, add_special_tokens=False)] + [renderer.eos_token_id]

    def canon(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False) + [renderer.eos_token_id]

    replies = [canon("go east"), split("take key"), canon("look"), canon("open door"), split("go west"), canon("wait")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    messages = [{"role": "system", "content": "You play."}, {"role": "user", "content": "Room 1."}]
    convs = []
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        for k in range(len(replies)):
            convs.append([Message(m["role"], m["content"]) for m in messages])
            out = client.chat.completions.create(model="p", messages=messages)
            messages = messages + [out.choices[0].message.model_dump(exclude_none=True),
                                   {"role": "user", "content": f"Room {k + 2}."}]
        ep = proxy.close_episode(h.episode_id)
    assert [t.info["prompt_source"] for t in ep.turns] == ["rendered"] + ["tito"] * 5
    assert [t.info["segment"] for t in ep.turns] == [0] * 6
    oks = []
    for a, b, conv in zip(ep.turns, ep.turns[1:], convs[1:]):
        head = np.concatenate([a.prompt_ids, a.completion_ids, renderer.bridge_ids(a.completion_ids)])
        full = renderer.render_ids(conv)
        ok = full.size >= head.size and np.array_equal(full[: head.size], head)
        assert b.info["token_prefix_ok"] is ok
        if not ok:
            m = min(head.size, full.size)
            diff = np.flatnonzero(full[:m] != head[:m])
            assert b.info["first_mismatch"] == (int(diff[0]) if diff.size else m)
        oks.append(ok)
    assert oks == [True, False, False, False, False]  # drift persists once a non-canonical split is in the ids
