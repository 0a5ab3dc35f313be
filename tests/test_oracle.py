"""lab/oracle.py (exact A* in keydoor), the `nokey` label, lab/p_key_held and the ladder's arms (lab/ladder.py).

    python -m pytest -q tests/test_oracle.py
"""
import argparse
import math
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import judge  # noqa: E402
import methods  # noqa: E402
import envs  # noqa: E402
import grpo  # noqa: E402
from sims import keydoor  # noqa: E402
from lab import oracle  # noqa: E402
import rollout  # noqa: E402

WARM = os.path.join(ROOT, "results", "warmstarts", "tiny-keydoor-b3062f60c292")   # committed, rooms 16


def corridor_policy(q: float, f: float = 1.0, coin: float = 0.0):
    """Scripted: takes the key with probability q (else walks on), the coin with probability `coin`
    where it lies; in a middle room walks on with probability f (the rest is an invalid turn); opens
    the door in the last room. Reads only the admissible actions and the observation."""
    def pol(views):
        out = []
        for v in views:
            adm = v.info["admissible"]
            if "take key" in adm:
                out.append({"take key": q, "go forward": 1 - q})
            elif "take cursed coin" in adm and coin > 0:
                move = "open door" if "open door" in adm else "go forward"
                out.append({"take cursed coin": coin, move: 1 - coin})
            elif "open door" in adm:
                out.append({"open door": 1.0})
            elif v.obs.startswith("You take"):
                out.append({"open door" if "open door" in adm else "go forward": 1.0})
            else:
                out.append({"go forward": f})       # 1 − f: a response that is no action (a wasted step)
        return out
    return pol


def _start(kw, task=0):
    env = keydoor.make(split="test", seed=0, **kw)
    return env, rollout.start_state(env, task)


def test_corridor_values_and_advantages_equal_a_hand_computation():
    kw = dict(rooms=3, distractors=0, p_key=0.8, p_nokey=0.2)
    env, s0 = _start(kw)
    orc = oracle.Oracle(kw, corridor_policy(0.6), eps=0.0)
    v = orc.values([s0])[0]
    assert v == pytest.approx(0.6 * 0.8 + 0.4 * 0.2)
    assert orc.turn_q(s0, "take key") - v == pytest.approx(0.8 - 0.56)            # (1 − q)(p_key − p_nokey)
    assert orc.turn_q(s0, "go forward") - v == pytest.approx(0.2 - 0.56)
    assert orc.turn_q(s0, "examine key") == pytest.approx(v)  # a wasted step that the limit does not bind: 0
    assert orc.max_bound([s0]) == 0.0


def test_several_keys_values_and_advantages_equal_a_hand_computation():
    """keys=2 in rooms 1-2 of 4, each taken with probability q: V(start) = p_nokey + (p_key − p_nokey)·q,
    taking the first key is worth (1 − q)(p_key − p_nokey)/2 and leaving it −q(p_key − p_nokey)/2
    (keydoor's analytic values); after one key the second is worth the same; the expected reward of a
    trajectory counts its keys; lab's p_key_held follows the first key only."""
    q, pk, pn = 0.3, 0.9, 0.1
    kw = dict(rooms=4, keys=2, distractors=0, p_key=pk, p_nokey=pn)
    env, s0 = _start(kw)
    orc = oracle.Oracle(kw, corridor_policy(q), eps=0.0)
    v = orc.values([s0])[0]
    assert v == pytest.approx(pn + (pk - pn) * q)
    assert orc.turn_q(s0, "take key") - v == pytest.approx((1 - q) * (pk - pn) / 2)
    assert orc.turn_q(s0, "go forward") - v == pytest.approx(-q * (pk - pn) / 2)
    assert orc.values([s0], "key_held")[0] == pytest.approx(q)
    def turn(t, action, nxt, truth):
        return rollout.Turn(t, "", [], "", action, True, nxt, 0.0, nxt == keydoor.DOOR_SHUT, truth=truth)
    tr = rollout.Trajectory(0, 0, 0, "", "keydoor", [turn(0, "take key", "You take the key.", "key"),
                                                     turn(1, "go forward", "", ""), turn(2, "go forward", "", "nokey"),
                                                     turn(3, "open door", keydoor.DOOR_SHUT, "")], False, 0.0)
    assert oracle.expected_reward(tr, kw) == pytest.approx(pn + (pk - pn) / 2)


