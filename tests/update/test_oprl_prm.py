"""OPRL's PRM step scorer (``agentrl.train.prm``, ALGORITHMS.md §17.3, issue 50): the DPO loss of
§17.7 to the printed digits; on §17.7's batch (a tiny LoRA model) ℓ is exactly 0 at iteration 0,
one PRM step lowers the DPO loss, gives the PRM's parameters gradients and leaves the policy
adapter bit-identical; ``prm_lr: 0`` never changes the PRM; save/load round-trips it; a fully
fine-tuned policy is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError
from agentrl.train.prm import PRM_COLUMN, PRMScorer, dpo_loss, dpo_pairs, trajectory_values
from agentrl.train.scorer_options import PRMOptions
from agentrl.types import Episode, Turn, TurnTable

# §17.7: group U = X (wins, 2 turns), Y (fails, 3 turns, t1 invalid, truncated), Z (wins, 3 turns);
# group V = P, Q (both fail, 2 turns each). Episode ids X..Q = 0..4.
SPEC = [(0, 0, [0, 10], [1, 1]), (1, 0, [0, 0, 0], [1, 0, 1]), (2, 0, [0, 0, 10], [1, 1, 1]),
        (3, 1, [0, 0], [1, 1]), (4, 1, [0, 0], [1, 1])]
ELL = np.array([6, 2, -4, -10, 1, 0.5, -2, 3, -1, 2, -3, -1], dtype=np.float64)


def _episodes(seed: int = 0, vocab: int = 2000) -> list[Episode]:
    rng = np.random.default_rng(seed)
    eps, tid = [], 0
    for e, g, rewards, valid in SPEC:
        turns = []
        for t, (r, v) in enumerate(zip(rewards, valid)):
            c = int(rng.integers(2, 5))
            turns.append(Turn(run_id="r", episode_id=e, group_id=g, t=t, observation="o", anchor_obs=f"s{e}.{t}",
                              action="a", action_valid=bool(v), reward=float(r), terminated=t == len(rewards) - 1
                              and e != 1, truncated=e == 1 and t == 2,
                              prompt_ids=rng.integers(10, vocab, int(rng.integers(5, 9))).astype(np.int32),
                              completion_ids=rng.integers(10, vocab, c).astype(np.int32),
                              completion_logprobs=np.full(c, -1.0, np.float32), turn_id=tid))
            tid += 1
        eps.append(Episode(episode_id=e, group_id=g, env_id="agentrl/Toy-v0", task_id="t", seed=g, turns=turns))
    return eps


def test_pairs_values_and_the_loss_of_the_worked_example():
    table = TurnTable.from_episodes(_episodes())
    assert dpo_pairs(table) == [(0, 1), (2, 1)]  # (X, Y), (Z, Y); V has no pair
    q = trajectory_values(ELL, table.episode, 0.05)
    assert q[0] == pytest.approx(0.4) and q[2] == pytest.approx(0.075) and q[1] == pytest.approx(-0.65)
    loss, grad = dpo_loss(ELL, table.episode, [(0, 1), (2, 1)], 0.05)
    assert round(loss, 6) == 0.347509  # pair losses 0.300058 and 0.394960
    pair = [float(np.logaddexp(0, -(q[p] - q[n]))) for p, n in [(0, 1), (2, 1)]]
    assert [round(x, 6) for x in pair] == [0.300058, 0.394960]
    assert round(dpo_loss(ELL, table.episode, [(0, 1), (2, 1)], 0.05, "mean")[0], 6) == 0.542978
    # the analytic gradient against central differences; unpaired rows (V) get 0
    num = np.zeros_like(ELL)
    for i in range(ELL.size):
        d = np.zeros_like(ELL)
        d[i] = 1e-6
        num[i] = (dpo_loss(ELL + d, table.episode, [(0, 1), (2, 1)], 0.05)[0]
                  - dpo_loss(ELL - d, table.episode, [(0, 1), (2, 1)], 0.05)[0]) / 2e-6
    np.testing.assert_allclose(grad, num, atol=1e-8)
    assert np.all(grad[table.group == 1] == 0) and np.all(grad[table.episode == 1] > 0)
    with pytest.raises(ValueError, match="at least one"):
        dpo_loss(ELL, table.episode, [], 0.05)
    with pytest.raises(ValueError, match="traj_aggregate"):
        trajectory_values(ELL, table.episode, 0.05, "max")


def test_the_scorer_writes_the_columns_oprl_reads():
    from agentrl.credit import get_estimator
    from agentrl.credit.oprl import COLUMN, PEAK_COLUMN
    from agentrl.train import prm

    assert (prm.PRM_COLUMN, prm.PEAK_COLUMN) == (COLUMN, PEAK_COLUMN)
    assert get_estimator("oprl").requires == (COLUMN,) and get_estimator("oprl").declares.scorers == ("prm",)


def test_failed_episodes_are_never_paired():
    eps = _episodes()
    table = TurnTable.from_episodes(eps)
    bad = np.asarray(table.episode == 1)
    table = TurnTable(**{**{f: getattr(table, f) for f in ("group", "episode", "t", "reward", "terminated", "truncated",
                                                            "action_valid", "anchor_key", "next_anchor_key",
                                                            "action_key", "parent", "trainable", "turn_id")},
                         "episode_ok": ~bad})
    assert dpo_pairs(table) == []  # Y failed (an env error, say): X and Z have no failure to be preferred over
    assert dpo_pairs(TurnTable.from_episodes(eps), threshold=10.0) == []  # nobody is above θ = 10


class _Policy:
    def __init__(self, model, renderer, pad_id):
        self.model, self.renderer, self.pad_id = model, renderer, pad_id


def _scorer(tiny_dir, tiny_tokenizer, opts: PRMOptions, lora: bool = True, share_prefix: bool = False,
            micro_batch: int = 3) -> PRMScorer:
    from transformers import AutoModelForCausalLM

    from agentrl.config import LoraSpec
    from agentrl.llm.chat import ChatRenderer
    from agentrl.update.lora import apply_lora

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    if lora:
        model = apply_lora(model, LoraSpec(rank=4, alpha=8.0))
    return PRMScorer(model, ChatRenderer(tiny_tokenizer), tiny_tokenizer.pad_token_id, opts, beta=0.05,
                     lr=1e-2 if opts.prm_lr is None else opts.prm_lr, micro_batch=micro_batch, share_prefix=share_prefix)


def _policy_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".default." in n}


def test_one_prm_step_on_the_worked_example_batch(tiny_dir, tiny_tokenizer):
    scorer = _scorer(tiny_dir, tiny_tokenizer, PRMOptions(score_after_update=False))
    eps = _episodes()
    table = TurnTable.from_episodes(eps)
    before = _policy_state(scorer.model)
    prm_before = [p.detach().clone() for p in scorer.params]
    out = scorer.score(table, eps, 0)
    # iteration 0: π_φ = π_old = the initial policy, so ℓ is exactly 0 (scored before the step here)
    assert np.array_equal(out.scores[PRM_COLUMN], np.zeros(len(table)))
    m = scorer.learn(out, np.zeros(len(table)), eps, 0)
    assert m["prm/pairs"] == 2 and m["prm/loss"] == pytest.approx(np.log(2.0), abs=1e-12)  # every margin 0
    assert all(p.grad is not None for p in scorer.params) and m["prm/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(prm_before, scorer.params))
    after = _policy_state(scorer.model)
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    assert all(p.grad is None for n, p in scorer.model.named_parameters() if ".default." in n)
    assert scorer.model.active_adapter == "default" and all(
        p.requires_grad == (".default." in n) for n, p in scorer.model.named_parameters() if ".lora_" in n)
    # the next iteration's scores come from the trained PRM and its DPO loss is below log 2
    out2 = scorer.score(table, eps, 1)
    ell = out2.scores[PRM_COLUMN]
    assert np.abs(ell).max() > 0
    assert dpo_loss(ell, table.episode, [(0, 1), (2, 1)], 0.05)[0] < np.log(2.0)


def test_score_after_update_reads_the_stepped_prm(tiny_dir, tiny_tokenizer):
    scorer = _scorer(tiny_dir, tiny_tokenizer, PRMOptions())
    eps = _episodes()
    table = TurnTable.from_episodes(eps)
    out = scorer.score(table, eps, 0)
    m = scorer.learn(out, np.zeros(len(table)), eps, 0)
    assert m["prm/loss"] == pytest.approx(np.log(2.0), abs=1e-12) and m["prm/loss_after"] < m["prm/loss"]
    ell = out.scores[PRM_COLUMN]
    assert m["prm/loss_after"] == pytest.approx(dpo_loss(ell, table.episode, [(0, 1), (2, 1)], 0.05)[0])
    # successes' log-ratios went up, the failure's down (the direction of the DPO gradient)
    q = trajectory_values(ell, table.episode, 0.05)
    assert q[0] > 0 and q[2] > 0 and q[1] < 0
    assert m["prm/forward_rows_per_turn"] == 3 and m["prm/backward_rows_per_turn"] == pytest.approx(8 / 12)


def test_shared_prefix_passes_give_the_same_step_and_scores(tiny_dir, tiny_tokenizer):
    eps = _episodes()
    for e in eps:  # turns of an episode share a prompt prefix (as window prompts of one task do)
        for t in e.turns[1:]:
            t.prompt_ids = np.concatenate([e.turns[0].prompt_ids, t.prompt_ids]).astype(np.int32)
    table = TurnTable.from_episodes(eps)
    # micro-batches of 2 rows: X t0 + X t1, Y t0 + Y t1, ... share their episode's first prompt
    plain, shared = (_scorer(tiny_dir, tiny_tokenizer, PRMOptions(), share_prefix=sp, micro_batch=2)
                     for sp in (False, True))
    a, b = plain.score(table, eps, 0), shared.score(table, eps, 0)
    ma, mb = plain.learn(a, None, eps, 0), shared.learn(b, None, eps, 0)
    assert mb["prm/loss"] == pytest.approx(np.log(2.0), abs=1e-12)  # ℓ exactly 0 before the step there too
    assert mb["prm/grad_norm"] == pytest.approx(ma["prm/grad_norm"], rel=1e-4)
    np.testing.assert_allclose(b.scores[PRM_COLUMN], a.scores[PRM_COLUMN], rtol=1e-3, atol=1e-6)


def test_zero_lr_never_changes_the_prm(tiny_dir, tiny_tokenizer):
    scorer = _scorer(tiny_dir, tiny_tokenizer, PRMOptions(prm_lr=0.0))
    assert scorer.optimizer is None
    eps = _episodes()
    table = TurnTable.from_episodes(eps)
    prm_before = [p.detach().clone() for p in scorer.params]
    for it in range(2):
        out = scorer.score(table, eps, it)
        assert np.array_equal(out.scores[PRM_COLUMN], np.zeros(len(table)))
    assert all(torch.equal(a, b) for a, b in zip(prm_before, scorer.params)) and scorer.steps == 0
    m = scorer.learn(out, np.zeros(len(table)), eps, 1)
    assert m["prm/pairs"] == 2 and "prm/grad_norm" not in m


def test_save_and_load_round_trip(tiny_dir, tiny_tokenizer, tmp_path):
    a = _scorer(tiny_dir, tiny_tokenizer, PRMOptions())
    eps = _episodes()
    table = TurnTable.from_episodes(eps)
    a.score(table, eps, 0)
    a.save(tmp_path)
    b = _scorer(tiny_dir, tiny_tokenizer, PRMOptions())
    assert b.load(tmp_path) and b.steps == 1
    assert all(torch.equal(p, q) for p, q in zip(a.params, b.params))
    np.testing.assert_array_equal(a.score(table, eps, 1).scores[PRM_COLUMN], b.score(table, eps, 1).scores[PRM_COLUMN])
    assert not _scorer(tiny_dir, tiny_tokenizer, PRMOptions()).load(tmp_path / "missing")
    with pytest.raises(ConfigError, match="prm_lr"):
        _scorer(tiny_dir, tiny_tokenizer, PRMOptions(prm_lr=0.0)).load(tmp_path)


def test_a_fully_fine_tuned_policy_is_refused(tiny_dir, tiny_tokenizer):
    with pytest.raises(ConfigError, match="fully fine-tuned.*policy.lora"):
        _scorer(tiny_dir, tiny_tokenizer, PRMOptions(), lora=False)


def test_stored_reference_needs_temperature_1():
    from agentrl.config import AlgorithmConfig, Config, EnvConfig, PolicyConfig
    from agentrl.credit import get_estimator
    from agentrl.train.scorers import ScorerContext

    cfg = Config(env=EnvConfig(id="agentrl/Toy-v0"), policy=PolicyConfig(temperature=0.7),
                 algorithm=AlgorithmConfig(estimator="oprl"))
    ctx = ScorerContext(cfg, None, get_estimator("oprl"), PRMOptions(reference="stored"))
    with pytest.raises(ConfigError, match="sampled at policy.temperature 0.7.*use reference: trainer"):
        PRMScorer.build(ctx)
