"""``agentrl.llm.vllm_weights`` (issue 36 item 2) without vLLM: buckets of whole tensors in
order, the packed form that crosses a process boundary, the tied head, and the RPC session
(begin → one load per bucket → finish, finished even when a bucket fails)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.vllm_weights import (  # noqa: E402
    BEGIN,
    FINISH,
    LOAD,
    pack_bucket,
    push_buckets,
    unpack_bucket,
    weight_buckets,
    with_tied_head,
)


def _state():
    g = torch.Generator().manual_seed(0)
    return [("a", torch.randn(10, generator=g)),  # 40 bytes
            ("b", torch.randn(3, 5, generator=g)),  # 60 bytes
            ("big", torch.randn(50, generator=g)),  # 200 bytes: larger than the bucket, alone
            ("c", torch.randn(2, generator=g).to(torch.bfloat16)),  # 4 bytes
            ("d", torch.arange(6, dtype=torch.int64).reshape(2, 3).t())]  # 48 bytes, not contiguous


def test_buckets_keep_order_and_size() -> None:
    state = _state()
    buckets = list(weight_buckets(state, 128))
    assert [[n for n, _ in b] for b in buckets] == [["a", "b"], ["big"], ["c", "d"]]
    for b in buckets:
        assert len(b) == 1 or sum(t.numel() * t.element_size() for _, t in b) <= 128
    by_name = dict(state)
    assert all(t.data_ptr() == by_name[n].data_ptr() for b in buckets for n, t in b)  # references, no copies
    assert [[n for n, _ in b] for b in weight_buckets(state, 10**9)] == [["a", "b", "big", "c", "d"]]
    assert [len(b) for b in weight_buckets(state, 1)] == [1, 1, 1, 1, 1]
    assert list(weight_buckets([], 10)) == []
    with pytest.raises(ValueError, match="bucket_bytes must be >= 1.*weight_bucket_mb"):
        list(weight_buckets(state, 0))


def test_pack_and_unpack_round_trip_every_dtype() -> None:
    bucket = _state()
    packed = pack_bucket(bucket)
    assert set(packed) == {"names", "dtypes", "shapes", "data"} and isinstance(packed["data"], bytes)
    assert packed["dtypes"] == ["float32", "float32", "float32", "bfloat16", "int64"]
    assert len(packed["data"]) == 40 + 60 + 200 + 4 + 48
    back = unpack_bucket(packed)
    assert [n for n, _ in back] == [n for n, _ in bucket]
    for (_, a), (_, b) in zip(bucket, back):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    back[0][1].add_(1.0)  # writable (vLLM's loaders may copy from it in place)
    with pytest.raises(ValueError, match="tensors take 352 bytes of a 353-byte buffer"):
        unpack_bucket({**packed, "data": packed["data"] + b"\0"})


def test_tied_head_is_added_only_when_missing() -> None:
    emb = torch.ones(4, 2)
    got = list(with_tied_head([("model.embed_tokens.weight", emb), ("x", torch.zeros(1))]))
    assert [n for n, _ in got] == ["model.embed_tokens.weight", "x", "lm_head.weight"] and got[-1][1] is emb
    head = torch.zeros(4, 2)
    got = list(with_tied_head([("lm_head.weight", head), ("model.embed_tokens.weight", emb)]))
    assert [n for n, _ in got] == ["lm_head.weight", "model.embed_tokens.weight"]
    assert list(with_tied_head([("x", emb)])) == [("x", emb)]


def test_push_is_one_session_and_always_finishes() -> None:
    calls = []

    def rpc(method, args=()):
        calls.append((method, args))
        if method == LOAD and args and isinstance(args[0], list) and args[0][0][0] == "big" and fail:
            raise RuntimeError("worker died")

    fail = False
    assert push_buckets(rpc, _state(), 128, packed=False) == 3
    assert [m for m, _ in calls] == [BEGIN, LOAD, LOAD, LOAD, FINISH]
    assert [[n for n, _ in a[0]] for m, a in calls if m == LOAD] == [["a", "b"], ["big"], ["c", "d"]]
    calls.clear()
    assert push_buckets(rpc, _state(), 128, packed=True) == 3
    assert [a[0]["names"] for m, a in calls if m == LOAD] == [["a", "b"], ["big"], ["c", "d"]]
    calls.clear()
    fail = True
    with pytest.raises(RuntimeError, match="worker died"):
        push_buckets(rpc, _state(), 128, packed=False)
    assert [m for m, _ in calls] == [BEGIN, LOAD, LOAD, FINISH]
