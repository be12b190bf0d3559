"""Shared tables for the credit tests: the ALGORITHMS.md §12 batch and random tables."""

from __future__ import annotations

import numpy as np

from agentrl.types import TurnTable, intern_strings, normalize_action_key

# (uid, traj, t, anchor, action, reward, done, valid, next_obs, hidden) — ALGORITHMS.md §12
BATCH12 = [
    ("A", "A-1", 0, "s0", "go to cabinet 1", 0, 0, 1, "s1", [1, 0, 0]),
    ("A", "A-1", 1, "s1", "open cabinet 1", 0, 0, 1, "s2", [0, 1, 0.05]),
    ("A", "A-1", 2, "s2", "take apple 1 from cabinet 1", 10, 1, 1, "END", [0, 0, 1]),
    ("A", "A-2", 0, "s0", "go to desk 1", 0, 0, 1, "s3", [1, 0, 0]),
    ("A", "A-2", 1, "s3", "use desk 1", 0, 0, 0, "nothing", [0.7, 0.7, 0]),
    ("A", "A-2", 2, "nothing", "go to cabinet 1", 0, 0, 1, "s1", [0.02, 1, 0.03]),
    ("A", "A-3", 0, "s0", "go to cabinet 1", 0, 0, 1, "s1", [1, 0, 0]),
    ("A", "A-3", 1, "s1", "take apple 1 from cabinet 1", 10, 1, 1, "END", [0, 1, 0.05]),
    ("B", "B-1", 0, "u0", "go to shelf 1", 0, 0, 1, "u1", [1, 1, 0]),
    ("B", "B-1", 1, "u1", "take key 1", 0, 0, 1, "u1", [0, 0, 1]),
    ("B", "B-1", 2, "u1", "go to shelf 2", 0, 0, 1, "u2", [0.1, 0, 1]),
    ("B", "B-1", 3, "u2", "put key 1 in/on shelf 2", 10, 1, 1, "END", [1, 0.1, 0]),
    ("B", "B-2", 0, "u0", "go to shelf 2", 0, 0, 1, "u2", [1, 1, 0]),
    ("B", "B-2", 1, "u2", "put key 1 in/on shelf 2", 10, 1, 1, "END", [1, 0, 0]),
    ("B", "B-3", 0, "u0", "go to shelf 1", 0, 0, 1, "u1", [1, 1, 0]),
    ("B", "B-3", 1, "u1", "go to drawer 1", 0, 0, 1, "u3", [0, 0.05, 1]),
    ("B", "B-3", 2, "u3", "open drawer 1", 0, 0, 1, "u4", [0.5, 0.5, 0.5]),
    ("B", "B-3", 3, "u4", "close drawer 1", 0, 0, 1, "u5", [0, 1, 0]),
]


#: 3SPO's ``state_stats`` row of a first iteration: no earlier episodes, t = 1 (§16.2).
NO_PRIOR = (0, 0, 0, 0, 1)


def random_state_stats(anchor: np.ndarray, nxt: np.ndarray, n_states: int, seed: int) -> np.ndarray:
    """Consistent random 3SPO prior statistics (int64[N, 5]) per state code, from their own generator."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 20, size=n_states) * (rng.random(n_states) < 0.8)
    ns = (rng.random(n_states) * (n + 1)).astype(np.int64) * (rng.random(n_states) < 0.7)
    t = int(n.max(initial=0)) + 1 + int(rng.integers(0, 30))
    return np.stack([n[anchor], ns[anchor], n[nxt], ns[nxt], np.full(anchor.size, t)], axis=1)


def iteration0_scores(n: int) -> dict[str, np.ndarray]:
    """The step scorers' columns of a first iteration (ALGORITHMS.md §17.6, §18.3): OPRL's PRM is the
    initial policy, so every ``prm_logratio`` is 0; StepOPSD's teacher scored no token (``gap`` all NaN)."""
    return {"prm_logratio": np.zeros(n), "gap": np.full((n, 1), np.nan)}


