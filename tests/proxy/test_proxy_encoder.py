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


CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
          " + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_template_without_system_role_still_starts(tiny_tokenizer, reply_ids):
    """A Gemma-2 / old-Mistral style template that raises on a system message: the encoder
    probes without one (or falls back to ``renderer.encode``) and the proxy serves."""
    from agentrl.proxy import RecordingProxy

    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                         "{% endif %}" + CHATML)
    renderer = ChatRenderer(tok)
    enc = Encoder(renderer)
    assert enc.direct and enc.incremental  # probed on a conversation without the system message
    for text in TEXTS:
        assert enc(text).tolist() == renderer.encode(text).tolist(), text
    prev = None
    for conv in _conversation(4):
        text = renderer.render_text(conv[1:], add_generation_prompt=True)
        prev = enc.render(text, prev)
        assert prev.ids.tolist() == renderer.encode(text).tolist()
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    with RecordingProxy(engine, renderer).serve() as proxy:
        h = proxy.create_episode()
        out = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0).chat.completions.create(
            model="p", messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content == "look"
        assert proxy.close_episode(h.episode_id).turns[0].completion_ids.tolist() == reply_ids("look")


def test_failing_probe_falls_back_to_renderer_encode(renderer, monkeypatch):
    from jinja2.exceptions import TemplateError

    import agentrl.proxy.encoder as encoder_mod

    def reject(_renderer):
        raise TemplateError("this template renders none of the probe conversations")
    monkeypatch.setattr(encoder_mod, "renderer_probe", reject)
    enc = Encoder(renderer)
    assert not enc.direct and not enc.incremental
    text = renderer.render_text(_conversation(2)[-1], add_generation_prompt=True)
    assert enc(text).tolist() == renderer.encode(text).tolist()
    assert enc.render(text + "x", enc.render(text)).ids.tolist() == renderer.encode(text + "x").tolist()


def _metaspace_unk_tokenizer():
    """A sentencepiece-style BPE (Metaspace ``▁``, prepended to the first piece only, no
    byte fallback: an unknown character encodes to the added token ``<unk>``) with ChatML
    special tokens. The probe texts are all known characters; "☃" is not."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from agentrl.proxy.encoder import renderer_probe

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    corpus = ["You are an agent. Héllo wörld — 你好 🙂 look <tool_call>{\"a\": 1}</tool_call> ok spaced leading "
              "trailing space", "system user assistant tool go east take the key room door hello more words here"]
    ascii_ = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:\n\t "
    alphabet = sorted(set("".join(corpus)) | set(ascii_))
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(corpus * 20, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>")
    tok.chat_template = CHATML
    renderer = ChatRenderer(tok)
    assert all("☃" not in t for t in renderer_probe(renderer))
    return renderer


def test_model_produced_added_token_is_no_restart_point():
    """``<unk>`` stands for an unknown character, not for its own text: restarting the
    encode there would prepend a Metaspace ``▁`` that the full encode does not have."""
    renderer = _metaspace_unk_tokenizer()
    enc = Encoder(renderer)
    assert enc.direct and enc.incremental
    text = "hello x☃y and more words here"
    unk = renderer.tokenizer.unk_token_id
    assert unk in renderer.encode(text).tolist()
    prev = enc.render(text)
    assert prev.cut_tokens.size == 0  # the <unk> is not a cut: text "☃" is not "<unk>"
    for tail in (" more", "<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"):
        got = enc.render(text + tail, prev)
        assert got.ids.tolist() == renderer.encode(text + tail).tolist(), tail
    # the real special tokens still are: a conversation with unknown characters re-encodes from its last one
    prev, special = None, {renderer.tokenizer.convert_tokens_to_ids("<|im_start|>"), renderer.eos_token_id}
    for conv in _conversation(6):
        conv = [Message(m.role, m.content + " ☃x") for m in conv]
        text = renderer.render_text(conv, add_generation_prompt=True)
        prev = enc.render(text, prev)
        assert prev.ids.tolist() == renderer.encode(text).tolist()
        assert prev.cut_tokens.tolist() == [i for i, t in enumerate(prev.ids.tolist()) if t in special]
    # and a literal "<unk>" in the text is an added-token match like any other
    lit = enc.render("say <unk> please, more words here")
    assert lit.cut_tokens.tolist() == [renderer.encode("say ").size] and lit.cut_chars.tolist() == [4]
