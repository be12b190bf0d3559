"""``agentrl/WebShop-v0``: page formats (ENVIRONMENTS.md §3.3), anchor_obs (ALGORITHMS.md §0.4),
navigation, invalid actions, turn limit, determinism, the TextEnv contract."""

from __future__ import annotations

import pytest

from agentrl.env import make
from agentrl.env.check import check_env
from agentrl_envs.webshop.env import WebShopEnv

SEP = " [SEP] "


def _goal_with_options(world, n_options=2):
    return next(g for g in world.goals if len(g.option_values) == n_options)


def _quoted(parts):
    return SEP.join(f"'{p}'" for p in parts)


def test_reset_observation_and_info(env, world):
    g = world.goals[3]
    obs, info = env.reset(options={"task_id": g.task_id})
    assert obs == f"WebShop [SEP] Instruction: [SEP] {g.instruction_text} [SEP] Search"
    assert info["anchor_obs"] == "'Search'"
    assert info["admissible_actions"] == ["search[<your query>]"] and info["clickables"] == ["search"]
    assert info["won"] is False and info["task_id"] == g.task_id and info["price_seed"] == 0
    assert info["walkthrough"][0].startswith("search[") and info["walkthrough"][-1] == "click[buy now]"


def test_results_pages_and_prev_next(env, world):
    g = world.goals[0]
    instr = g.instruction_text
    env.reset(options={"task_id": g.task_id})
    obs1, r, term, trunc, info = env.step("search[throw pillow cover]")
    hits = [world.catalogue.products[i] for i in world.engine.search("throw pillow cover")]
    assert len(hits) == 50 and (r, term, trunc, info["action_valid"]) == (0.0, False, False, True)
    items = [x for p in hits[:10] for x in (p.asin, p.title.strip(), p.price_text)]
    want = ["Instruction:", instr, "Back to Search", "Page 1 (Total results: 50)", "Next >", *items]
    assert obs1 == SEP.join(want)
    assert info["anchor_obs"] == _quoted(want[2:])
    assert info["clickables"] == ["back to search", "next >", *[p.asin.lower() for p in hits[:10]]]
    obs2, *_, info2 = env.step("click[next >]")
    assert obs2.startswith(f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page 2 (Total results: 50) "
                           f"[SEP] < Prev [SEP] Next > [SEP] {hits[10].asin} [SEP] ")
    assert info2["clickables"][:3] == ["back to search", "< prev", "next >"]
    obs_back, *_, info_back = env.step("click[< prev]")
    assert obs_back == obs1 and info_back["anchor_obs"] == info["anchor_obs"]   # same state, same anchor
    for _ in range(5):
        obs_last, *_ = env.step("click[next >]")
    assert "Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs_last   # Next > always shown
    assert obs_last.endswith("Next >")                                          # past the last result


