"""Slow, obviously-correct dict-of-lists implementations of ALGORITHMS.md, one Python loop
per row. The tests compare them with the vectorised estimators on random tables, and
``benchmarks/credit.py`` times them as the naive baseline."""

from __future__ import annotations

import difflib
import math
from collections import defaultdict, deque

import hiper_reference
import numpy as np

EPS = 1e-6


def _rows(tb):
    return range(len(tb))


def _elig(tb, i) -> bool:
    return bool(tb.episode_ok[i] and tb.trainable[i])


def episodes(tb) -> dict[int, list[int]]:
    eps = defaultdict(list)
    for i in _rows(tb):
        eps[int(tb.episode[i])].append(i)
    return {e: sorted(rs, key=lambda i: tb.t[i]) for e, rs in eps.items()}


def ep_reward(tb) -> dict[int, float]:
    return {e: float(sum(tb.reward[i] for i in rs)) for e, rs in episodes(tb).items()}


def returns(tb, gamma: float, c_inv: float) -> list[float]:
    out = [0.0] * len(tb)
    for rs in episodes(tb).values():
        nxt = 0.0
        for i in reversed(rs):
            nxt = tb.reward[i] + gamma * nxt
            out[i] = nxt
    return [out[i] - c_inv * (not tb.action_valid[i]) for i in _rows(tb)]


def gn(contrib: list[float], value: float, mode: str, keep_singleton: bool, ddof: int = 1) -> float:
    """GN (§1.4) of ``value`` against the contributing values."""
    m = len(contrib)
    if m == 0:
        return 0.0
    if m == 1:
        if not keep_singleton:
            return 0.0
        mean, std = 0.0, 1.0
    elif all(v == contrib[0] for v in contrib):
        mean, std = contrib[0], 0.0
    else:
        mean = sum(contrib) / m
        std = math.sqrt(sum((v - mean) ** 2 for v in contrib) / (m - ddof))
    return value - mean if mode == "mean_norm" else (value - mean) / (std + EPS)


def score(tb, c_inv: float) -> list[float]:
    er = ep_reward(tb)
    return [er[int(tb.episode[i])] - c_inv * (not tb.action_valid[i]) for i in _rows(tb)]


def epi(tb, c_inv: float, mode: str, stats_over: str = "steps") -> list[float]:
    sc = score(tb, c_inv)
    # "trajectories": each episode's first eligible row (t = 0 unless that turn is not trainable)
    first = {e: next((i for i in rs if _elig(tb, i)), None) for e, rs in episodes(tb).items()}
    groups = defaultdict(list)
    for i in _rows(tb):
        if _elig(tb, i) and (stats_over == "steps" or first[int(tb.episode[i])] == i):
            groups[int(tb.group[i])].append(sc[i])
    return [gn(groups[int(tb.group[i])], sc[i], mode, True) if _elig(tb, i) else 0.0 for i in _rows(tb)]


def step_gn(tb, values: list[float], keys: list, mode: str, ddof: int = 1) -> list[float]:
    groups = defaultdict(list)
    for i in _rows(tb):
        if _elig(tb, i):
            groups[keys[i]].append(values[i])
    return [gn(groups[keys[i]], values[i], mode, False, ddof) if _elig(tb, i) else 0.0 for i in _rows(tb)]


def grpo(tb, mode="mean_std_norm", stats_over="steps", c_inv=0.1):
    return epi(tb, c_inv, mode, stats_over)


def similarity_keys(tb, seq: list[tuple[int, int]], thresh: float) -> dict[tuple[int, int], int]:
    """(group, code) → representative code, visiting ``seq`` in order (§3.6)."""
    reps, out = defaultdict(list), {}
    for g, k in seq:
        if (g, k) in out:
            continue
        for r in reps[g]:
            if difflib.SequenceMatcher(None, tb.anchor_vocab[k], tb.anchor_vocab[r]).ratio() >= thresh:
                out[(g, k)] = r
                break
        else:
            reps[g].append(k)
            out[(g, k)] = k
    return out


def similarity_clusters(group, keys, rank, vocab, thresh):
    """Array form of ``similarity_keys`` (the signature of ``agentrl.credit._similarity``):
    int64[N] representative code per row, rows visited in ``rank`` order."""
    import types

    seq = [(int(group[i]), int(keys[i])) for i in np.argsort(rank, kind="stable")]
    rep = similarity_keys(types.SimpleNamespace(anchor_vocab=vocab), seq, thresh)
    return np.array([rep[(int(g), int(k))] for g, k in zip(group, keys)], dtype=np.int64)


