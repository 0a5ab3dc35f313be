"""Verification and the built-in judge on the controlled PivotEnv, against analytic values.

    python -m pytest -q tests/test_verify.py

PivotEnv: success depends only on whether the key was taken at the pivot room (p_with_key vs
p_without). The policy here is a fixed stochastic one with a *known* decision probability q =
π(take key | key visible), so the analytic segment advantage is known:
    V(s_pre)  = q·p1 + (1 − q)·p0        (state before the pivot turn)
    V(s_post) = p1                       (state after taking the key)
    A_seg     = (1 − q)(p1 − p0)
It acts through the real tokenizer / chat template / rollout / restore / verify code; only the
network is replaced by this known distribution, which is what makes the value analytic.
"""
import math
import random

import pytest

import envs
import judge
import policy
import prover
import verify
from policy import Sample
from rollout import Agent, rollout_groups

Q, P1, P0 = 0.5, 0.9, 0.1


class KnownPolicy:
    """Generation backend with an explicit action distribution: take the key with prob Q when
    the current observation shows it, else go forward."""

    def __init__(self, tok, q=Q):
        self.tok, self.q = tok, q

    def sync(self, model):
        pass

    def generate(self, prompts, max_new_tokens, temperature, seed=None, row_seeds=None):
        out = []
        for i, p in enumerate(prompts):
            rng = random.Random(row_seeds[i] if row_seeds is not None else hash((seed, i)))
            text = self.tok.decode(p)
            current = text.rsplit("obs:", 1)[-1]
            if "A key lies here" in current and rng.random() < self.q:
                a, lp = "take key", math.log(self.q)
            else:
                a, lp = "go forward", math.log(1 - self.q) if "A key lies here" in current else 0.0
            ids = self.tok(f"<action>{a}</action><|im_end|>", add_special_tokens=False)["input_ids"]
            out.append(Sample(ids, [lp] + [0.0] * (len(ids) - 1)))
        return out


@pytest.fixture(scope="module")
def setup():
    spec = envs.get_spec("pivot")
    tok = policy.build_tokenizer(spec.vocabulary() + policy.template_texts(spec))
    agent = Agent(KnownPolicy(tok), tok, spec)
    pool = [envs.PivotEnv(p_with_key=P1, p_without=P0) for _ in range(64)]
    return spec, tok, agent, pool


def pivot_turn(tr):
    return next((tn.t for tn in tr.turns if tn.action == "take key"), None)


def test_delta_matches_analytic_value(setup):
    spec, tok, agent, pool = setup
    groups = rollout_groups(agent, pool, list(range(40)), 1, 1.0, seed=0)
    trajs = [g[0] for g in groups if pivot_turn(g[0]) is not None]
    assert len(trajs) >= 10
    K, deltas, ses = 8, [], []
    for i in range(200):
        tr = trajs[i % len(trajs)]
        k = pivot_turn(tr)
        v = verify.estimate(agent, pool, tr, k, k, K, 1.0, seed=i)
        deltas.append(v.delta)
        ses.append(v.se)
    analytic = (1 - Q) * (P1 - P0)
    mean = sum(deltas) / len(deltas)
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1))
    se_mean = sd / math.sqrt(len(deltas))
    assert abs(mean - analytic) < 2 * se_mean + 1e-9, (mean, analytic, se_mean)
    # the per-estimate SE is calibrated: it matches the spread of Δ̂ across seeds
    assert 0.7 < (sum(ses) / len(ses)) / sd < 1.3
    assert agent.counter["tokens/verify"] > 0 and agent.counter["env_steps/verify"] > 0


def test_non_pivotal_segment_has_zero_value(setup):
    spec, tok, agent, pool = setup
    groups = rollout_groups(agent, pool, list(range(40)), 1, 1.0, seed=1)
    trajs = [g[0] for g in groups if pivot_turn(g[0]) is not None and pivot_turn(g[0]) + 2 < len(g[0].turns)]
    deltas = []
    for i in range(120):
        tr = trajs[i % len(trajs)]
        k = pivot_turn(tr) + 1                       # a "go forward" after the key: no effect
        deltas.append(verify.estimate(agent, pool, tr, k, k, 8, 1.0, seed=1000 + i).delta)
    mean = sum(deltas) / len(deltas)
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1))
    assert abs(mean) < 2 * sd / math.sqrt(len(deltas)) + 1e-9


def test_segment_must_be_non_terminal(setup):
    spec, tok, agent, pool = setup
    tr = rollout_groups(agent, pool, [0], 1, 1.0, seed=2)[0][0]
    with pytest.raises(AssertionError):
        verify.estimate(agent, pool, tr, len(tr.turns) - 1, len(tr.turns) - 1, 2, 1.0, seed=0)


def test_builtin_judge_finds_pivotal_decision(setup):
    spec, tok, agent, pool = setup
    j = judge.make_judge("builtin")
    hits, eligible = 0, 0
    for task in range(60):
        group = rollout_groups(agent, pool, [task], 8, 1.0, seed=task)[0]
        if not prover.eligible(group, 1, 3):
            continue
        eligible += 1
        sid = prover.shortest_success(group)
        res = j.propose(group, sid)
        k = pivot_turn(group[sid])
        if res.proposal is not None and k is not None and res.proposal.start_turn <= k <= res.proposal.end_turn:
            hits += 1
    assert eligible >= 10
    assert hits / eligible >= 0.8, (hits, eligible)


def test_prover_credit_adds_delta_to_segment_only(setup, tmp_path):
    """End to end on one eligible group: the credited turns are the segment's, by λ·Δ̂."""
    import grpo
    from train import Config, Run
    spec, tok, agent, pool = setup
    cfg = Config(env="pivot", method="prover", verify_k=8, temperature=1.0)
    for task in range(100):
        groups = rollout_groups(agent, pool, [task], 8, 1.0, seed=100 + task)
        if prover.eligible(groups[0], 1, 3):
            break
    adv = grpo.trajectory_advantages(groups)
    base = [[list(t) for t in g] for g in adv]
    run = Run(cfg, agent, spec, {}, list(pool), judge.make_judge("builtin"), str(tmp_path), step=1)
    st = prover.credit(groups, adv, run)
    assert st["prover/eligible"] == 1 and st["prover/proposals"] == 1
    changed = [(i, t) for i, tr in enumerate(adv[0]) for t, a in enumerate(tr) if a != base[0][i][t]]
    report = (tmp_path / "segments.md").read_text()
    if st["prover/credited"]:
        sid = prover.shortest_success(groups[0])
        assert changed and all(i == sid for i, _ in changed)
        d = st["prover/delta_mean"]
        assert all(math.isclose(adv[0][i][t] - base[0][i][t], d) for i, t in changed)
        assert "applied" in report
    else:
        assert not changed and "no credit" in report
    assert "Δ̂ =" in report
