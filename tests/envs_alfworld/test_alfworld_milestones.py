"""ALFWorld publishes BEACON's milestones (ALGORITHMS.md §15.2): every walkthrough action is one,
matched in order with SequenceMatcher ≥ ``milestone_threshold``; no walkthrough → none."""

from __future__ import annotations

from agentrl.env import INFO_MILESTONE, INFO_N_MILESTONES, INFO_WALKTHROUGH, make

LAMP = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"


def test_walkthrough_matches_every_milestone_and_detours_none(fresh_cache):
    env = make("agentrl/ALFWorld-v0", split="eval_unseen", expert=True)
    try:
        _, info = env.reset(options={"task_id": LAMP})
        plan = info[INFO_WALKTHROUGH]
        assert info[INFO_N_MILESTONES] == len(plan) >= 2
        flags = []
        for a in ["inventory", plan[0], plan[0], *plan[1:]]:  # a detour, then the first step twice
            *_, info = env.step(a)
            flags.append(info[INFO_MILESTONE])
            assert info[INFO_N_MILESTONES] == len(plan)
        assert flags == [False, True, False] + [True] * (len(plan) - 1) and info["won"] is True
    finally:
        env.close()


def test_threshold_and_no_walkthrough(fresh_cache):
    cold = make("agentrl/ALFWorld-v0", split="eval_unseen")  # expert=False and an empty cache: no plan
    try:
        _, info = cold.reset(options={"task_id": LAMP})
        assert INFO_WALKTHROUGH not in info and info[INFO_N_MILESTONES] == 0
        assert cold.step("go to desk 1")[4][INFO_MILESTONE] is False
    finally:
        cold.close()
    env = make("agentrl/ALFWorld-v0", split="eval_unseen", expert=True, milestone_threshold=0.95)
    try:
        plan = env.reset(options={"task_id": LAMP})[1][INFO_WALKTHROUGH]
        # a one-character change of a short action: ratio < 0.95 (§15.4's "go to countertop 1" vs "… 2")
        near = plan[0][:-1] + ("2" if plan[0][-1] != "2" else "3")
        assert env.step(near)[4][INFO_MILESTONE] is (1 - 1 / len(plan[0]) >= 0.95)  # ratio 2(L−1)/2L
    finally:
        env.close()