def visit_order(tb) -> list[int]:
    first = {}
    for i in _rows(tb):
        first.setdefault(int(tb.episode[i]), i)
    return sorted(_rows(tb), key=lambda i: (first[int(tb.episode[i])], tb.t[i], i))


def gigpo(tb, gamma=0.95, step_advantage_w=1.0, mode="mean_std_norm", c_inv=0.1, enable_similarity=False,
          similarity_thresh=0.95, stats_over="steps"):
    keys = [(int(tb.group[i]), int(tb.anchor_key[i])) for i in _rows(tb)]
    if enable_similarity:
        canon = similarity_keys(tb, [keys[i] for i in visit_order(tb)], similarity_thresh)
        keys = [(k[0], canon[k]) for k in keys]
    step = step_gn(tb, returns(tb, gamma, c_inv), keys, mode)
    ep = epi(tb, c_inv, mode, stats_over)
    return [ep[i] + step_advantage_w * step[i] for i in _rows(tb)]


def hgpo(tb, history_length=2, length_weight_alpha=1.0, mode="mean_std_norm", base_group=False, gamma=0.95, c_inv=0.1,
         stats_over="steps"):
    ret = returns(tb, gamma, c_inv)
    items = defaultdict(list)
    if base_group:
        for i, a in enumerate(epi(tb, c_inv, mode, stats_over)):
            items[i].append((0, a))
    for k in range(1, history_length + 2):
        keys = {}
        for rs in episodes(tb).values():
            for pos, i in enumerate(rs):
                if pos + 1 >= k:
                    keys[i] = (int(tb.group[i]), tuple(int(tb.anchor_key[j]) for j in rs[pos - k + 1: pos + 1]))
        groups = defaultdict(list)
        for i, key in keys.items():
            if _elig(tb, i):
                groups[key].append(ret[i])
        for i, key in keys.items():
            if _elig(tb, i) and len(groups[key]) >= 2:
                items[i].append((k, gn(groups[key], ret[i], mode, False, ddof=0)))
    out = []
    for i in _rows(tb):
        kept = [(k, a) for k, a in items[i] if abs(a) > 1e-9] if _elig(tb, i) else []
        w = [(k + 1.0) ** length_weight_alpha for k, _ in kept]
        out.append(sum(wk * a for wk, (_, a) in zip(w, kept)) / (sum(w) + EPS) if kept else 0.0)
    return out


def g2po(tb, mode="mean_std_norm", step_advantage_w=1.0, beta=0.95, success_reward=10.0,
         sibling_invalid_penalty=0.1, c_inv=0.1, stats_over="steps"):
    er, eps_ = ep_reward(tb), episodes(tb)
    occ = defaultdict(list)
    for e, rs in eps_.items():
        for i in rs:
            if _elig(tb, i):
                occ[(int(tb.group[i]), int(tb.anchor_key[i]))].append(beta ** (len(rs) - tb.t[i]) * er[e])
    vnode = {k: sum(v) / len(v) for k, v in occ.items()}
    vsucc, vcur = [0.0] * len(tb), [0.0] * len(tb)
    for e, rs in eps_.items():
        for pos, i in enumerate(rs):
            vcur[i] = vnode.get((int(tb.group[i]), int(tb.anchor_key[i])), 0.0)
            if pos + 1 < len(rs):
                j = rs[pos + 1]
                vsucc[i] = vnode.get((int(tb.group[j]), int(tb.anchor_key[j])), 0.0)
            else:
                vsucc[i] = success_reward if er[e] == success_reward else 0.0
    y = [vsucc[i] - sibling_invalid_penalty * (not tb.action_valid[i]) for i in _rows(tb)]
    c1 = step_gn(tb, y, [(int(tb.group[i]), int(tb.anchor_key[i])) for i in _rows(tb)], mode)
    c2 = step_gn(tb, [vsucc[i] - vcur[i] for i in _rows(tb)], [int(tb.group[i]) for i in _rows(tb)], mode)
    ep = epi(tb, c_inv, mode, stats_over)
    return [ep[i] + step_advantage_w * (c1[i] + c2[i]) for i in _rows(tb)]