def test_apples_add_their_expectation_to_every_value_and_leave_the_advantages_alone():
    """apples=0.3 in rooms 5 (middle rooms 1..3): V(start) = q·p_key + (1 − q)·p_nokey + 3 · 0.3 · 1/2
    and A*(take key), A*(go forward) are those of the apple-free game; with wasted steps and a binding
    step limit the oracle's V equals the real env's mean score over many episodes of the same policy
    (Monte Carlo, 4 SE); oracle-rb's expected reward counts the apples of the rooms entered."""
    q, pk, pn, a = 0.4, 0.9, 0.3, 0.3
    kw = dict(rooms=5, distractors=0, p_key=pk, p_nokey=pn, apples=a)
    env, s0 = _start(kw)
    orc = oracle.Oracle(kw, corridor_policy(q), eps=0.0)
    v = orc.values([s0])[0]
    assert v == pytest.approx(q * pk + (1 - q) * pn + 3 * a * keydoor.APPLE_CHANCE)
    assert orc.turn_q(s0, "take key") - v == pytest.approx((1 - q) * (pk - pn))
    assert orc.turn_q(s0, "go forward") - v == pytest.approx(-q * (pk - pn))
    assert orc.values([s0], "key_held")[0] == pytest.approx(q)                  # p_key_held ignores the apples
    # a binding limit (7 steps for 5 rooms) and a policy that wastes steps: against the real env
    kw7 = dict(kw, max_steps=7)
    env, s0 = _start(kw7)
    pol = corridor_policy(q, f=0.6)
    v = oracle.Oracle(kw7, pol, eps=0.0).values([s0])[0]
    import numpy as np
    rng, scores = np.random.default_rng(0), []
    for ep in range(6000):
        env.restore(s0.env_snap)
        env.reseed(ep)
        view = s0
        while True:
            probs = pol([view])[0]
            acts, ps = list(probs), list(probs.values())
            ps.append(max(0.0, 1 - sum(ps)))
            i = rng.choice(len(ps), p=np.array(ps) / sum(ps))
            act = acts[i] if i < len(acts) else ""
            obs, _, done, info = env.step(act)
            if done:
                break
            view = rollout.AgentState(None, obs, info, view.history + ((view.obs, act),), view.step + 1)
        scores.append(info["score"])
    se = float(np.std(scores)) / math.sqrt(len(scores))
    assert abs(float(np.mean(scores)) - v) < 4 * se, (np.mean(scores), v, se)
    def turn(t, action, nxt, truth=""):
        return rollout.Turn(t, "", [], "", action, True, nxt, 0.0, False, truth=truth)
    moves = [turn(0, "go forward", "room", "nokey"), turn(1, "go forward", keydoor.NOTHING),
             turn(2, "go forward", "room")]                                   # rooms 1 and 2 entered; out of steps
    tr = rollout.Trajectory(0, 0, 0, "", "keydoor", moves, False, 0.0)
    assert oracle.expected_reward(tr, kw) == pytest.approx(2 * a * keydoor.APPLE_CHANCE)
    tr.turns = moves + [turn(3, "go forward", "room"), turn(4, "go forward", "room"),
                        turn(5, "open door", keydoor.DOOR_SHUT)]
    assert oracle.expected_reward(tr, kw) == pytest.approx(pn + 3 * a * keydoor.APPLE_CHANCE)


