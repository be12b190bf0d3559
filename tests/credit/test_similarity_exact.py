"""Issue 22 (credit at real sizes): the fast fuzzy-anchor clustering gives exactly the clusters
of the plain difflib loop (ALGORITHMS.md §3.6) — with rapidfuzz's LCS bound and with difflib's
own quick-ratio bounds (rapidfuzz absent) — on templated ALFWorld-like observations, where many
pairs sit near the threshold, plus empty and identical strings."""

from __future__ import annotations

import numpy as np
import pytest

import agentrl.credit._similarity as sim
from credit_reference import similarity_clusters as plain_clusters

LOCS = ["cabinet", "countertop", "drawer", "shelf", "sinkbasin", "fridge"]
OBJS = ["mug", "apple", "knife", "spoon", "bowl", "plate", "cup"]


def _texts(n: int, rng: np.random.Generator) -> tuple[str, ...]:
    out = ["", "Nothing happens.", "Nothing happens."]
    while len(out) < n:
        loc, k = LOCS[rng.integers(len(LOCS))], rng.integers(1, 4)
        objs = [f"a {OBJS[rng.integers(len(OBJS))]} {rng.integers(1, 3)}" for _ in range(rng.integers(1, 4))]
        text = f"You arrive at {loc} {k}. On the {loc} {k}, you see {', '.join(objs)}."
        out += [text, text.replace(" 1", " 2", 1)]  # and a near-duplicate (ratio ~0.98)
    return tuple(out[:n])


@pytest.mark.parametrize("bound", ["rapidfuzz", "difflib"])
@pytest.mark.parametrize("thresh", [0.6, 0.8, 0.9, 0.95])
def test_fast_clusters_equal_the_plain_loop(bound: str, thresh: float, monkeypatch) -> None:
    if bound == "rapidfuzz":
        pytest.importorskip("rapidfuzz")
        assert sim._Indel is not None
    else:
        monkeypatch.setattr(sim, "_Indel", None)
    rng = np.random.default_rng(int(thresh * 100))
    vocab = _texts(80, rng)
    n = 600
    group, keys, rank = rng.integers(0, 12, n), rng.integers(0, len(vocab), n), rng.permutation(n)
    got = sim.similarity_clusters(group, keys, rank, vocab, thresh)
    want = plain_clusters(group, keys, rank, vocab, thresh)
    np.testing.assert_array_equal(got, want)
    assert (want != keys).sum() > 0  # some rows do join another anchor's cluster at this threshold
