"""WebShop's BEACON milestones (ALGORITHMS.md §15.2; ``envs/webshop/milestones.py``): the oracle
walkthrough completes SEARCH, DETAIL, [OPTIONS,] PURCHASE in order, once each; wrong turns,
invalid actions and a purchase of an inconsistent product complete none."""

from __future__ import annotations

from agentrl.env import INFO_MILESTONE, INFO_N_MILESTONES
from agentrl_envs.webshop.milestones import MilestoneDetector


def _run(env, actions, task_id):
    _, info = env.reset(options={"task_id": task_id})
    n = info[INFO_N_MILESTONES]
    flags, rewards = [], []
    for a in actions:
        _, r, term, trunc, info = env.step(a)
        flags.append(info[INFO_MILESTONE])
        rewards.append(r)
        assert info[INFO_N_MILESTONES] == n
        if term or trunc:
            break
    return n, flags, rewards


def test_oracle_walkthrough_completes_every_phase_in_order(env, world):
    checked = with_opts = 0
    for goal in world.goals[:40]:
        _, info = env.reset(options={"task_id": goal.task_id})
        walk = info["walkthrough"]
        n, flags, rewards = _run(env, walk, goal.task_id)
        det = env.milestones
        if rewards[-1] != 1.0 or not det.consistent(world.catalogue.get(goal.asin)):
            continue  # the oracle missed, or the target itself fails a constraint (rare)
        checked += 1
        assert n == (4 if goal.option_values else 3) and sum(flags) == n and det.reached == n
        assert flags[0] is True and flags[-1] is True  # the title search shows the target; Buy Now
        on = [i for i, f in enumerate(flags) if f]
        item = next(i for i, a in enumerate(walk) if a.startswith("click[") and a[6:-1].upper() == goal.asin)
        assert on[1] == item  # DETAIL: the click that opened the target's page
        if goal.option_values:
            with_opts += 1
            assert item < on[2] < len(walk) - 1  # OPTIONS: the click selecting the last goal option
    assert checked >= 20 and with_opts >= 5


def test_no_milestone_for_invalid_or_inconsistent_steps(env, world):
    from agentrl_envs.webshop.policies import oracle_query

    goal = next(g for g in world.goals if g.option_values)
    det = MilestoneDetector(goal, world.catalogue, world.prices)
    # an inconsistent product that its own title search ranks first (so it is on the results page)
    bad = next(p for p in world.catalogue.products if not det.consistent(p)
               and world.catalogue.products[world.engine.search(oracle_query(p.title))[0]].asin == p.asin)
    _, info = env.reset(options={"task_id": goal.task_id})
    walk = info["walkthrough"]
    # an invalid click, then the oracle's search (SEARCH: it shows the target)
    _, flags, _ = _run(env, ["click[nothing]", walk[0]], goal.task_id)
    assert flags == [False, True] and env.milestones.reached == 1
    steps = [env.step(a) for a in ("click[back to search]", f"search[{oracle_query(bad.title)}]",
                                   f"click[{bad.asin.lower()}]", "click[buy now]")]
    assert [s[4]["action_valid"] for s in steps] == [True] * 4
    assert [s[4][INFO_MILESTONE] for s in steps] == [False] * 4  # DETAIL never opened a consistent page
    assert env.milestones.reached == 1 and steps[-1][2] is True  # bought, episode over, no PURCHASE
