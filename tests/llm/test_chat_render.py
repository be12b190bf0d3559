"""Chat renderer: bridge tokens from the template (P2), exact extension (P1), loss masks (P3)."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.llm.chat import ChatRenderer, build_segment, episode_segments
from agentrl.types import Message as M
from agentrl.types import Turn

WORDS = "go north take key open door look inventory east west red box lamp table the a".split()


def _text(rng: np.random.Generator, n: int) -> str:
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    return " ".join(words).capitalize()


def _renderer(tokenizer, template: str | None = None) -> ChatRenderer:
    if template is not None:
        import copy

        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.chat_template = template
    return ChatRenderer(tokenizer)


TAIL2_TEMPLATE = (  # ChatML variant whose tail after EOS is two newlines: the bridge must follow it
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
THINK_STRIP_TEMPLATE = (  # rewrites history: earlier assistant turns lose their <think> part (Qwen3-like)
    "{% for m in messages %}{% set c = m['content'] %}"
    "{% if m['role'] == 'assistant' and not loop.last %}{% set c = c.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + c + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _conversation_check(r: ChatRenderer, seed: int, turns: int = 4) -> tuple[list, list]:
    """Extend a random conversation turn by turn; assert P1/P2 at every step."""
    rng = np.random.default_rng(seed)
    msgs = (M("system", _text(rng, 5)), M("user", _text(rng, 8)))
    prompt = r.render_ids(msgs)
    prompts, comps = [prompt], []
    for _ in range(turns):
        comp = np.concatenate([r.encode(_text(rng, int(rng.integers(1, 9)))), [r.eos_token_id]]).astype(np.int32)
        ext = r.extend(prompt, msgs, comp, [M("user", _text(rng, 6))])
        assert not ext.forked
        # P2: prompt + completion + template tail + new-message delta == the full render
        np.testing.assert_array_equal(ext.prompt_ids, r.render_ids(ext.messages))
        np.testing.assert_array_equal(ext.prompt_ids[: prompt.size + comp.size], np.concatenate([prompt, comp]))
        np.testing.assert_array_equal(ext.prompt_ids[prompt.size + comp.size :][: ext.bridge_len], r.tail_ids)
        comps.append(comp)
        msgs, prompt = ext.messages, ext.prompt_ids
        prompts.append(prompt)
    return prompts[:-1], comps


@pytest.mark.parametrize("seed", range(12))
def test_p2_bridge_from_template_tiny_chatml(tiny_tokenizer, seed):
    r = _renderer(tiny_tokenizer)
    assert r.tail_text == "\n"
    _conversation_check(r, seed)


@pytest.mark.parametrize("seed", range(4))
def test_p2_bridge_follows_a_two_newline_tail(tiny_tokenizer, seed):
    r = _renderer(tiny_tokenizer, TAIL2_TEMPLATE)
    assert r.tail_text == "\n\n"
    _conversation_check(r, seed)


@pytest.mark.parametrize("seed", range(12))
def test_p2_bridge_from_template_smollm2(smollm2_tokenizer, seed):
    r = _renderer(smollm2_tokenizer)
    assert (r.eos_token_id, r.tail_text) == (2, "\n")
    _conversation_check(r, seed)


def test_smollm2_default_system_prompt_is_rendered(smollm2_tokenizer):
    r = _renderer(smollm2_tokenizer)
    text = r.render_text([M("user", "hi")], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_p1_non_canonical_split_is_kept_and_differs_from_retokenized(tiny_tokenizer):
    r = _renderer(tiny_tokenizer)
    canonical = r.encode(" import")
    assert canonical.size == 1  # one merged token in the BPE trained on the stdlib
    split = np.concatenate([r.encode(ch) for ch in " import"])  # 7 single-character tokens
    assert split.size == 7 and r.tokenizer.decode(split) == " import"
    msgs = (M("user", "Write a keyword"),)
    prompt = r.render_ids(msgs)
    comp = np.concatenate([split, [r.eos_token_id]]).astype(np.int32)
    ext = r.extend(prompt, msgs, comp, [M("user", "ok")])
    assert not ext.forked
    np.testing.assert_array_equal(ext.prompt_ids[: prompt.size + comp.size], np.concatenate([prompt, comp]))
    retok = r.render_ids(ext.messages)  # what a re-tokenizing loop would have used
    assert retok.size == ext.prompt_ids.size - 6
    assert not np.array_equal(retok[: prompt.size + comp.size], ext.prompt_ids[: prompt.size + comp.size])


def test_length_cut_completion_gets_eos_in_bridge(tiny_tokenizer):
    r = _renderer(tiny_tokenizer)
    msgs = (M("user", "Say something"),)
    prompt = r.render_ids(msgs)
    comp = r.encode("Go north and")  # no EOS: cut by max_tokens
    ext = r.extend(prompt, msgs, comp, [M("user", "Next")])
    assert ext.bridge_len == 1 + r.tail_ids.size
    bridge = ext.prompt_ids[prompt.size + comp.size :][: ext.bridge_len]
    np.testing.assert_array_equal(bridge, np.concatenate([[r.eos_token_id], r.tail_ids]))
    np.testing.assert_array_equal(ext.prompt_ids, r.render_ids(ext.messages))


def test_history_rewriting_template_forks(tiny_tokenizer):
    r = _renderer(tiny_tokenizer, THINK_STRIP_TEMPLATE)
    msgs = (M("user", "Task"),)
    prompt = r.render_ids(msgs)
    comp = np.concatenate([r.encode("<think>hmm</think>go north"), [r.eos_token_id]]).astype(np.int32)
    ext = r.extend(prompt, msgs, comp, [M("user", "You went north")])
    assert ext.forked and ext.bridge_len == 0
    np.testing.assert_array_equal(ext.prompt_ids, r.render_ids(ext.messages))
    assert "hmm" not in r.tokenizer.decode(ext.prompt_ids)
    # without <think> the same template is append-only
    comp2 = np.concatenate([r.encode("go north"), [r.eos_token_id]]).astype(np.int32)
    assert not r.extend(prompt, msgs, comp2, [M("user", "You went north")]).forked


@pytest.mark.parametrize("seed", range(6))
def test_p3_loss_mask_exactly_on_sampled_tokens(tiny_tokenizer, seed):
    r = _renderer(tiny_tokenizer)
    prompts, comps = _conversation_check(r, seed, turns=3)
    lps = [np.linspace(-1, -0.1, c.size).astype(np.float32) for c in comps]
    seg = build_segment(prompts, comps, lps)
    np.testing.assert_array_equal(seg.ids[seg.loss_mask == 1], np.concatenate(comps))
    assert seg.loss_mask.sum() == sum(c.size for c in comps)
    np.testing.assert_array_equal(seg.logprobs[seg.loss_mask == 1], np.concatenate(lps))
    assert np.all(seg.logprobs[seg.loss_mask == 0] == 0)
    # header "<|im_start|>assistant\n" and the bridge "\n" positions are 0
    header = r.encode("<|im_start|>assistant\n")
    for p in prompts:
        np.testing.assert_array_equal(seg.ids[p.size - header.size : p.size], header)
        assert seg.loss_mask[p.size - header.size : p.size].sum() == 0
    for k, (p, c) in enumerate(zip(prompts, comps)):
        np.testing.assert_array_equal(seg.turn_index[p.size : p.size + c.size], k)
        if k + 1 < len(prompts):
            assert seg.loss_mask[p.size + c.size] == 0  # the bridge token


def test_build_segment_rejects_non_extension():
    with pytest.raises(ValueError, match="turn 1: prompt does not extend"):
        build_segment([[1, 2], [1, 9, 9, 9]], [[3], [4]])
    with pytest.raises(ValueError, match="K >= 1"):
        build_segment([], [])


def test_episode_segments_split_on_segment_change():
    mk = lambda t, p, c, seg: Turn(run_id="r", episode_id=0, group_id=0, t=t, observation="", anchor_obs="",
                                   action="", action_valid=True, reward=0.0, prompt_ids=p, completion_ids=c,
                                   completion_logprobs=[-0.5] * len(c), info={"segment": seg})
    turns = [mk(0, [1, 2], [3], 0), mk(1, [1, 2, 3, 5], [6, 7], 0), mk(2, [9], [8], 1)]
    segs = episode_segments(turns)
    assert len(segs) == 2
    np.testing.assert_array_equal(segs[0].ids, [1, 2, 3, 5, 6, 7])
    np.testing.assert_array_equal(segs[0].loss_mask, [0, 0, 1, 0, 1, 1])
    np.testing.assert_array_equal(segs[1].turn_index, [-1, 2])
    np.testing.assert_allclose(segs[0].logprobs, [0, 0, -0.5, 0, -0.5, -0.5])


def test_render_spans_cover_each_message(tiny_tokenizer):
    r = _renderer(tiny_tokenizer)
    msgs = [M("system", "Play well"), M("user", "You see a lamp"), M("assistant", "take lamp")]
    rc = r.render_spans(msgs)
    np.testing.assert_array_equal(rc.ids, r.render_ids(msgs, add_generation_prompt=False))
    assert rc.spans[0][0] == 0 and rc.spans[-1][1] == rc.ids.size
    for m, (a, b) in zip(msgs, rc.spans):
        assert r.tokenizer.decode(rc.ids[a:b]) == f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n"


def test_renderer_requires_template(tiny_tokenizer):
    import copy

    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat_template"):
        ChatRenderer(tok)