def test_item_page_sub_pages_and_navigation(env, world):
    g = _goal_with_options(world)
    p = world.catalogue.get(g.asin)
    instr = g.instruction_text
    obs0, _ = env.reset(options={"task_id": g.task_id})
    walk = env.reset(options={"task_id": g.task_id})[1]["walkthrough"]
    results_obs, *_ = env.step(walk[0])
    for a in walk[1:-1 - len(g.option_values)]:       # page turns, if any, then the product click
        obs, *_, info = env.step(a)
    opts = [x for name, values in p.options for x in (name, *values)]
    want = ["Instruction:", instr, "Back to Search", "< Prev", *opts, p.title.strip(), f"Price: {p.price_text}",
            f"Rating: {p.rating}", "Description", "Features", "Reviews", "Buy Now"]
    assert obs == SEP.join(want) and info["anchor_obs"] == _quoted(want[2:])
    values = list(dict.fromkeys(v for _, vs in p.options for v in vs))
    assert info["clickables"] == ["back to search", "< prev", "description", "features", "reviews", "buy now", *values]
    item_obs = obs
    feat, *_ = env.step("click[features]")
    head = ["Instruction:", instr, "Back to Search", "< Prev"]
    assert feat == SEP.join(head + [b.strip() for b in p.bullets if b.strip()])
    assert env.step("click[< prev]")[0] == item_obs
    desc, *_, info = env.step("click[description]")
    assert info["clickables"] == ["back to search", "< prev"]
    assert desc == SEP.join(head + ([p.description.strip()] if p.description.strip() else []))
    env.step("click[< prev]")
    rev, *_ = env.step("click[reviews]")
    assert rev == f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev"
    env.step("click[< prev]")
    back, *_ = env.step("click[< prev]")
    assert back.startswith(f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page ")
    home, *_, info = env.step("click[back to search]")
    assert home == obs0 and info["anchor_obs"] == "'Search'"


def test_options_decide_reward(env, world):
    g = _goal_with_options(world)
    p = world.catalogue.get(g.asin)
    walk = env.reset(options={"task_id": g.task_id})[1]["walkthrough"]
    n_opt = len(g.option_values)
    for a in walk[:-1 - n_opt]:
        env.step(a)
    *_, info = env.step("click[buy now]")                      # no option selected
    ri = info["reward_info"]
    assert ri["n_opt"] == 0 and ri["n_opt_total"] == n_opt and info["won"] is False
    want = ri["r_type"] * (ri["n_attr"] + int(ri["price_ok"])) / (ri["n_attr_total"] + n_opt + 1)
    assert ri["reward"] == pytest.approx(want)
    # pick a wrong value first, then the right ones: a later click on the same option overwrites
    env.reset(options={"task_id": g.task_id})
    for a in walk[:-1 - n_opt]:
        env.step(a)
    name0, value0 = g.option_names[0], g.option_values[0]
    wrong = next(v for v in p.options_dict[name0] if v != value0)
    assert env.step(f"click[{wrong}]")[4]["action_valid"]
    for a in walk[-1 - n_opt:]:
        obs, r, term, trunc, info = env.step(a)
    assert (r, term, trunc, info["won"]) == (1.0, True, False, True)
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    obs2, r2, term2, _, info2 = env.step("click[back to search]")   # after the purchase
    assert (obs2, r2, info2["action_valid"]) == (obs, 0.0, False) and info2["feedback"]


@pytest.mark.parametrize("action", ["click[search]", "click[buy now]", "buy", "", "search[]", "search [x]",
                                    "click[]", "\x00\x1b", "look\ninventory", 123])
def test_invalid_actions_on_search_page(env, world, action):
    obs0, info0 = env.reset(options={"task_id": world.goals[1].task_id})
    obs, r, term, trunc, info = env.step(action)
    assert (obs, r, term, trunc, info["action_valid"]) == (obs0, 0.0, False, False, False)
    assert info["anchor_obs"] == info0["anchor_obs"] and info["feedback"]


def test_invalid_actions_on_results_page(env, world):
    env.reset(options={"task_id": world.goals[1].task_id})
    obs0, *_ = env.step("search[shoes]")
    for action in ("search[boots]", "click[b000000000]", "click[< prev]", "click[buy now]", "click[search]"):
        obs, r, term, trunc, info = env.step(action)
        assert (obs, info["action_valid"], term) == (obs0, False, False), action
    assert env.step("  CLICK[Next >]  ")[4]["action_valid"] is False      # the action name is case-sensitive
    assert env.step("  click[Next >]  ")[4]["action_valid"] is True       # the argument is lower-cased


def test_turn_limit_truncates(data_dir, world):
    env = WebShopEnv(data_dir=data_dir, max_turns=3)
    env.reset(options={"task_id": world.goals[0].task_id})
    flags = [env.step("nonsense")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    obs, r, term, trunc, info = env.step("search[x]")
    assert (info["action_valid"], trunc) == (False, True) and "over" in info["feedback"]
    default = WebShopEnv(data_dir=data_dir)
    default.reset(seed=0)
    assert [default.step("x")[3] for _ in range(15)] == [False] * 14 + [True]


def test_seeded_resets_and_split(data_dir, world):
    a, b = WebShopEnv(data_dir=data_dir), WebShopEnv(data_dir=data_dir)
    assert a.world is b.world                                   # built once per process
    ids = [a.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert ids == [b.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert len(set(ids)) > 15
    t = WebShopEnv(data_dir=data_dir, split="test")
    assert all(int(t.reset(seed=s)[1]["task_id"].split("/")[1]) < 500 for s in range(30))
    with pytest.raises(ValueError, match="task_id"):
        a.reset(options={"task_id": "synthetic/99999"})
    with pytest.raises(ValueError, match="task_id"):
        a.reset(options={"task_id": "human/0"})
    with pytest.raises(ValueError, match="split"):
        WebShopEnv(data_dir=data_dir, split="valid")


def test_check_env_contract(data_dir):
    for seed in (0, 1):
        report = check_env("agentrl/WebShop-v0", seed=seed, data_dir=data_dir)
        assert report.walkthrough_won is True and report.steps > 0


def test_missing_bm25s_is_missing_extra(monkeypatch):
    import sys

    from agentrl.env import MissingExtraError
    from agentrl_envs.webshop import search

    monkeypatch.setitem(sys.modules, "bm25s", None)
    monkeypatch.setattr(search, "_CACHE", {})
    with pytest.raises(MissingExtraError) as e:
        search.get_engine(["a document"])
    assert (e.value.module, e.value.extra) == ("bm25s", "webshop")
    assert "agentrl[webshop]" in str(e.value)


def test_registered_id_makes_env(data_dir):
    env = make("agentrl/WebShop-v0", data_dir=data_dir, max_turns=5)
    assert isinstance(env.unwrapped, WebShopEnv) and env.unwrapped.max_turns == 5
    env.close()
    env.close()
