"""Issue 36 item 2: under ``torchrun --nproc-per-node 2`` (gloo) each rank builds its own
``VLLMEngine`` inside the trainer's process group (vLLM's ``external_launcher``: TP 1, data
parallel by rank), samples with per-request seeds, loads pushed weights, and its logprobs equal
the HF reference within 1e-4; the trainer's group keeps working around the engine."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("torch")

from vllm_workers import run_worker  # noqa: E402


def test_two_ranks_each_run_their_own_engine(tiny32_dir):
    ranks = run_worker("torchrun", tiny32_dir, nproc=2)
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert (r["world"], r["backend"], r["executor"]) == (2, "gloo", "external_launcher")
        assert (r["vllm_world"], r["vllm_tp"]) == (2, 1)  # vLLM's world is the trainer's; one engine per rank
        assert r["group_sums"] == [3.0, 3.0]  # all-reduce of rank + 1 before and after the engine's work
        assert r["versions"] == [1, 1, 1] and all(len(t) == 8 for t in r["tokens"])
        assert r["max_abs_diff"] <= 1e-4 and r["score_diff"] <= 1e-4  # the pushed weights, on every rank
    zero, one = ranks[0]["tokens"], ranks[1]["tokens"]
    assert zero[:2] == one[:2]  # the same seeds and weights: the same samples on both ranks
    assert zero[2] != one[2]  # rank-specific seeds: each rank samples its own rows