def test_corridor_with_the_trap():
    kw = dict(rooms=3, distractors=0, p_key=0.8, p_nokey=0.2, trap=0.5)
    env, s0 = _start(kw)
    assert env.trap_room(0) in (1, 2)
    orc = oracle.Oracle(kw, corridor_policy(0.6, coin=0.3), eps=0.0)
    v = orc.values([s0])[0]
    assert v == pytest.approx(keydoor.analytic_value(0.6, 0.8, 0.2, trap=0.5, q_trap=0.3))
    # walk to the coin's room with the key: taking the coin costs half of the door's chance
    env.restore(s0.env_snap)
    obs, _, _, info = env.step("take key")
    s, hist = rollout.AgentState(env.snapshot(), obs, info, ((s0.obs, "take key"),), 1), None
    while "take cursed coin" not in s.info["admissible"]:
        o, _, _, i = env.step("go forward")
        s = rollout.AgentState(env.snapshot(), o, i, s.history + ((s.obs, "go forward"),), s.step + 1)
    vs = orc.values([s])[0]
    assert vs == pytest.approx(0.8 * (1 - 0.3 * 0.5))
    assert orc.turn_q(s, "take cursed coin") - vs == pytest.approx(0.4 - vs)


def test_corridor_with_the_step_limit_binding():
    # 3 rooms, 5 steps: with the key the agent needs 4 (one wasted step allowed), without it 3 (two)
    kw = dict(rooms=3, distractors=0, p_key=0.8, p_nokey=0.2, max_steps=5)
    env, s0 = _start(kw)
    orc = oracle.Oracle(kw, corridor_policy(0.6, f=0.5), eps=0.0)
    reach_key, reach_nokey = 1 - 0.5 ** 2, 1 - 0.5 ** 3
    v = orc.values([s0])[0]
    assert v == pytest.approx(0.6 * 0.8 * reach_key + 0.4 * 0.2 * reach_nokey)
    assert orc.turn_q(s0, "take key") == pytest.approx(0.8 * reach_key)
    # a wasted step now costs: examining the key first leaves 4 steps, so no waste is allowed with it
    q_waste = orc.turn_q(s0, "examine key")
    assert q_waste == pytest.approx(0.6 * 0.8 * 0.5 + 0.4 * 0.2 * reach_key) and q_waste < v
    # pruning: the bound covers the error
    coarse = oracle.Oracle(kw, corridor_policy(0.6, f=0.5), eps=0.2)
    vc = coarse.values([s0])[0]
    assert 0 < coarse.max_bound([s0]) and abs(vc - v) <= coarse.max_bound([s0]) + 1e-12


def test_advantages_of_a_trajectory_telescope_to_expected_reward_minus_start_value():
    kw = dict(rooms=3, distractors=1, p_key=0.8, p_nokey=0.2, max_steps=6)
    env, s0 = _start(kw, task=3)
    orc = oracle.Oracle(kw, corridor_policy(0.5, f=0.7), eps=0.0)
    turns, s = [], s0
    for a in ["examine key", "take key", "go forward", "", "go forward", "open door"]:
        env.restore(s.env_snap)
        obs, r, done, info = env.step(a)
        turns.append(rollout.Turn(t=len(turns), obs=s.obs, admissible=list(s.info["admissible"]), text=a, action=a,
                                  valid=True, next_obs=obs, reward=r, done=done, state=s, truth=info["pivotal"]))
        s = rollout.AgentState(env.snapshot(), obs, info, s.history + ((s.obs, a),), s.step + 1)
    tr = rollout.Trajectory(0, 0, 3, keydoor.TASK, "keydoor", turns, won=False, score=0.0)
    a = orc.advantages([[tr]])[0][0]
    assert oracle.expected_reward(tr, kw) == pytest.approx(0.8)
    assert sum(a) == pytest.approx(0.8 - orc.values([s0])[0])
    assert a[1] > 0 and a[3] < 0         # taking the key helps; the invalid turn costs a step against the limit


def test_nokey_label():
    env = keydoor.make(rooms=3, distractors=1)
    env.reset(0)
    assert env.step("go forward")[3]["pivotal"] == "nokey"      # left the key lying in room 1
    assert env.step("go forward")[3]["pivotal"] == ""
    env.reset(0)
    assert env.step("take key")[3]["pivotal"] == "key"
    assert env.step("go forward")[3]["pivotal"] == ""