def random_scores(ok: np.ndarray, seed: int, max_tokens: int = 4) -> dict[str, np.ndarray]:
    """Random OPRL / StepOPSD score columns (§17.3, §18.3) from their own generator: ``prm_logratio``
    float64[N] (some exact 0 and repeated values, 0 on rows of failed episodes) and ``gap`` float64[N, L]
    (0..``max_tokens`` gaps per row, left-aligned, NaN-padded; some all-NaN rows, some 0 and ±inf gaps)."""
    rng = np.random.default_rng(seed)
    n = ok.size
    ell = np.round(rng.normal(scale=4.0, size=n), 1) * (rng.random(n) > 0.15)
    gap = rng.normal(scale=1.5, size=(n, max_tokens))
    gap[rng.random((n, max_tokens)) < 0.05] = 0.0
    gap[rng.random((n, max_tokens)) < 0.02] = np.inf
    gap[np.arange(max_tokens)[None, :] >= rng.integers(0, max_tokens + 1, size=n)[:, None]] = np.nan
    return {"prm_logratio": np.where(ok, ell, 0.0), "gap": gap}


def part3_row(uid, traj, t, reward=0.0, valid=1, done=0):
    """A ``make_table`` tuple (uid, traj, t, anchor, action, reward, done, valid, next_obs) with a
    distinct anchor per (episode, t) (ALGORITHMS.md Part III's worked examples)."""
    return (uid, traj, t, f"{traj}{t}", "act", reward, done, valid, f"{traj}{t + 1}")


#: the batch of ALGORITHMS.md §17.7 and §18.7: group U: X wins in 2 turns (reward 10 on t1), Y fails
#: in 3 (t1 invalid, truncated), Z wins in 3 (reward 10 on t2); group V: P and Q fail in 2 turns each.
PART3_ROWS = [part3_row("U", "X", 0), part3_row("U", "X", 1, 10.0, done=1),
              part3_row("U", "Y", 0), part3_row("U", "Y", 1, valid=0), part3_row("U", "Y", 2),
              part3_row("U", "Z", 0), part3_row("U", "Z", 1), part3_row("U", "Z", 2, 10.0, done=1),
              part3_row("V", "P", 0), part3_row("V", "P", 1), part3_row("V", "Q", 0), part3_row("V", "Q", 1)]


def make_table(
    rows: list[tuple],
    *,
    truncated_last: bool = True,
    episode_ok: list[bool] | None = None,
    trainable: list[bool] | None = None,
    **extra,
) -> TurnTable:
    """A TurnTable from §12-style tuples (uid, traj, t, anchor, action, reward, done,
    valid, next_obs, hidden)."""
    vocab: dict[str, int] = {}
    anchor = intern_strings([r[3] for r in rows], vocab)
    nxt = intern_strings([r[8] for r in rows], vocab)
    actions = intern_strings([normalize_action_key(r[4], bool(r[7])) for r in rows])
    traj = intern_strings([r[1] for r in rows])
    last = {}
    for i, r in enumerate(rows):
        if r[1] not in last or r[2] > rows[last[r[1]]][2]:
            last[r[1]] = i
    trunc = [truncated_last and last[r[1]] == i and not r[6] for i, r in enumerate(rows)]
    n = len(rows)
    extra.setdefault("milestone", np.zeros(n, bool))  # BEACON's column, always filled by the store (no milestone)
    extra.setdefault("state_stats", np.tile(NO_PRIOR, (n, 1)))  # 3SPO: first iteration, no earlier episodes
    extra.setdefault("scores", iteration0_scores(n))  # OPRL / StepOPSD: the scorers at iteration 0
    return TurnTable(
        group=intern_strings([r[0] for r in rows]),
        episode=traj,
        t=[r[2] for r in rows],
        reward=[r[5] for r in rows],
        terminated=[bool(r[6]) for r in rows],
        truncated=trunc,
        action_valid=[bool(r[7]) for r in rows],
        anchor_key=anchor,
        next_anchor_key=nxt,
        action_key=actions,
        parent=[i - 1 if r[2] > 0 else -1 for i, r in enumerate(rows)],
        episode_ok=[True] * n if episode_ok is None else episode_ok,
        trainable=[True] * n if trainable is None else trainable,
        turn_id=list(range(n)),
        hidden=np.array([r[9] for r in rows], dtype=np.float64) if rows and len(rows[0]) > 9 else None,
        anchor_vocab=tuple(vocab),
        **extra,
    )