def graphgpo(tb, gamma=0.1, step_advantage_w=1.0, episode_advantage_w=1.0, mode="mean_std_norm",
             normalize_distance=False, goal_value=10.0, c_inv=0.1, stats_over="steps"):
    er = ep_reward(tb)
    goal = "__GOAL__"
    nxt = {}
    for e, rs in episodes(tb).items():
        for i in rs:
            nxt[i] = int(tb.next_anchor_key[i])
        if er[e] > 0:
            nxt[rs[-1]] = goal
    dist: dict[tuple, float] = {}
    by_group = defaultdict(list)
    for i in _rows(tb):
        if _elig(tb, i):
            by_group[int(tb.group[i])].append(i)
    for g, rows in by_group.items():
        rev, nodes = defaultdict(list), set()
        for i in rows:
            a = int(tb.anchor_key[i])
            rev[nxt[i]].append(a)
            nodes |= {a, nxt[i]}
        d = {goal: 0} if goal in nodes else {}
        queue = deque(d)
        while queue:
            x = queue.popleft()
            for y in rev[x]:
                if y not in d:
                    d[y] = d[x] + 1
                    queue.append(y)
        dmax = max(d.values(), default=0)
        for x in nodes:
            dist[(g, x)] = d.get(x, dmax + 1)
    ret = []
    for i in _rows(tb):
        g = int(tb.group[i])
        dn, da = dist.get((g, nxt[i]), 0), dist.get((g, int(tb.anchor_key[i])), 0)
        ex = dn - da + 1 if normalize_distance else dn
        ret.append(goal_value * gamma**ex - c_inv * (not tb.action_valid[i]))
    step = step_gn(tb, ret, [(int(tb.group[i]), int(tb.anchor_key[i])) for i in _rows(tb)], mode)
    ep = epi(tb, c_inv, mode, stats_over)
    return [step_advantage_w * step[i] + episode_advantage_w * ep[i] if _elig(tb, i) else 0.0 for i in _rows(tb)]


def bipace(tb, gamma=0.95, tau=0.05, merge_identical_anchor=True, step_advantage_w=1.0, mode="mean_std_norm", c_inv=0.1,
           stats_over="steps"):
    parent = list(_rows(tb))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    rows = [i for i in _rows(tb) if _elig(tb, i)]
    by_group = defaultdict(list)
    for i in rows:
        by_group[int(tb.group[i])].append(i)
    norm = {i: float(np.linalg.norm(tb.hidden[i])) for i in rows}
    for members in by_group.values():
        for x, a in enumerate(members):
            for b in members[x + 1:]:
                na, nb = norm[a], norm[b]
                close = na > 0 and nb > 0 and 1.0 - float(np.dot(tb.hidden[a], tb.hidden[b])) / (na * nb) <= tau
                if close or (merge_identical_anchor and tb.anchor_key[a] == tb.anchor_key[b]):
                    parent[find(a)] = find(b)
    ret = returns(tb, gamma, c_inv)
    clusters = defaultdict(list)
    for i in rows:
        clusters[find(i)].append(i)
    step = [0.0] * len(tb)
    for members in clusters.values():
        g = [ret[i] for i in members]
        acts = {int(tb.action_key[i]) for i in members}
        if len(members) < 2 or all(v == g[0] for v in g) or len(acts) < 2:
            continue
        v = sum(g) / len(g)
        std = math.sqrt(sum((x - v) ** 2 for x in g) / (len(g) - 1))
        for i in members:
            q = [ret[j] for j in members if tb.action_key[j] == tb.action_key[i]]
            step[i] = (sum(q) / len(q) - v) / ((std + EPS) if mode == "mean_std_norm" else 1.0)
    ep = epi(tb, c_inv, mode, stats_over)
    return [ep[i] + step_advantage_w * step[i] for i in _rows(tb)]


def tree_grpo(tb, node_weight="sum"):
    children = defaultdict(list)
    for i in _rows(tb):
        if tb.parent[i] >= 0:
            children[int(tb.parent[i])].append(i)

    def root_path(i):
        path = [i]
        while tb.parent[path[-1]] >= 0:
            path.append(int(tb.parent[path[-1]]))
        return path

    leaves = [i for i in _rows(tb) if not children[i] and _elig(tb, i)]
    sc = {i: float(sum(tb.reward[j] for j in root_path(i))) for i in leaves}
    tree = {i: int(tb.tree[i]) if tb.tree is not None else root_path(i)[-1] for i in leaves}
    by_g, by_t = defaultdict(list), defaultdict(list)
    for i in leaves:
        by_g[int(tb.group[i])].append(sc[i])
        by_t[(int(tb.group[i]), tree[i])].append(sc[i])
    adv = {i: gn(by_g[int(tb.group[i])], sc[i], "mean_std_norm", True)
           + gn(by_t[(int(tb.group[i]), tree[i])], sc[i], "mean_std_norm", True) for i in leaves}
    tot, cnt = defaultdict(float), defaultdict(int)
    for i in leaves:
        for j in root_path(i):
            tot[j] += adv[i]
            cnt[j] += 1
    if node_weight == "mean":
        return [tot[i] / cnt[i] if cnt[i] and _elig(tb, i) else 0.0 for i in _rows(tb)]
    return [tot[i] if _elig(tb, i) else 0.0 for i in _rows(tb)]