def test_p_key_held_equals_a_hand_computation_on_a_scripted_policy():
    # at the key: take it 0.3, examine it 0.2 (then the same choice again), walk on 0.5 → 0.3 / 0.8
    def pol(views):
        return [{"take key": 0.3, "examine key": 0.2, "go forward": 0.5} if "take key" in v.info["admissible"]
                else {"go forward": 1.0} for v in views]
    kw = dict(rooms=4, distractors=1, max_steps=40)
    env, s0 = _start(kw)
    orc = oracle.Oracle(kw, pol, eps=0.0)
    assert orc.values([s0], "key_held")[0] == pytest.approx(0.3 / 0.8 * (1 - 0.2 ** 40) + 0.0, abs=1e-9)
    # lab/q_key would read 0.3 here: the first action only
    # a walk that took the key already: 1
    env.restore(s0.env_snap)
    obs, _, _, info = env.step("take key")
    assert orc.values([rollout.AgentState(env.snapshot(), obs, info, ((s0.obs, "take key"),), 1)], "key_held")[0] == 1.0


@pytest.fixture(scope="module")
def warm():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from infra.policy import HFGenerator
    tok = AutoTokenizer.from_pretrained(WARM, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(WARM, dtype=torch.float32)
    spec = envs.get_spec("keydoor")
    return model, rollout.Agent(HFGenerator(model, tok), tok, spec, history_len=2, max_new_tokens=12)


@pytest.mark.slow
def test_model_policy_against_monte_carlo_with_the_real_sampler(warm):
    """A small oracle-vs-MC check (bench/oracle_check.py is the full one): V at the start and after
    taking the key, from 512 continuations each."""
    model, agent = warm
    kw = {"rooms": 3}
    env, s0 = _start(kw, task=1)
    orc = oracle.Oracle(kw, oracle.ModelPolicy(model, agent, 1.0), history_len=2, eps=1e-5)
    pool = [keydoor.make(split="test", seed=0, **kw) for _ in range(512)]
    finals = rollout.continue_from(agent, pool, [s0], 512, 1.0, seed=5)
    mc = [float(f.info["won"]) for f in finals]
    m = sum(mc) / len(mc)
    se = math.sqrt(m * (1 - m) / len(mc))
    v = orc.values([s0])[0]
    assert abs(v - m) < 4 * se + orc.max_bound([s0]), (v, m, se)
    pi = orc.pi[orc.node_of(s0)]
    assert 0.3 < pi["take key"] < 0.9 and sum(pi.values()) <= 1.0


@pytest.mark.slow
def test_model_policy_shared_prompt_equals_the_plain_path(warm):
    """The shared-prompt scorer (one prompt forward per view, its K, V copied to each candidate)
    gives the plain path's probabilities at every node of a small DP, and the same values."""
    model, agent = warm
    kw = {"rooms": 4, "p_key": 0.6, "p_nokey": 0.4}
    env, s0 = _start(kw, task=2)
    plain = oracle.ModelPolicy(model, agent, 1.0, share_prompt=False)
    shared = oracle.ModelPolicy(model, agent, 1.0, chunk=40)       # small chunks: several prefills
    assert shared.share_prompt and not plain.share_prompt
    o1 = oracle.Oracle(kw, plain, history_len=2, eps=1e-4)
    o2 = oracle.Oracle(kw, shared, history_len=2, eps=1e-4)
    assert o2.values([s0])[0] == pytest.approx(o1.values([s0])[0], abs=1e-5)
    assert set(o1.pi) == set(o2.pi) and len(o1.pi) > 20
    for k in o1.pi:
        assert o1.pi[k].keys() == o2.pi[k].keys()
        for a in o1.pi[k]:
            assert o2.pi[k][a] == pytest.approx(o1.pi[k][a], abs=1e-5)
    assert shared.calls > 1


@pytest.mark.slow
def test_ladder_arms_run_on_keydoor(warm, tmp_path):
    import config
    from lab import ladder
    import train
    model, agent = warm
    kw = {"rooms": 3}
    cfg = config.parse_args(["--env", "keydoor", "--env-opt", "rooms=3", "--out", str(tmp_path)])
    config.validate(cfg)
    pool = [keydoor.make(split="train", seed=0, **kw) for _ in range(16)]
    groups = rollout.rollout_groups(agent, pool, [4, 5], 8, 1.0, seed=3)
    base = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    run = train.Run(cfg, agent, agent.spec, kw, [], judge.make_judge("builtin"), str(tmp_path))
    outs = {}
    for name in [k for k, m in methods.METHODS.items() if m.lab]:
        adv = [[list(r) for r in g] for g in base]
        outs[name] = (methods.credit_fn(name)(groups, adv, run), adv)
    a_star = ladder.make_oracle(run).advantages(groups)
    orc = ladder.make_oracle(run)
    for g, group in enumerate(groups):
        for i, tr in enumerate(group):
            e = oracle.expected_reward(tr, kw)
            assert sum(a_star[g][i]) == pytest.approx(e - orc.values([tr.turns[0].state])[0], abs=1e-6)
            # the format penalty belongs to the update: every arm keeps it, exact credit alone too
            pen_only = [-grpo.turn_penalty(tn, cfg.invalid_penalty, cfg.inadmissible_penalty) for tn in tr.turns]
            assert outs["oracle"][1][g][i] == pytest.approx([a + p for a, p in zip(a_star[g][i], pen_only)])
            assert outs["oracle-add"][1][g][i] == pytest.approx([b + a for b, a in zip(base[g][i], a_star[g][i])])
            mean_e = sum(oracle.expected_reward(t, kw) for t in group) / len(group)
            pen = [base[g][i][t] - (float(tr.won) - sum(t2.won for t2 in group) / len(group)) for t in range(len(tr.turns))]
            assert outs["oracle-rb"][1][g][i] == pytest.approx([e - mean_e + p for p in pen])
    assert outs["oracle"][0]["oracle/nodes"] > 0 and "prover/proposals" in outs["prover-exact"][0]


def test_exact_credit_keeps_the_update_s_format_penalty_on_malformed_turns(warm, tmp_path):
    """The `oracle` arm is A* − the format penalty that GRPO's advantages carry (grpo.turn_penalty):
    on a malformed turn (no action tags; sampled here at temperature 3, where the tiny policy
    produces them) the arm gives A* − 0.1, on a well-formed one A* exactly — the update is the same
    for every arm, only the credit differs."""
    import config
    import train
    model, agent = warm
    cfg = config.parse_args(["--env", "keydoor", "--env-opt", "rooms=3", "--temperature", "3", "--out", str(tmp_path)])
    config.validate(cfg)
    kw = {"rooms": 3}
    pool = [keydoor.make(split="train", seed=0, **kw) for _ in range(8)]
    groups = rollout.rollout_groups(agent, pool, [1, 2], 4, 3.0, seed=11)
    run = train.Run(cfg, agent, agent.spec, kw, [], None, str(tmp_path))
    base = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    adv = [[list(r) for r in g] for g in base]
    methods.credit_fn("oracle")(groups, adv, run)
    from lab import ladder
    a_star = ladder.make_oracle(run).advantages(groups)
    bad = good = 0
    for g, group in enumerate(groups):
        for i, tr in enumerate(group):
            for t, tn in enumerate(tr.turns):
                want = a_star[g][i][t] - (cfg.invalid_penalty if not tn.valid else 0.0)
                assert adv[g][i][t] == pytest.approx(want, abs=1e-7)     # two oracles: see the 1e-7 note below
                bad += not tn.valid
                good += tn.valid
    assert bad > 0 and good > 0, (bad, good)       # both kinds of turn were checked


@pytest.mark.slow
def test_prover_plus_exact_credits_the_exact_value_gain_of_the_judged_segment(warm, tmp_path):
    """prover-plus-exact: every verified segment's Δ is V^π after it − V^π before it (the oracle's),
    with SE 0, and a credited segment's turns gain exactly λ·Δ over GRPO's advantage."""
    import config
    from lab import ladder
    import train
    model, agent = warm
    kw = {"rooms": 3}
    cfg = config.parse_args(["--env", "keydoor", "--env-opt", "rooms=3", "--out", str(tmp_path)])
    pool = [keydoor.make(split="train", seed=0, **kw) for _ in range(32)]
    groups = rollout.rollout_groups(agent, pool, [4, 5, 6, 7], 8, 1.0, seed=3)
    base = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    run = train.Run(cfg, agent, agent.spec, kw, [], judge.make_judge("builtin"), str(tmp_path))
    run.records = []
    adv = [[list(r) for r in g] for g in base]
    methods.credit_fn("prover-plus-exact")(groups, adv, run)
    orc = ladder.make_oracle(run)
    verified = [r for r in run.records if "delta" in r]
    assert verified, "no group was judged and verified: pick tasks with mixed groups"
    for r in verified:
        g = r["g"]
        tr = groups[g][r["traj"]]                   # traj_id: the index within its group
        exact = orc.turn_q(tr.turns[r["end"]].state, tr.turns[r["end"]].action) - orc.values([tr.turns[r["start"]].state])[0]
        # The credit step's oracle and this one score the same states in different batch shapes
        # (the shared-prompt scorer copies K/V per candidate), so BLAS may sum in another order:
        # values agree to ~1e-9 (seen: 1.1e-9 on an AMD EPYC), not bit for bit. 1e-7 holds on any
        # x86-64 kernel and is still far below any Δ that matters (a credited Δ is ≥ 1e-3 here).
        assert r["delta"] == pytest.approx(exact, abs=1e-7) and r["se"] == 0.0
        if r["applied"]:
            for j, u in r["matched"]:                 # matched scope: every run of the segment's actions
                for t in range(u, u + r["end"] - r["start"] + 1):
                    # the same bonus added in place: exact up to the float addition's rounding
                    assert adv[g][j][t] - base[g][j][t] == pytest.approx(cfg.lam * r["bonus"], abs=1e-9)
    assert any(r["applied"] for r in verified)


def test_exact_prover_arms_refuse_negative_credit_in_one_line():
    import config
    for m in ("prover-exact", "prover-plus-exact"):
        with pytest.raises(ValueError, match="--negative-credit: not supported"):
            config.validate(config.parse_args(["--env", "keydoor", "--method", m, "--negative-credit"]))
    config.validate(config.parse_args(["--env", "keydoor", "--method", "prover-plus", "--negative-credit"]))


@pytest.mark.parametrize("method", ["oracle-rb", "oracle-add", "oracle", "prover-exact", "prover-plus-exact"])
def test_ladder_arms_refuse_other_envs_with_one_line(method, capsys):
    import train
    with pytest.raises(SystemExit):
        train.main(["--env", "alfworld", "--method", method, "--iters", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("needs the env's truth, which only --env keydoor has (the credit lab)")


def test_credit_gradient_is_the_gradient_of_the_advantage_weighted_log_likelihood(warm):
    """bench/credit_gradient.py's ĝ: linear in the advantages, zero for zero advantages, and equal
    to a finite difference of (1/N) Σ A·log π along a random direction."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import credit_gradient
    model, agent = warm
    pool = [keydoor.make(split="train", seed=0, rooms=3) for _ in range(4)]
    groups = rollout.rollout_groups(agent, pool, [7], 4, 1.0, seed=1)
    adv = grpo.trajectory_advantages(groups)
    adv = [[[a + 0.1 * t for t, a in enumerate(tr)] for tr in g] for g in adv]
    pad = agent.tok.pad_token_id
    g1 = credit_gradient.flat_grad(model, groups, adv, pad, 1.0)
    g2 = credit_gradient.flat_grad(model, groups, [[[2 * a for a in tr] for tr in g] for g in adv], pad, 1.0)
    g0 = credit_gradient.flat_grad(model, groups, [[[0.0 for _ in tr] for tr in g] for g in adv], pad, 1.0)
    assert torch.allclose(g2, 2 * g1, atol=1e-6) and float(g0.abs().max()) == 0.0 and float(g1.norm()) > 0

    def objective():
        rows = grpo.rows_from(groups, adv)
        ids, attn, mask, _, a = grpo.collate(rows, pad)
        with torch.no_grad():
            lp = grpo.token_logprobs(model, ids, attn, mask, 1.0)
        return float((lp * a * mask).sum() / mask.sum())
    params = [p for p in model.parameters()]
    torch.manual_seed(0)
    d = [torch.randn_like(p) for p in params]
    h = 1e-3
    with torch.no_grad():
        for p, v in zip(params, d):
            p.add_(h * v)
    up = objective()
    with torch.no_grad():
        for p, v in zip(params, d):
            p.sub_(2 * h * v)
    down = objective()
    with torch.no_grad():
        for p, v in zip(params, d):
            p.add_(h * v)
    fd = (up - down) / (2 * h)
    assert fd == pytest.approx(float(torch.dot(g1, torch.cat([v.flatten() for v in d]))), rel=0.05, abs=1e-5)


@pytest.mark.slow
def test_credit_gradient_resumes_from_its_csv(tmp_path):
    """A second sitting reuses finished rows (same settings) and computes only the missing methods,
    against the same g* (its batches are seeded by index): a method run alone in one sitting and
    added in a later one gives the same figures."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import credit_gradient
    base = ["--rooms", "2", "--repeats", "2", "--ref-batches", "1", "--tasks", "1", "--group", "2"]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    credit_gradient.main([*base, "--methods", "grpo", "--out", a])
    first = credit_gradient.load_rows(a + ".csv")
    credit_gradient.main([*base, "--methods", "grpo", "oracle", "--out", a])
    rows = credit_gradient.load_rows(a + ".csv")
    assert [r["method"] for r in rows] == ["grpo", "oracle"] and rows[0] == first[0]
    # a row of token-count revision 1 (it also counted the judge's prompt) is marked and not reused
    import csv as _csv
    with open(a + ".csv", newline="") as f:
        old = list(_csv.DictReader(f))
    assert all(r["tokens_rev"] == "2" for r in old)
    old[0]["tokens_rev"] = "1"
    with open(a + ".csv", "w", newline="") as f:
        w = _csv.DictWriter(f, fieldnames=list(old[0]))
        w.writeheader()
        w.writerows(old)
    credit_gradient.write(argparse.Namespace(out=a), credit_gradient.load_rows(a + ".csv"), 0.0)
    assert "| grpo | " + format(rows[0]["tokens"], ".0f") + "† |" in open(a + ".md").read()
    credit_gradient.main([*base, "--methods", "grpo", "--out", a])
    again = credit_gradient.load_rows(a + ".csv")
    assert [(r["method"], r["tokens_rev"]) for r in again] == [("grpo", 2), ("oracle", 2)]
    assert again[0]["cosine"] == pytest.approx(first[0]["cosine"], abs=1e-4) and "† |" not in open(a + ".md").read()
    credit_gradient.main([*base, "--methods", "oracle", "--out", b])
    alone = credit_gradient.load_rows(b + ".csv")[0]
    assert alone["cosine"] == pytest.approx(rows[1]["cosine"], abs=1e-4) and alone["snr"] == pytest.approx(rows[1]["snr"], rel=1e-3)
    # --config: any keydoor options, named as given; a bad one fails in one line before any model loads
    c = str(tmp_path / "c")
    credit_gradient.main([*base[2:], "--config", "rooms=2,p_nokey=0.4", "--methods", "grpo", "--out", c])
    assert [r["config"] for r in credit_gradient.load_rows(c + ".csv")] == ["rooms=2,p_nokey=0.4"]
    with pytest.raises(SystemExit, match="--config rooms=2,p_key=7: .*p_key"):
        credit_gradient.main(["--config", "rooms=2,p_key=7", "--out", c])
    # a cell's train settings (the apples need reward=score) and an option arm on the same batches
    d = str(tmp_path / "d")
    credit_gradient.main([*base[2:], "--config", "rooms=3,apples=1,reward=score", "--methods", "prover-plus",
                          "prover-plus:lam=3", "--out", d])
    pp, lam3 = credit_gradient.load_rows(d + ".csv")
    assert (pp["method"], lam3["method"]) == ("prover-plus", "prover-plus:lam=3") and lam3["oracle_rev"] == 2
    assert credit_gradient.arm_settings("prover-plus:lam=3,verify_crn=true") == ("prover-plus", {"lam": 3.0, "verify_crn": True})
    with pytest.raises(SystemExit, match="apples"):                       # the apples without the score
        credit_gradient.main(["--config", "rooms=3,apples=1", "--out", d])
    with pytest.raises(SystemExit, match="arm 'prover-plus:lam=-1'"):
        credit_gradient.main(["--methods", "prover-plus:lam=-1", "--out", d])


def test_oracle_speed_bench_times_both_scorers_on_the_same_dp(tmp_path):
    """bench/oracle_speed.py solves the same DP with both scorers: same views and candidate rows,
    the same value to float rounding, and its figures written to the json it names."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import json
    import oracle_speed
    out = oracle_speed.main(["--rooms", "3", "--repeats", "1", "--out", str(tmp_path)])
    (row,) = out["rows"]
    assert row["plain"]["views"] == row["shared"]["views"] > 0 and row["plain"]["rows"] == row["shared"]["rows"]
    assert row["abs_value_diff"] < 1e-6 and row["plain"]["seconds"] > 0 and row["shared"]["seconds"] > 0
    assert json.load(open(tmp_path / "oracle_speed.json")) == json.loads(json.dumps(out))
    with pytest.raises(SystemExit, match="--rooms 70"):
        oracle_speed.main(["--rooms", "70", "--out", str(tmp_path)])


def examining_policy(q: float, x: float):
    """Scripted: in a room with a distractor not yet examined, examines it with probability x;
    takes the key with probability q (else walks on); opens the door in the last room."""
    def pol(views):
        out = []
        for v in views:
            adm = v.info["admissible"]
            ex = [a for a in adm if a.startswith("examine ") and a != "examine key"]
            move = "open door" if "open door" in adm else "go forward"
            if "take key" in adm:
                out.append({"take key": q, move: 1 - q})
            elif ex and not v.obs.startswith(("A ", "An ", "It ")) and x > 0:
                out.append({ex[0]: x, move: 1 - x})
            else:
                out.append({move: 1.0})
        return out
    return pol


def test_expert_neutral_changes_the_expert_only_never_the_values():
    """keydoor's expert_neutral option: the expert examines a distractor once in the rooms drawn at
    reset, which the warm start copies; the game (layout, door draw) and so every exact value and
    advantage under a given policy are the same with it on and off, and neutral turns are worth 0."""
    off = dict(rooms=4, distractors=1, p_key=0.55, p_nokey=0.45)
    on = dict(off, expert_neutral=1.0)
    for task in range(5):
        a, b = keydoor.make(split="test", seed=0, **off), keydoor.make(split="test", seed=0, **on)
        a.reset(task), b.reset(task)
        assert a.layout(task) == b.layout(task) and a.rng.bit_generator.state == b.rng.bit_generator.state
        acts = []
        while not b.s.done:
            act = b.expert_action()
            acts.append(act)
            b.step(act)
        assert sum(x.startswith("examine ") for x in acts) == 4          # once in every room (expert_neutral 1)
        assert [x for x in acts if not x.startswith("examine ")] == (["take key"] if b.s.expert_takes_key else []) \
            + ["go forward"] * 3 + ["open door"]
    pol = examining_policy(0.5, 0.3)
    (_, s_off), (_, s_on) = _start(off), _start(on)
    v_off, v_on = oracle.Oracle(off, pol, eps=0.0), oracle.Oracle(on, pol, eps=0.0)
    assert v_on.values([s_on])[0] == pytest.approx(v_off.values([s_off])[0], abs=1e-12)
    assert v_on.values([s_on])[0] == pytest.approx(0.5 * 0.55 + 0.5 * 0.45)
    ex = next(a for a in s_on.info["admissible"] if a.startswith("examine ") and a != "examine key")
    # examining first, then the same choice: a neutral decision, advantage 0
    assert v_on.turn_q(s_on, ex) == pytest.approx(v_on.values([s_on])[0], abs=1e-12)
