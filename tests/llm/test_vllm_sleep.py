"""``VLLMEngine``'s sleep mode and weight push, in the order vLLM needs them, checked with a
stand-in for ``vllm.LLM`` (vLLM's sleep mode needs CUDA; this runs without vLLM): asleep
for the update, weights woken before the push, the KV cache after it, then the prefix cache
reset (issue 36 item 2)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.vllm import VLLMEngine  # noqa: E402
from agentrl.llm.vllm_weights import BEGIN, FINISH, LOAD  # noqa: E402
from agentrl.train.colocate import engine_asleep  # noqa: E402


class FakeLLM:
    """Records the ``vllm.LLM`` calls ``VLLMEngine`` makes (in-process core: ``model_executor``)."""

    def __init__(self, sleep_mode: bool) -> None:
        cfg = SimpleNamespace(max_model_len=64, enable_sleep_mode=sleep_mode, logits_processors=None,
                              hf_config=SimpleNamespace(tie_word_embeddings=True))
        self.llm_engine = SimpleNamespace(model_config=cfg, model_executor=object())
        self.calls: list[tuple] = []

    def get_tokenizer(self):
        return SimpleNamespace(eos_token_id=2)

    def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None) -> None:
        self.calls.append(("wake_up", tuple(tags)))

    def collective_rpc(self, method, args=(), kwargs=None):
        self.calls.append(("rpc", method, [n for n, _ in args[0]] if args else None))

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))


STATE = {"model.embed_tokens.weight": torch.zeros(8, 4), "model.norm.weight": torch.ones(4)}


def test_sleep_then_push_wakes_weights_first_and_the_kv_cache_last():
    llm = FakeLLM(sleep_mode=True)
    eng = VLLMEngine(llm, bucket_bytes=128)  # the embedding (128 bytes) fills a bucket
    assert eng.sleep_mode and not eng.pack_buckets and eng.max_context == 64 and eng.eos_token_id == 2
    with engine_asleep(eng):
        assert eng.asleep == {"weights", "kv_cache"}
        eng.sleep()  # already asleep: nothing more
    assert eng.asleep == {"kv_cache"}  # the context woke the weights for the push
    eng.update_weights(STATE, 3)
    assert llm.calls == [
        ("sleep", 1),
        ("wake_up", ("weights",)),
        ("rpc", BEGIN, None),
        ("rpc", LOAD, ["model.embed_tokens.weight"]),
        ("rpc", LOAD, ["model.norm.weight"]),
        ("rpc", LOAD, ["lm_head.weight"]),  # the tied head is sent (save_pretrained omits it)
        ("rpc", FINISH, None),
        ("wake_up", ("kv_cache",)),
        ("reset_prefix_cache",),
    ]
    assert eng.asleep == set() and eng.policy_version == 3


def test_a_push_into_a_fully_asleep_engine_wakes_both_in_order():
    llm = FakeLLM(sleep_mode=True)
    eng = VLLMEngine(llm)
    eng.sleep()
    eng.update_weights(STATE, 1)
    assert [c for c in llm.calls if c[0] == "wake_up"] == [("wake_up", ("weights",)), ("wake_up", ("kv_cache",))]
    eng.sleep()
    eng.wake_up()  # both at once, weights first
    assert llm.calls[-1] == ("wake_up", ("weights", "kv_cache")) and eng.asleep == set()
    eng.wake_up()  # awake: no call
    assert llm.calls[-1] == ("wake_up", ("weights", "kv_cache"))
    with pytest.raises(ValueError, match=r"unknown tags \['gpu'\]"):
        eng.wake_up(["gpu"])


def test_without_sleep_mode_sleep_and_wake_do_nothing():
    llm = FakeLLM(sleep_mode=False)
    eng = VLLMEngine(llm)
    with engine_asleep(eng):
        assert eng.asleep == set()
    eng.update_weights(STATE, 1)
    assert [c[0] for c in llm.calls] == ["rpc", "rpc", "rpc", "reset_prefix_cache"]


def test_a_core_in_another_process_gets_packed_buckets():
    llm = FakeLLM(sleep_mode=False)
    del llm.llm_engine.model_executor  # the multiprocess client has no executor in this process
    packed = []
    llm.collective_rpc = lambda method, args=(), kwargs=None: packed.append(args[0] if args else method)
    eng = VLLMEngine(llm)
    assert eng.pack_buckets
    eng.update_weights(STATE, 1)
    assert packed[0] == BEGIN and packed[-1] == FINISH
    assert packed[1]["names"] == ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    assert isinstance(packed[1]["data"], bytes) and len(packed[1]["data"]) == (32 + 4 + 32) * 4
