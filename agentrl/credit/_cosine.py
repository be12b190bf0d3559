"""BiGPO's cosine links (ALGORITHMS.md §8.3): the exact block test and a screened version of it.

The exact test (``cosine_edges``) normalises each row's float64 hidden state and compares
every same-group pair's dot product with ``1 − tau`` in one (n_b × H)·(H × n_b) BLAS block per
chunk of groups. At real hidden sizes (1536–3584) those blocks are most of BiPACE's time.

``screened_edges`` gives the same connected components with far less arithmetic, and no
other rounding in any decision:

1. **Screen.** For unit vectors u, v split into a head (first m = max(16, H // 8) columns) and
   a tail, Cauchy–Schwarz gives ``u·v ≤ u_h·v_h + |u_t||v_t|``, with ``|u_t|² = 1 − |u_h|²``.
   The head block (float32 copies of the normalised heads, n_b × m) costs about m/(2H) of the
   full float64 one; a pair whose bound is below ``1 − tau − slack`` cannot pass the exact
   test, where ``slack = SLACK + 8·(m + 4)·eps_f32`` (≈ 2e-4 at m = 192) covers the float32
   rounding of the bound many times over, so it is dropped.
2. **Settle.** Each surviving pair's cosine is recomputed in float64 from the same normalised
   vectors (bit for bit: the same element-wise division), in a Gram block of the rows involved.
   Two evaluation orders of one dot product differ by at most 2·γ_H ≈ 2·H·1.1e-16, so a value
   further than ``BAND`` from ``1 − tau`` decides the pair as the exact block would. A chunk
   with any pair inside the band, or where most rows survive the screen, takes the exact block
   test, and once more than half of the chunks did (e.g. ``merge_identical_anchor`` off:
   equal-anchor states are close), the remaining chunks take it without screening.
3. **Skip linked pairs.** With ``anchor`` given, pairs with equal anchors are not tested: the
   caller links them anyway (``merge_identical_anchor``), so their cosine edge cannot change a
   component.

States that are not well scaled (a norm outside [1e-100, 1e100] or not finite), or H below
``MIN_SCREENED_H``, take the exact test throughout. The saving depends on the data: it is large
when states of different anchors are not close (the benchmark's states); when most pairs are
close (strongly anisotropic states) most chunks take the exact test, at about the old cost plus
the screen.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S

SLACK = 1e-6  # margin on the screen's upper bound, on top of its float32 rounding
BAND = 1e-9  # a recomputed cosine this close to 1 − tau is left to the exact block test
MIN_SCREENED_H = 256  # below, the exact blocks are cheaper than the screen (96k turns: H 128 0.25 vs 0.36 s)


def head_columns(h: int) -> int:
    """Columns of the screen's head for hidden size ``h``."""
    return max(16, h // 8)


def chunks(sizes: np.ndarray, target: int) -> np.ndarray:
    """Split points packing consecutive groups of ``sizes`` rows into chunks of about
    ``target`` rows (a larger group is a chunk of its own)."""
    cuts, acc, pos = [], 0, 0
    for size in sizes.tolist():
        if acc and acc + size > target:
            cuts.append(pos)
            acc = 0
        acc += size
        pos += size
    return np.asarray(cuts, dtype=np.int64)


def _sorted_rows(hidden: np.ndarray, src: np.ndarray, group: np.ndarray, rows: np.ndarray,
                 chunk_rows: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(float64[N] norms of the rows' states, int64 chunks of the rows with a nonzero state,
    sorted by group)."""
    norm = np.sqrt(np.einsum("ij,ij->i", hidden, hidden))[src]
    rows = rows[norm[rows] > 0]
    rows = rows[np.argsort(group[rows], kind="stable")]
    if rows.size < 2:
        return norm, []
    return norm, np.split(rows, chunks(np.bincount(S.dense(group[rows])[0]), chunk_rows))


def _block_edges(hidden: np.ndarray, src: np.ndarray, norm: np.ndarray, group: np.ndarray, block: np.ndarray,
                 tau: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact test on one chunk (int64 rows ``block``): every same-group pair of the block with
    cosine distance ≤ tau, both directions and self-loops, as two int64 arrays of rows."""
    h = hidden[src[block]] / norm[block, None]
    g = group[block]
    i, j = np.nonzero((h @ h.T >= 1.0 - tau) & (g[:, None] == g[None, :]))
    return block[i], block[j]


def _pairs(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def cosine_edges(
    hidden: np.ndarray, src: np.ndarray, group: np.ndarray, rows: np.ndarray, tau: float, chunk_rows: int = 96
) -> tuple[np.ndarray, np.ndarray]:
    """Edges (i, j) between ``rows`` of the same group with cosine distance ≤ tau (both
    directions, self-loops included: harmless for connected components).

    Args:
        hidden: float64[M, H]; row i's vector is ``hidden[src[i]]`` (no (N, H) copy).
        src: int64[N]. group: int64[N]. rows: int64 rows to link. tau: threshold.
        chunk_rows: consecutive groups are packed into chunks of about this many rows so
            each BLAS call amortises its overhead; cross-group pairs are masked out.
    Zero vectors get no cosine edge.
    """
    norm, blocks = _sorted_rows(hidden, src, group, rows, chunk_rows)
    return _pairs([_block_edges(hidden, src, norm, group, b, tau) for b in blocks])


def screened_edges(
    hidden: np.ndarray, src: np.ndarray, group: np.ndarray, rows: np.ndarray, tau: float,
    anchor: np.ndarray | None = None, chunk_rows: int = 96,
) -> tuple[np.ndarray, np.ndarray]:
    """Edges whose connected components over ``rows`` equal those of ``cosine_edges`` (plus,
    with ``anchor``, links between equal anchors that the caller adds itself); see the module
    docstring for why every decision is the exact test's.

    Args:
        hidden, src, group, rows, tau, chunk_rows: as ``cosine_edges`` (same chunks).
        anchor: int64[N] or None; pairs with equal ``anchor`` are not tested (the caller links them).
    Returns:
        Two int64 arrays of rows (i, j); a subset of ``cosine_edges``' edges (i < j where screened).
    """
    norm, blocks = _sorted_rows(hidden, src, group, rows, chunk_rows)
    m = head_columns(hidden.shape[1])
    if not blocks:
        return _pairs([])
    ordered = np.concatenate(blocks)
    nr = norm[ordered]
    scaled = np.isfinite(nr).all() and nr.min() >= 1e-100 and nr.max() <= 1e100
    if hidden.shape[1] < MIN_SCREENED_H or not scaled:
        return _pairs([_block_edges(hidden, src, norm, group, b, tau) for b in blocks])
    thr = 1.0 - tau
    slack = SLACK + 8 * (m + 4) * float(np.finfo(np.float32).eps)  # the screen runs in float32
    band = BAND + 4 * hidden.shape[1] * float(np.finfo(np.float64).eps)
    out, at, n_exact = [], 0, 0
    for k, b in enumerate(blocks):
        nb = nr[at:at + b.size]
        at += b.size
        if k >= 8 and 2 * n_exact > k:  # the screen rarely settles a chunk here: test the rest exactly
            out.append(_block_edges(hidden, src, norm, group, b, tau))
            continue
        hb = (hidden[src[b], :m] / nb[:, None]).astype(np.float32)  # head of the normalised rows
        gram = hb @ hb.T
        # ≥ |u_t| (|u|² ≤ 1 + 1e-12; the diagonal's float32 error is within the slack)
        tb = np.sqrt(np.maximum(1.0 + slack - gram.diagonal().astype(np.float64), 0.0))
        keep = gram + np.multiply.outer(tb, tb) >= thr - slack
        g = group[b]
        keep &= g[:, None] == g[None, :]
        if anchor is not None:
            keep &= anchor[b][:, None] != anchor[b][None, :]
        if np.count_nonzero(keep) == np.count_nonzero(keep.diagonal()):
            continue  # no pair survives
        i, j = np.nonzero(np.triu(keep, 1))
        sub = np.unique(np.concatenate([i, j]))
        if 2 * sub.size > b.size:  # most rows take part: the exact block costs the same
            n_exact += 1
            out.append(_block_edges(hidden, src, norm, group, b, tau))
            continue
        h = hidden[src[b[sub]]] / nb[sub, None]  # bit for bit the exact test's normalised rows
        d = (h @ h.T)[np.searchsorted(sub, i), np.searchsorted(sub, j)]
        if (np.abs(d - thr) <= band).any():
            n_exact += 1
            out.append(_block_edges(hidden, src, norm, group, b, tau))
        else:
            out.append((b[i[d >= thr]], b[j[d >= thr]]))
    return _pairs(out)