def batch12(**kw) -> TurnTable:
    return make_table(BATCH12, **kw)


def random_table(rng: np.random.Generator, *, n_groups: int | None = None, hidden_dim: int = 3,
                 p_fail: float = 0.1, p_untrainable: float = 0.1, with_value: bool = True) -> TurnTable:
    """A random table: random group sizes (incl. singletons), unequal lengths, repeated
    anchors and loops, ties (sparse 0/10 rewards), invalid actions, truncation, failed
    episodes, non-trainable rows, shuffled row order. Anchor codes are < len(vocab)."""
    n_groups = n_groups or int(rng.integers(1, 5))
    cols: dict[str, list] = {k: [] for k in ("group", "episode", "t", "reward", "terminated", "truncated", "valid",
                                             "anchor", "next", "action", "ok", "train", "value", "boot")}
    ep = 0
    n_states = int(rng.integers(1, 6))
    for g in range(n_groups):
        for _ in range(int(rng.integers(1, 6))):
            length = int(rng.integers(1, 6))
            success = rng.random() < 0.5
            ok = rng.random() > p_fail
            states = rng.integers(0, n_states, size=length + 1)
            for t in range(length):
                last = t == length - 1
                cols["group"].append(g)
                cols["episode"].append(ep)
                cols["t"].append(t)
                r = (10.0 if success else 0.0) if last else float(rng.choice([0.0, 0.0, 0.0, 1.0]))
                cols["reward"].append(r)
                cols["terminated"].append(last and success)
                cols["truncated"].append(last and not success)
                cols["valid"].append(rng.random() > 0.15)
                cols["anchor"].append(int(states[t]))
                cols["next"].append(int(states[t + 1]))
                cols["action"].append(int(rng.integers(0, 3)))
                cols["ok"].append(ok)
                cols["train"].append(rng.random() > p_untrainable)
                cols["value"].append(float(rng.normal()))
                cols["boot"].append(float(rng.normal()) if last and not success else 0.0)
            ep += 1
    n = len(cols["group"])
    perm = rng.permutation(n)
    take = lambda k, dt=None: np.asarray(cols[k], dtype=dt)[perm]  # noqa: E731
    hidden = rng.normal(size=(n_states, hidden_dim))
    h = hidden[take("anchor", np.int64)] + 0.01 * rng.normal(size=(n, hidden_dim)) * (rng.random((n, 1)) < 0.5)
    # BEACON (§15.2), drawn last so the columns above keep their values: milestone flags and,
    # per episode, a known milestone count (-1 unknown, 0 no walkthrough, 1..3)
    milestone = rng.random(n) < 0.35
    n_ms = rng.integers(-1, 4, size=ep)[take("episode", np.int64)]
    return TurnTable(
        group=take("group"), episode=take("episode"), t=take("t"), reward=take("reward"),
        terminated=take("terminated"), truncated=take("truncated"), action_valid=take("valid"),
        anchor_key=take("anchor"), next_anchor_key=take("next"), action_key=take("action"),
        parent=np.full(n, -1), episode_ok=take("ok"), trainable=take("train"), turn_id=np.arange(n),
        hidden=h, value=take("value") if with_value else None, bootstrap_value=take("boot") if with_value else None,
        milestone=milestone, n_milestones=n_ms,
        anchor_vocab=tuple(f"state {i} " + "x" * i for i in range(n_states)),
        state_stats=random_state_stats(take("anchor", np.int64), take("next", np.int64), n_states, n * 7 + n_states),
        **random_hiper_columns(n, n * 11 + n_states),
        scores=random_scores(take("ok", bool), n * 13 + n_states),
    )


def random_hiper_columns(n: int, seed: int) -> dict[str, np.ndarray]:
    """HiPER's inputs (ALGORITHMS.md §14.2) for ``n`` rows from their own generator (the other columns keep
    their values): ~40 % SWITCH, 10 % without a switch tag, subgoals from 3 texts (20 % missing), values."""
    rng = np.random.default_rng(seed)
    return {"switch": rng.random(n) < 0.4, "has_switch": rng.random(n) > 0.1,
            "subgoal_key": np.where(rng.random(n) < 0.2, -1, rng.integers(0, 3, n)),
            "value_low": rng.normal(size=n), "value_high": rng.normal(size=n), "value_term": rng.normal(size=n)}


