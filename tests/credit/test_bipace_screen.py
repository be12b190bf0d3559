"""Issue 22 (credit at real sizes): BiGPO's screened cosine links (``_cosine.screened_edges``) give
exactly the connected components of the exact block test (``cosine_edges``, ALGORITHMS.md §8.3),
with equal-anchor links and without, on states where many pairs of different anchors sit at
cosine distances within 1e-13 … 1e-3 of tau (so the screen, the float64 settle and the
exact-block fallback all run), plus zero and badly scaled states."""

from __future__ import annotations

import numpy as np
import pytest

import agentrl.credit._cosine as C
from agentrl.credit.bipace import connected_components

TAU = 0.05


def _states(rng: np.random.Generator, n_groups: int = 8, rows: int = 40, h: int = 512):
    """(hidden float64[N, h], group, anchor int64[N]); each group has 6 anchors with close states,
    and pairs of rows with different anchors placed at cosine distance tau ± 1e-13 … 1e-3."""
    group = np.repeat(np.arange(n_groups), rows)
    anchor = rng.integers(0, 6, group.size) + 6 * group
    centers = rng.normal(size=(6 * n_groups, h))
    hidden = centers[anchor] + 0.01 * rng.normal(size=(group.size, h))
    deltas = [0.0, 1e-13, -1e-13, 1e-10, -1e-10, 1e-7, -1e-7, 1e-4, -1e-4, 1e-3, -1e-3]
    m = C.head_columns(h)
    for g in range(0, n_groups, 2):  # every other group: near-threshold pairs
        for k, d in enumerate(deltas):
            i, j = g * rows + 2 * k, g * rows + 2 * k + 1
            anchor[j] = anchor[i] + 1000  # a different anchor: only the cosine can link them
            hidden[j] = rng.uniform(0.5, 3.0) * _at_cosine(hidden[i], 1.0 - TAU + d, rng, m if g % 4 else None)
    hidden[5] = 0.0  # a zero state: no cosine edge
    hidden[5] = 0.0  # a zero state: no cosine edge
    perm = rng.permutation(group.size)
    return hidden[perm], group[perm], anchor[perm]


def _at_cosine(x: np.ndarray, c: float, rng: np.random.Generator, m: int | None) -> np.ndarray:
    """A vector at cosine c to x: x rotated towards a random orthogonal direction, or (with ``m``)
    x's head (first m columns) scaled by α so that the screen's Cauchy–Schwarz bound is tight."""
    u = x / np.linalg.norm(x)
    if m is None:
        w = rng.normal(size=x.size)
        w -= (w @ u) * u
        w /= np.linalg.norm(w)
        return c * u + np.sqrt(1.0 - c * c) * w
    p = float(u[:m] @ u[:m])
    lo, hi = 1.0, 1e6  # cos((αu_h, u_t), u) falls from 1 as α grows: bisect for c
    for _ in range(200):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if (a * p + 1 - p) / np.sqrt(a * a * p + 1 - p) > c else (lo, a)
    return np.concatenate([lo * u[:m], u[m:]])


def _components(n: int, edges: tuple[np.ndarray, np.ndarray], rows: np.ndarray, group: np.ndarray,
                anchor: np.ndarray | None) -> np.ndarray:
    u, v = edges
    if anchor is not None:  # bigpo_clusters' equal-anchor links
        key = group[rows] * 10**6 + anchor[rows]
        first = {}
        rep = np.array([first.setdefault(k, r) for k, r in zip(key.tolist(), rows.tolist())])
        u, v = np.concatenate([u, rows]), np.concatenate([v, rep])
    return connected_components(n, u, v)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_screened_components_equal_exact(merge: bool, seed: int, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    hidden, group, anchor = _states(rng)
    n = group.size
    src = rng.permutation(n)  # row i's state is hidden[src[i]]
    rows = np.flatnonzero(rng.random(n) < 0.95)
    exact_calls = []
    block = C._block_edges
    monkeypatch.setattr(C, "_block_edges", lambda *a: exact_calls.append(1) or block(*a))
    a = anchor if merge else None
    got = C.screened_edges(hidden, src, group, rows, TAU, a, chunk_rows=40)
    n_blocks, calls = 8, len(exact_calls)
    want = C.cosine_edges(hidden, src, group, rows, TAU, chunk_rows=40)
    np.testing.assert_array_equal(_components(n, got, rows, group, a), _components(n, want, rows, group, a))
    assert set(zip(*map(np.ndarray.tolist, got))) <= set(zip(*map(np.ndarray.tolist, want)))
    if merge:  # near-threshold groups fall back to the exact block, the others are settled by the screen
        assert 0 < calls < n_blocks
        assert len(got[0]) > 0


@pytest.mark.parametrize("scale", [1e-120, 1e120])
def test_badly_scaled_states_take_the_exact_test(scale: float) -> None:
    rng = np.random.default_rng(2)
    hidden, group, anchor = _states(rng, n_groups=2)
    hidden[3] *= scale
    n = group.size
    src, rows = np.arange(n), np.arange(n)
    got = C.screened_edges(hidden, src, group, rows, TAU, anchor, chunk_rows=40)
    want = C.cosine_edges(hidden, src, group, rows, TAU, chunk_rows=40)
    np.testing.assert_array_equal(np.sort(np.stack(got), axis=1), np.sort(np.stack(want), axis=1))
