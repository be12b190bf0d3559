"""ALFWorld's expert from the current state: the planner re-run on the live PDDL state (the
expert-Q credit check). One game, a detour, the plan still wins."""

from __future__ import annotations

from agentrl.env import make
from agentrl.env.expert import play_expert


def test_planner_replans_from_the_current_state_and_wins():
    env = make("agentrl/ALFWorld-v0", max_turns=100).unwrapped
    try:
        _, info = env.reset(seed=3)
        first = env.expert_plan()
        assert first and first[0].startswith("go to ")
        detour = next(a for a in info["admissible_actions"] if a.startswith("go to ") and a != first[0])
        env.step(detour)
        again = env.expert_plan()
        assert again[0] == first[0] and len(again) == len(first)  # walking elsewhere changes nothing the plan needs
        cont = play_expert(env, 0.95, 60)
        assert cont.won and cont.ended and cont.steps == len(again)
        assert env.expert_plan() == []
    finally:
        env.close()
