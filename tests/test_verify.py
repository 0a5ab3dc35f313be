"""Verification and the built-in judge on the key-to-door env (sims/keydoor.py), against analytic values.

    python -m pytest -q tests/test_verify.py

keydoor with distractors=0: success depends only on whether the key was taken in the pivot room
(p_key = P1 vs p_nokey = P0) and, with the trap on, on whether the cursed coin was taken (× (1 − trap)).
The policy here is a fixed stochastic one with *known* decision probabilities q = π(take key | key
in the room) and q_t = π(take coin | coin in the room), so the analytic segment advantages are known
(keydoor.analytic_value):
    V(s_pre)  = q·p1 + (1 − q)·p0        (state before the pivot turn)
    V(s_post) = p1                       (state after taking the key)
    A_seg     = (1 − q)(p1 − p0)
    A_coin    = −p·trap·(1 − q_t)        (p = p1 or p0, whichever the key made it)
It acts through the real tokenizer / chat template / rollout / restore / verify code; only the
network is replaced by this known distribution, which is what makes the value analytic.
"""
import math
import random

import pytest

import envs
import judge
from sims import keydoor
from infra import warmstart
import prover
import verify
from infra.policy import Sample
from rollout import Agent, rollout_groups

Q, P1, P0 = 0.5, 0.9, 0.1
QT, TRAP = 0.5, 0.5               # π(take coin | coin in the room), the coin's penalty


class KnownPolicy:
    """Generation backend with an explicit action distribution: when `take key` is admissible
    (the key lies here) take it with prob q, when `take cursed coin` is, take it with prob q_trap;
    otherwise go forward (open the door in the last room)."""

    def __init__(self, tok, q=Q, q_trap=0.0):
        self.tok, self.q, self.q_trap = tok, q, q_trap

    def sync(self, model):
        pass

    def generate(self, prompts, max_new_tokens, temperature, seed=None, row_seeds=None):
        out = []
        for i, p in enumerate(prompts):
            rng = random.Random(row_seeds[i] if row_seeds is not None else hash((seed, i)))
            acts = self.tok.decode(p).rsplit("actions:", 1)[-1]      # the current admissible list
            move = "open door" if "open door" in acts else "go forward"
            a, lp = move, 0.0
            for obj, q in (("key", self.q), ("cursed coin", self.q_trap)):
                if f"take {obj}" in acts:
                    take = rng.random() < q
                    a, lp = (f"take {obj}", math.log(q)) if take else (move, math.log(1 - q) if q < 1 else 0.0)
                    break
            ids = self.tok(f"<action>{a}</action><|im_end|>", add_special_tokens=False)["input_ids"]
            out.append(Sample(ids, [lp] + [0.0] * (len(ids) - 1)))
        return out


@pytest.fixture(scope="module")
def setup():
    spec = envs.get_spec("keydoor")
    tok = warmstart.build_tokenizer(spec.vocabulary() + warmstart.template_texts(spec))
    agent = Agent(KnownPolicy(tok), tok, spec)
    pool = [spec.make(split="train", seed=0, rooms=4, pivot=1, distractors=0, p_key=P1, p_nokey=P0)
            for _ in range(64)]
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
    analytic = keydoor.analytic_value(1.0, P1, P0) - keydoor.analytic_value(Q, P1, P0)
    assert analytic == pytest.approx((1 - Q) * (P1 - P0))
    assert all(tr.turns[pivot_turn(tr)].truth == "key" for tr in trajs)     # the env's ground truth agrees
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


def test_trap_segment_has_its_negative_analytic_value(setup):
    """The harmful decision: taking the cursed coin. Δ̂ of that one turn ≈ −p·trap·(1 − q_t),
    p the door's chance the key decision left (the key is in room 1, the coin later)."""
    spec, tok, _, _ = setup
    agent = Agent(KnownPolicy(tok, Q, QT), tok, spec)
    pool = [spec.make(split="train", seed=0, rooms=4, pivot=0, distractors=0, p_key=P1, p_nokey=P0, trap=TRAP)
            for _ in range(64)]
    groups = rollout_groups(agent, pool, list(range(60)), 1, 1.0, seed=5)
    trajs = [g[0] for g in groups if any(t.truth == "trap" for t in g[0].turns)]
    assert len(trajs) >= 10
    deltas, analytic = [], []
    for i in range(160):
        tr = trajs[i % len(trajs)]
        k = next(t.t for t in tr.turns if t.truth == "trap")
        key = any(t.truth == "key" for t in tr.turns[:k])
        assert tr.turns[k].action == "take cursed coin"
        deltas.append(verify.estimate(agent, pool, tr, k, k, 8, 1.0, seed=3000 + i).delta)
        q_key = 1.0 if key else 0.0
        analytic.append(keydoor.analytic_value(q_key, P1, P0, TRAP, 1.0) - keydoor.analytic_value(q_key, P1, P0, TRAP, QT))
    mean, want = sum(deltas) / len(deltas), sum(analytic) / len(analytic)
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1))
    se_mean = sd / math.sqrt(len(deltas))
    assert want < -0.05 and abs(mean - want) < 2 * se_mean + 1e-9, (mean, want, se_mean)
    assert mean < 0


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
    cfg = Config(env="keydoor", method="prover", verify_k=8, temperature=1.0)
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


def test_lam_3_adds_and_reports_three_times_delta(setup, tmp_path):
    """--method prover --lam 3 on real groups (the registry's credit function, the builtin judge,
    real continuations): a credited segment's turns gain 3·Δ̂, and segments.md and the record print
    that bonus, not Δ̂."""
    import grpo
    import methods
    from train import Config, Run
    spec, tok, agent, pool = setup
    cfg = Config(env="keydoor", method="prover", verify_k=8, temperature=1.0, lam=3.0)
    for task in range(100):
        groups = rollout_groups(agent, pool, [task], 8, 1.0, seed=300 + task)
        if not prover.eligible(groups[0], 1, 3):
            continue
        adv = grpo.trajectory_advantages(groups)
        base = [[list(t) for t in g] for g in adv]
        run = Run(cfg, agent, spec, {}, list(pool), judge.make_judge("builtin"), str(tmp_path), step=1)
        if methods.credit_fn("prover")(groups, adv, run)["prover/credited"]:
            break
    else:
        raise AssertionError("no credited group in 100 tasks")
    r = run.records[0]
    assert r["applied"] and r["delta"] > 0 and r["bonus"] == 3 * r["delta"]
    changed = {(i, t): a - base[0][i][t] for i, tr in enumerate(adv[0]) for t, a in enumerate(tr) if a != base[0][i][t]}
    assert changed.keys() == {(r["sid"], t) for t in range(r["start"], r["end"] + 1)}
    assert all(math.isclose(d, 3 * r["delta"]) for d in changed.values())
    last = (tmp_path / "segments.md").read_text().rsplit("## step", 1)[1]        # this group's entry
    assert f"Δ̂ = {r['delta']:+.3f}" in last and f"→ credit +{3 * r['delta']:.3f} applied" in last
