"""HFEngine's prefix KV cache: the same tokens and logprobs as a full prefill, real reuse,
invalidation on any weight change, the chat-context continuation, and bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.hf import HFEngine  # noqa: E402
from agentrl.llm.prefix_cache import PrefixKVCache  # noqa: E402


@pytest.fixture()
def engines(tiny_dir):
    """(cached, uncached) engines sharing one tiny model."""
    torch.set_num_threads(1)
    on = HFEngine.from_pretrained(tiny_dir, num_threads=1)
    off = HFEngine(on.model, eos_token_id=on.eos_token_id, pad_token_id=on.pad_token_id, num_threads=1,
                   prefix_cache_mb=0)
    assert on.prefix_cache is not None and off.prefix_cache is None
    return on, off


def _group_prompts(tok):
    """A system/task prefix shared by every prompt, two prompts per 'task', different tails."""
    system = tok.encode("You are an agent in a text game. Pick one admissible command each turn.\n" * 3,
                        add_special_tokens=False)
    tasks = [tok.encode(f"Task: {t}\n", add_special_tokens=False) for t in ("open the red door", "eat the apple")]
    tails = [tok.encode(f"Observation: {o}\n> ", add_special_tokens=False)
             for o in ("a hall", "a kitchen with a fridge", "a dark room", "nothing")]
    return [system + tasks[i // 2] + tails[i] for i in range(4)]


def _same(a, b, tol=1e-5):
    for x, y in zip(a, b):
        assert np.array_equal(x.token_ids, y.token_ids)
        assert np.max(np.abs(x.logprobs - y.logprobs)) <= tol


def test_identical_group_prompts_prefill_once_and_match_uncached(engines, tiny_tokenizer):
    on, off = engines
    prompt = _group_prompts(tiny_tokenizer)[0]
    sp = SamplingParams(max_tokens=12, seed=3)
    got = on.generate([prompt] * 4, sp)  # turn 0 of a group: 4 identical prompts
    _same(got, off.generate([prompt] * 4, sp))
    cache = on.prefix_cache
    # the first row prefilled the prompt but its last token, the other 3 took those from it,
    # and every row prefilled its last token: each prompt token counted once, reused or prefilled
    assert cache.hits == 1 and cache.reused_tokens == 3 * (len(prompt) - 1)
    assert cache.prefilled_tokens == (len(prompt) - 1) + 4
    assert cache.reused_tokens + cache.prefilled_tokens == 4 * len(prompt)


def test_later_turns_reuse_the_shared_prefix_and_match_uncached(engines, tiny_tokenizer):
    on, off = engines
    prompts = _group_prompts(tiny_tokenizer)
    sp = SamplingParams(max_tokens=10, temperature=1.2, seed=11)
    _same(on.generate(prompts, sp), off.generate(prompts, sp))
    turn2 = [p + tiny_tokenizer.encode(f" step {i} done\n> ", add_special_tokens=False) for i, p in enumerate(prompts)]
    before = on.prefix_cache.reused_tokens
    _same(on.generate(turn2, sp), off.generate(turn2, sp))
    assert on.prefix_cache.reused_tokens - before >= sum(len(p) - 1 for p in prompts)  # each row from its last prompt


def test_rows_prefill_alone_only_the_tokens_they_do_not_share(engines, tiny_tokenizer):
    """One row with a long new tail and three with 2-token tails: each row computes its own
    new tokens at batch 1 (not 4 × the longest tail, as a padded batch would), and generate
    then runs only the last prompt column."""
    on, off = engines
    prompts = _group_prompts(tiny_tokenizer)
    sp = SamplingParams(max_tokens=6, seed=4)
    on.generate(prompts, sp)  # fills the cache with every prompt (+ completion)
    tail = tiny_tokenizer.encode(" a long new observation of the room" * 8, add_special_tokens=False)
    turn2 = [prompts[0] + tail] + [p + [5, 6] for p in prompts[1:]]
    seen: list[tuple[int, int]] = []
    hook = on.model.register_forward_pre_hook(lambda m, a, k: seen.append(tuple(k["input_ids"].shape)), with_kwargs=True)
    reused0 = on.prefix_cache.reused_tokens
    try:
        got = on.generate(turn2, sp)
    finally:
        hook.remove()
    _same(got, off.generate(turn2, sp))
    reused = on.prefix_cache.reused_tokens - reused0
    assert reused >= sum(len(p) for p in prompts)  # every row from its whole previous prompt
    alone = sum(n for b, n in seen if b == 1)
    assert alone == sum(len(t) - 1 for t in turn2) - reused  # the tokens not reused, each computed once
    assert alone <= len(tail) - 1 + 3  # padded: 4 × (len(tail) - 1)
    assert {s for s in seen if s[0] != 1} == {(4, 1)}  # generate: the last prompt column, then decode steps
    mixed = [turn2[1], [turn2[2][-1]], turn2[3]]  # a 1-token prompt beside cached ones
    hits = on.prefix_cache.hits
    _same(on.generate(mixed, sp), off.generate(mixed, sp))
    assert on.prefix_cache.hits == hits + 1  # it took the cached (ragged) path


def test_logprobs_equal_teacher_forced_recompute(engines, tiny_tokenizer):
    on, _ = engines
    prompts = _group_prompts(tiny_tokenizer)
    sp = SamplingParams(max_tokens=12, seed=5)
    on.generate(prompts, sp)
    comps = on.generate(prompts, sp)  # second call: every row starts from the cache
    assert on.prefix_cache.hits >= 1
    for p, c in zip(prompts, comps):
        assert np.max(np.abs(on.score(p, c.token_ids) - c.logprobs)) <= 1e-4


def test_chat_continuation_reuses_the_previous_completion(engines, tiny_tokenizer):
    """A prompt that extends the previous prompt + completion (chat context) reuses both."""
    on, off = engines
    p = _group_prompts(tiny_tokenizer)[1]
    first = on.generate([p], SamplingParams(max_tokens=8, greedy=True))[0]
    nxt = p + first.token_ids.tolist() + tiny_tokenizer.encode("\nObservation: ok\n> ", add_special_tokens=False)
    before = on.prefix_cache.reused_tokens
    _same(on.generate([nxt], SamplingParams(max_tokens=8, greedy=True)),
          off.generate([nxt], SamplingParams(max_tokens=8, greedy=True)))
    assert on.prefix_cache.reused_tokens - before == len(p) + first.token_ids.size - 1


def test_any_weight_change_empties_the_cache(engines, tiny_tokenizer):
    on, off = engines
    prompt = [_group_prompts(tiny_tokenizer)[0]]  # one row: nothing shared within the batch
    sp = SamplingParams(max_tokens=8, seed=2)
    on.generate(prompt, sp)
    on.generate(prompt, sp)
    hits = on.prefix_cache.hits
    assert hits == 1 and len(on.prefix_cache) > 0
    with torch.no_grad():  # an optimizer step: in place, same storage
        next(on.model.parameters()).add_(0.05)
    _same(on.generate(prompt, sp), off.generate(prompt, sp))  # stale keys/values would differ here
    assert on.prefix_cache.hits == hits  # emptied: nothing reused from the old weights
    on.update_weights({k: v.clone() for k, v in on.model.state_dict().items()}, version=1)
    on.generate(prompt, sp)
    assert on.prefix_cache.hits == hits  # update_weights (copy_) bumped the versions: emptied again
    on.generate(prompt, sp)
    assert on.prefix_cache.hits == hits + 1  # unchanged weights: reused again


def test_constrained_and_row_seeded_rows_match_uncached(engines, tiny_tokenizer):
    on, off = engines
    prompts = _group_prompts(tiny_tokenizer)
    eos = on.eos_token_id
    allowed = [[tiny_tokenizer.encode(a, add_special_tokens=False) + [eos] for a in ("go north", "open door", "eat")]
               for _ in prompts]
    sp = SamplingParams(max_tokens=8, row_seeds=(1, 2, 3, 4))
    for _ in range(2):  # the second round runs from the cache
        _same(on.generate(prompts, sp, allowed=allowed), off.generate(prompts, sp, allowed=allowed))
    assert on.prefix_cache.hits >= 1


def test_memory_bound_and_bad_arguments(tiny_dir, tiny_tokenizer):
    eng = HFEngine.from_pretrained(tiny_dir, num_threads=1, prefix_cache_mb=1)
    prompts = _group_prompts(tiny_tokenizer)
    for i in range(6):
        eng.generate([p + [i + 5] * 40 for p in prompts], SamplingParams(max_tokens=4, seed=i))
        assert eng.prefix_cache._bytes <= 1 << 20
    with pytest.raises(ValueError, match="prefix_cache_mb"):
        HFEngine(eng.model, eos_token_id=eng.eos_token_id, prefix_cache_mb=-1)
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixKVCache(max_bytes=-1)


def test_bf16_cached_rows_match_uncached(tiny_dir, tiny_tokenizer):
    """bf16 models take the same cached path: same tokens, logprobs within bf16 rounding."""
    torch.set_num_threads(1)
    on = HFEngine.from_pretrained(tiny_dir, dtype="bfloat16", num_threads=1)
    off = HFEngine(on.model, eos_token_id=on.eos_token_id, pad_token_id=on.pad_token_id, num_threads=1,
                   prefix_cache_mb=0)
    prompts = _group_prompts(tiny_tokenizer)
    sp = SamplingParams(max_tokens=8, greedy=True)
    for _ in range(2):  # the second round starts every row from the cache
        for x, y in zip(on.generate(prompts, sp), off.generate(prompts, sp)):
            assert np.array_equal(x.token_ids, y.token_ids)
            assert np.max(np.abs(x.logprobs - y.logprobs)) <= 5e-2
    assert on.prefix_cache.hits >= 1 and on.prefix_cache.reused_tokens > 0