def rtpo(tb, gamma=1.0, mode="mean_std_norm"):
    ret = returns(tb, gamma, 0.0)
    keys = [int(tb.branch[i]) if tb.branch[i] >= 0 else None for i in _rows(tb)]
    groups = defaultdict(list)
    for i in _rows(tb):
        if keys[i] is not None and _elig(tb, i):
            groups[keys[i]].append(ret[i])
    return [gn(groups[keys[i]], ret[i], mode, False) if keys[i] is not None and _elig(tb, i) else 0.0
            for i in _rows(tb)]


def rtpo_update_order(tb):
    turn, first = {}, {}
    for i in _rows(tb):
        b = int(tb.branch[i])
        if b >= 0:
            turn[b] = min(turn.get(b, 10**9), int(tb.t[i]))
            first.setdefault(b, i)
    return sorted(turn, key=lambda b: (-turn[b], first[b]))


def turn_ppo(tb, gamma=0.99, lam=0.9, whiten=False, c_inv=0.0):
    adv = [0.0] * len(tb)
    for rs in episodes(tb).values():
        a_next = 0.0
        for pos in range(len(rs) - 1, -1, -1):
            i = rs[pos]
            d = 1.0 if tb.terminated[i] else 0.0
            if pos + 1 < len(rs):
                v_next = tb.value[rs[pos + 1]]
            else:
                v_next = tb.bootstrap_value[i] if tb.bootstrap_value is not None else 0.0
            r = tb.reward[i] - c_inv * (not tb.action_valid[i])
            delta = r + gamma * v_next * (1 - d) - tb.value[i]
            a_next = delta + gamma * lam * (1 - d) * a_next
            adv[i] = a_next
    out = [adv[i] if _elig(tb, i) else 0.0 for i in _rows(tb)]
    if whiten:
        vals = [out[i] for i in _rows(tb) if _elig(tb, i)]
        mu = sum(vals) / len(vals)
        sd = math.sqrt(sum((x - mu) ** 2 for x in vals) / (len(vals) - 1) + 1e-8)
        out = [(out[i] - mu) / sd if _elig(tb, i) else 0.0 for i in _rows(tb)]
    return out


def beacon(tb, milestone_gamma=0.9, step_advantage_w=10.0, mode="mean_norm", stats_over="steps",
           milestone_reward=10.0, c_inv=0.1):
    """§15.3, one episode at a time: milestone turns k_1 < … < k_m by t, segments, shaped rewards."""
    step, seg = [0.0] * len(tb), [0] * len(tb)
    for rs in episodes(tb).values():
        ks = [int(tb.t[i]) for i in rs if tb.milestone[i]]
        nm = -1 if tb.n_milestones is None else int(tb.n_milestones[rs[0]])
        for i in rs:
            t = int(tb.t[i])
            j = sum(1 for k in ks if k < t)  # milestones strictly before t
            if j < len(ks):  # completed segment j, its milestone turn ks[j]
                seg[i], shaped = j, milestone_reward * milestone_gamma ** (ks[j] - t)
            else:  # the tail
                seg[i], shaped = (-1 if 0 < nm <= len(ks) else len(ks)), 0.0
            step[i] = shaped - c_inv * (not tb.action_valid[i])
    keys = [(int(tb.group[i]), seg[i]) for i in _rows(tb)]
    a_ep = epi(tb, c_inv, mode, stats_over)
    a_seg = step_gn(tb, step, keys, mode)
    return [a_ep[i] + step_advantage_w * a_seg[i] for i in _rows(tb)]


def threespo(tb, alpha=50.0, xi=10.0, zeta=0.1, omega_k=0.1, mode="mean_norm", c_inv=0.1, episode_advantage_w=0.0,
             eps=EPS):
    """ALGORITHMS.md §16.3, one row at a time from the prior counts in ``state_stats``."""
    def s_of(n, ns, t):
        if n == 0:
            return 1.0
        rate = ns / (n + eps)
        return math.exp(-alpha * math.log(t) * rate) if (n - ns) < xi or rate > zeta else 0.0

    r = []
    for i in _rows(tb):
        n, ns, nn, nns, t = (int(v) for v in tb.state_stats[i])
        w = 0.5 * math.exp(-omega_k * n)
        nov = 1.0 if tb.anchor_key[i] != tb.next_anchor_key[i] else 0.0
        r.append(w * nov + (0.5 - w) * (s_of(n, ns, t) - s_of(nn, nns, t)) + 0.5 * tb.reward[i]
                 - c_inv * (not tb.action_valid[i]))
    step = step_gn(tb, r, [(int(tb.group[i]), int(tb.anchor_key[i])) for i in _rows(tb)], mode)
    ep = epi(tb, c_inv, mode) if episode_advantage_w else [0.0] * len(tb)
    return [step[i] + episode_advantage_w * ep[i] for i in _rows(tb)]


