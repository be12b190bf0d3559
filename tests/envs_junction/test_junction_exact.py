"""TaskGraph checks and exact values (agentrl.credit.exact): a hand-computed 3-state maze and
Monte-Carlo returns of 10k rollouts on a generated junction maze."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import exact_advantages, exact_values, uniform_policy
from agentrl.env import TaskGraph, make

# A -go-> B, A -wait-> A; B -left-> G (reward 1, terminal), B -right-> A, B -wait-> B; horizon 3.
HAND = TaskGraph(
    start="A",
    actions={"A": ("go", "wait"), "B": ("left", "right", "wait")},
    next_state={("A", "go"): "B", ("A", "wait"): "A", ("B", "left"): "G", ("B", "right"): "A", ("B", "wait"): "B"},
    reward={("A", "go"): 0.0, ("A", "wait"): 0.0, ("B", "left"): 1.0, ("B", "right"): 0.0, ("B", "wait"): 0.0},
    terminal=frozenset({"G"}),
    observation={"A": "room A", "B": "room B", "G": "goal"},
    kind={"A": "start", "B": "junction", "G": "goal"},
    horizon=3,
)
HAND_PI = {"A": np.array([0.5, 0.5]), "B": np.array([0.5, 0.25, 0.25])}


def test_hand_computed_values_gamma_1():
    ev = exact_values(HAND, HAND_PI)
    assert ev.states == ("A", "B", "G") and ev.V.shape == (4, 3) and ev.Q.shape == (3, 3, 3)
    assert ev.V.dtype == np.float64 and ev.Q.dtype == np.float64
    # t=2 (one turn left): Q(A,go)=V3(B)=0, Q(A,wait)=0 -> V2(A)=0; Q(B,left)=1, right=wait=0 -> V2(B)=0.5
    # t=1: Q(A,go)=V2(B)=0.5, Q(A,wait)=V2(A)=0 -> V1(A)=0.25
    #      Q(B,left)=1, Q(B,right)=V2(A)=0, Q(B,wait)=V2(B)=0.5 -> V1(B)=0.5+0+0.125=0.625
    # t=0: Q(A,go)=V1(B)=0.625, Q(A,wait)=V1(A)=0.25 -> V0(A)=0.4375
    #      Q(B,left)=1, Q(B,right)=V1(A)=0.25, Q(B,wait)=V1(B)=0.625 -> V0(B)=0.5+0.0625+0.15625=0.71875
    np.testing.assert_allclose(ev.V, [[0.4375, 0.71875, 0], [0.25, 0.625, 0], [0, 0.5, 0], [0, 0, 0]])
    np.testing.assert_allclose(ev.Q[0, 0, :2], [0.625, 0.25])
    np.testing.assert_allclose(ev.Q[1, 1], [1.0, 0.0, 0.5])
    assert np.isnan(ev.Q[0, 0, 2]) and np.isnan(ev.Q[:, 2]).all()  # no third action in A; G is terminal
    assert ev.q(1, "B", "wait") == 0.5 and ev.v(0, "A") == 0.4375
    # episode go, wait, left: A0 = 0.625-0.4375, A1 = Q1(B,wait)-V1(B) = 0.5-0.625, A2 = 1-0.5
    adv = exact_advantages(HAND, ev, ["go", "wait", "left"])
    assert adv.dtype == np.float64 and adv.tolist() == [0.1875, -0.125, 0.5]
    # go, right: at t=1 right returns to A with 1 turn left, worth V2(A)=0: A1 = 0 - 0.625
    assert exact_advantages(HAND, ev, ["go", "right"]).tolist() == [0.1875, -0.625]
    # the same action is worth less later: right from B at t=0 reaches A with 2 turns left (V1(A)=0.25)
    assert ev.q(0, "B", "right") == 0.25 and ev.q(1, "B", "right") == 0.0


def test_hand_computed_values_discounted():
    ev = exact_values(HAND, HAND_PI, gamma=0.5)
    # t=1: Q(A,go)=0.5*V2(B)=0.25 -> V1(A)=0.125; Q(B,wait)=0.5*0.5=0.25 -> V1(B)=0.5+0.0625=0.5625
    # t=0: Q(A,go)=0.5*0.5625=0.28125, Q(A,wait)=0.5*0.125=0.0625 -> V0(A)=0.171875
    np.testing.assert_allclose(ev.V[:, :2], [[0.171875, 0.5 + 0.25 * 0.0625 + 0.25 * 0.28125],
                                             [0.125, 0.5625], [0, 0.5], [0, 0]])


def test_bad_policies_graphs_and_episodes_raise():
    with pytest.raises(ValueError, match="no probabilities for state 'B'"):
        exact_values(HAND, {"A": np.array([0.5, 0.5])})
    with pytest.raises(ValueError, match="sums to"):
        exact_values(HAND, {**HAND_PI, "A": np.array([0.5, 0.6])})
    with pytest.raises(ValueError, match="shape"):
        exact_values(HAND, {**HAND_PI, "A": np.array([1.0])})
    with pytest.raises(ValueError, match="negative"):
        exact_values(HAND, {**HAND_PI, "A": np.array([1.5, -0.5])})
    with pytest.raises(ValueError, match="gamma"):
        exact_values(HAND, HAND_PI, gamma=1.5)
    ev = exact_values(HAND, uniform_policy(HAND))
    with pytest.raises(ValueError, match="not admissible in state 'B'"):
        exact_advantages(HAND, ev, ["go", "go"])
    with pytest.raises(ValueError, match="after the episode ended"):
        HAND.replay(["go", "left", "wait"])
    with pytest.raises(ValueError, match="exceed the horizon"):
        HAND.replay(["wait"] * 4)
    assert HAND.replay(["wait", "go", "left"]) == ["A", "A", "B"]
    broken = {"next_state": {**HAND.next_state, ("A", "go"): "C"}}, {"actions": {**HAND.actions, "B": ()}}, \
        {"observation": {"A": "a", "B": "b"}}, {"start": "Z"}, {"horizon": 0}, \
        {"reward": {**HAND.reward, ("B", "left"): float("nan")}}, {"terminal": frozenset({"G", "A"})}
    for change, msg in zip(broken, ("'C': no such state", "has no action", "observation lacks", "start 'Z'",
                                    "horizon", "not finite", "terminal but have actions")):
        with pytest.raises(ValueError, match=msg):
            TaskGraph(**{**HAND.__dict__, **change}).validate()


def _maze_policy(graph, p_right=0.8):
    """Junctions: right exit p_right, wrong exits share the rest but 0.1, look/wait 0.05 each; corridors:
    onward 0.8, look/wait 0.1 each (the right exit is the one not leading to a dead end)."""
    pol = {}
    for s, acts in graph.actions.items():
        moves = [a for a in acts if a.startswith("go ")]
        if graph.kind[s] == "junction":
            right = [graph.kind[graph.next_state[(s, a)]] != "dead" for a in moves]
            wrong = (0.9 - p_right) / (len(moves) - 1)
            pol[s] = np.array([p_right if r else wrong for r in right] + [0.05, 0.05])
        else:
            pol[s] = np.array([0.8, 0.1, 0.1])
    return pol


def _rollouts(graph, policy, n, rng, gamma):
    """n episodes sampled from ``policy``: (first actions, discounted returns, action lists)."""
    firsts, returns, episodes = [], np.zeros(n), []
    for i in range(n):
        s, acts, ret = graph.start, [], 0.0
        for t in range(graph.horizon):
            if s in graph.terminal:
                break
            a = graph.actions[s][int(rng.choice(len(graph.actions[s]), p=policy[s]))]
            ret += gamma ** t * graph.reward[(s, a)]
            acts.append(a)
            s = graph.next_state[(s, a)]
        firsts.append(acts[0])
        returns[i] = ret
        episodes.append(acts)
    return firsts, returns, episodes


def test_exact_values_match_monte_carlo_on_a_generated_maze():
    env = make("agentrl/JunctionMaze-v0", k=5, max_turns=15, n_exits=3, n_hinted=0)  # tight horizon: wasted turns cost
    env.reset(seed=4)
    graph = env.unwrapped.task_graph()
    policy = _maze_policy(graph)
    rng = np.random.default_rng(0)
    for gamma in (1.0, 0.9):
        ev = exact_values(graph, policy, gamma=gamma)
        firsts, returns, episodes = _rollouts(graph, policy, 10_000, rng, gamma)
        if gamma == 1.0:
            # moving on at a junction is right with 0.8 / 0.9: (8/9)^5 = 0.555 if no episode were truncated
            assert 0.12 < ev.v(0, graph.start) < 0.17
        assert abs(returns.mean() - ev.v(0, graph.start)) < 0.01
        onward = graph.actions[graph.start][0]
        took = np.array([f == onward for f in firsts])
        assert abs(returns[took].mean() - ev.q(0, graph.start, onward)) < 0.01
        assert abs(returns[~took].mean() - ev.q(0, graph.start, "look")) < 0.01
        # exact advantages average to 0 at every turn under the sampling policy
        first_turn = np.array([exact_advantages(graph, ev, acts)[0] for acts in episodes[:2000]])
        assert abs(first_turn.mean()) < 0.01
    # with no room to waste turns, a look at the start is worth strictly less than moving on
    assert ev.q(0, graph.start, "look") < ev.q(0, graph.start, onward)
    assert ev.V[15].tolist() == [0.0] * len(ev.states)
    roomy = make("agentrl/JunctionMaze-v0", k=5, max_turns=24, n_exits=3, n_hinted=0)  # the default horizon: truncation is rare
    roomy.reset(seed=4)
    big = roomy.unwrapped.task_graph()
    assert big.states == graph.states and abs(exact_values(big, policy).v(0, big.start) - (8 / 9) ** 5) < 0.002