def _plain(n: int, **cols) -> TurnTable:
    base = dict(terminated=np.zeros(n, bool), truncated=np.zeros(n, bool), action_valid=np.ones(n, bool),
                anchor_key=np.zeros(n, np.int64), next_anchor_key=np.zeros(n, np.int64),
                action_key=np.zeros(n, np.int64), turn_id=np.arange(n))
    base.update(cols)
    return TurnTable(**base)


def random_tree_table(rng: np.random.Generator, with_tree: bool = True) -> TurnTable:
    """Random node-deduplicated forests: several groups × trees, random branching,
    non-binary scores, failed / non-trainable nodes, shuffled rows."""
    parent, group, tree, depth, reward = [], [], [], [], []
    tid = 0
    for g in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(1, 4))):
            start = len(parent)
            for k in range(int(rng.integers(1, 8))):
                p = -1 if k == 0 or rng.random() < 0.15 else int(rng.integers(start, len(parent)))
                parent.append(p)
                group.append(g)
                tree.append(tid)
                depth.append(0 if p < 0 else depth[p] + 1)
                reward.append(float(rng.choice([0.0, 0.0, 1.0, 0.1, 0.2])))
            tid += 1
    n = len(parent)
    perm = rng.permutation(n)
    inv = np.empty(n, np.int64)
    inv[perm] = np.arange(n)
    par = np.asarray(parent)[perm]
    par = np.where(par >= 0, inv[np.maximum(par, 0)], -1)
    return _plain(n, group=np.asarray(group)[perm], episode=np.arange(n), t=np.asarray(depth)[perm],
                  reward=np.asarray(reward)[perm], parent=par, episode_ok=rng.random(n) > 0.1,
                  trainable=rng.random(n) > 0.1, tree=np.asarray(tree)[perm] if with_tree else None)


def random_rtpo_table(rng: np.random.Generator) -> TurnTable:
    """Random reverse trees (§9.2): base episodes, branch points every s turns from the
    end, K−1 continuations each (K may be 1), continuation episodes starting at t = b."""
    rows = []  # (group, episode, t, reward, branch, parent)
    ep, bid = 0, 0
    for g in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(1, 3))):
            length, s, k = int(rng.integers(1, 6)), int(rng.integers(1, 3)), int(rng.integers(1, 4))
            base_rows = []
            for t in range(length):
                base_rows.append(len(rows))
                rows.append([g, ep, t, float(rng.choice([0.0, 10.0])) if t == length - 1 else 0.0, -1,
                             base_rows[-2] if t else -1])
            base_ep = ep
            ep += 1
            for b in range(length - 1, -1, -s)[: int(rng.integers(1, 4))]:
                rows[base_rows[b]][4] = bid
                for _ in range(k - 1):
                    cont_len = int(rng.integers(1, 4))
                    prev = base_rows[b - 1] if b else -1
                    for j in range(cont_len):
                        last = j == cont_len - 1
                        rows.append([g, ep, b + j, float(rng.choice([0.0, 10.0, 1.0])) if last else 0.0,
                                     bid if j == 0 else -1, prev])
                        prev = len(rows) - 1
                    ep += 1
                bid += 1
            del base_ep
    n = len(rows)
    perm = rng.permutation(n)
    inv = np.empty(n, np.int64)
    inv[perm] = np.arange(n)
    arr = np.asarray(rows, dtype=np.float64)[perm]
    par = arr[:, 5].astype(np.int64)
    par = np.where(par >= 0, inv[np.maximum(par, 0)], -1)
    return _plain(n, group=arr[:, 0], episode=arr[:, 1], t=arr[:, 2], reward=arr[:, 3], branch=arr[:, 4],
                  parent=par, episode_ok=rng.random(n) > 0.1, trainable=rng.random(n) > 0.1)


def estimator_table(name: str, seed: int) -> TurnTable:
    """A random table estimator ``name`` accepts: a forest for ``tree_grpo``, reverse trees
    for ``rtpo``, chains (``random_table``) for the rest."""
    rng = np.random.default_rng(seed)
    if name == "tree_grpo":
        return random_tree_table(rng)
    if name == "rtpo":
        return random_rtpo_table(rng)
    return random_table(rng)