def _loo(contrib: list[float], value: float, keep_singleton: bool) -> float:
    """RLOO (§17.4 ``rloo``): m/(m − 1)·(value − mean); m = 1 keeps the value or gives 0; a tie has mean = that value."""
    m = len(contrib)
    if m == 0:
        return 0.0
    if m == 1:
        return value if keep_singleton else 0.0
    mean = contrib[0] if all(v == contrib[0] for v in contrib) else sum(contrib) / m
    return m / (m - 1) * (value - mean)


def oprl(tb, beta=0.05, step_advantage_w=1.0, mode="mean_std_norm", stats_over="steps", batch_scale=True,
         process_only=False, c_inv=0.1, eps=EPS):
    """ALGORITHMS.md §17.4 one row at a time: r = β·ℓ over the eligible rows, divided by their largest |r| + 1e-6;
    A_S = GN of r̃ over the task group (step singleton rule); A_E = EPI, or the RLOO forms."""
    elig = [_elig(tb, i) for i in _rows(tb)]
    r = [beta * float(tb.scores["prm_logratio"][i]) if elig[i] else 0.0 for i in _rows(tb)]
    if batch_scale:
        peak = max((abs(r[i]) for i in _rows(tb) if elig[i]), default=0.0)
        r = [v / (peak + 1e-6) for v in r]
    steps = defaultdict(list)
    for i in _rows(tb):
        if elig[i]:
            steps[int(tb.group[i])].append(r[i])
    if mode == "rloo":
        sc = score(tb, c_inv)
        first = {e: next((i for i in rs if elig[i]), None) for e, rs in episodes(tb).items()}
        firsts = defaultdict(list)
        for i in first.values():
            if i is not None:
                firsts[int(tb.group[i])].append(sc[i])
        a_e = [_loo(firsts[int(tb.group[i])], sc[i], True) if elig[i] else 0.0 for i in _rows(tb)]
        a_s = [_loo(steps[int(tb.group[i])], r[i], False) if elig[i] else 0.0 for i in _rows(tb)]
    else:
        a_e = epi(tb, c_inv, mode, stats_over)
        a_s = [gn(steps[int(tb.group[i])], r[i], mode, False) if elig[i] else 0.0 for i in _rows(tb)]
    return a_s if process_only else [a_e[i] + step_advantage_w * a_s[i] for i in _rows(tb)]


def stepopsd(tb, lambda_mix=0.2, alpha_clip=0.05, granularity="step", mode="mean_std_norm", stats_over="steps",
             c_inv=0.1, eps=EPS):
    """ALGORITHMS.md §18.4 one row at a time: the GRPO advantage times (1 − λ + λ·W), W the mean over the row's
    scored (non-NaN) gaps of clip(2σ(sign(A)·Δ), 1 ± α_clip), 1 without one."""
    def two_sigma(z: float) -> float:
        return 2.0 / (1.0 + math.exp(-z)) if z >= 0 else 2.0 * math.exp(z) / (1.0 + math.exp(z))

    a = grpo(tb, mode, stats_over, c_inv)
    out = []
    for i in _rows(tb):
        s = (a[i] > 0) - (a[i] < 0)
        ws = [min(max(two_sigma(s * g if s else 0.0), 1 - alpha_clip), 1 + alpha_clip)
              for g in tb.scores["gap"][i] if not math.isnan(g)]
        big_w = sum(ws) / len(ws) if ws else 1.0
        out.append(a[i] * (1 - lambda_mix + lambda_mix * big_w))
    return out


REFERENCE = {
    "grpo": grpo,
    "grpo_mean": lambda tb, **kw: grpo(tb, mode="mean_norm", **kw),
    "dr_grpo": lambda tb, **kw: grpo(tb, mode="mean_norm", **kw),
    "gigpo": gigpo,
    "hgpo": hgpo,
    "g2po": g2po,
    "graphgpo": graphgpo,
    "bipace": bipace,
    "beacon": beacon,
    "tree_grpo": tree_grpo,
    "rtpo": rtpo,
    "turn_ppo": turn_ppo,
    "threespo": threespo,
    "hiper": hiper_reference.hiper,
    "oprl": oprl,
    "stepopsd": stepopsd,
}
