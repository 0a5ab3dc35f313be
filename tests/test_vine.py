"""methods/vine.py — Monte Carlo credit Â_t = V̂(s_{t+1}) − V̂(s_t) — against values known exactly.

    python -m pytest -q tests/test_vine.py

keydoor: a scripted sampler (take the key with probability q, else walk on; open the door at the
end) acts through the real tokenizer, rollout, restore and continuation code, and lab/oracle.py's DP
computes A* = Q^π − V^π of the same policy for every turn: each Â_t must agree within its SE.
ALFWorld (built-in household): a hand-built state one action from winning with two steps left, under
a sampler that plays the winning action with probability p and `look` otherwise:
V(s) = 1 − (1 − p)², A(win action) = (1 − p)², A(look) = p − V(s) = −p(1 − p).
"""
import math
import os
import random
import sys

import pytest

import envs
from infra import warmstart
from lab import oracle
from methods import vine
from rollout import Agent, AgentState, make_trajectories, rollout_groups, run_episodes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from adaptive_bias import ScriptedPolicy  # noqa: E402  (a sampler with a known action distribution)

Q, P1, P0 = 0.5, 0.9, 0.1


def keydoor_policy(views):
    """The same distribution for the oracle's DP (views → action probabilities)."""
    out = []
    for v in views:
        adm = v.info["admissible"]
        move = "open door" if "open door" in adm else "go forward"
        out.append({"take key": Q, move: 1 - Q} if "take key" in adm else {move: 1.0})
    return out


def tokenizer(spec):
    return warmstart.build_tokenizer(spec.vocabulary() + warmstart.template_texts(spec))


def test_keydoor_credit_agrees_with_the_exact_oracle_within_its_se():
    spec = envs.get_spec("keydoor")
    tok = tokenizer(spec)
    agent = Agent(ScriptedPolicy(tok, Q), tok, spec)
    kw = dict(rooms=4, pivot=1, distractors=0, p_key=P1, p_nokey=P0)
    pool = [spec.make(split="train", seed=0, **kw) for _ in range(512)]
    groups = rollout_groups(agent, pool[:16], [0, 1], 8, 1.0, seed=0)
    trajs = [tr for g in groups for tr in g]
    K = 64
    cr = vine.turn_credit(agent, lambda n: pool[:n], trajs, K, 1.0, seed=3)
    a_star = oracle.Oracle(kw, keydoor_policy, history_len=agent.history_len, eps=0.0).advantages(groups)
    z, pivotal, k, last = [], 0, 0, []
    for g, grp in enumerate(groups):
        for i, tr in enumerate(grp):
            row = cr[k]
            k += 1
            assert [c.t for c in row] == list(range(len(tr.turns))) and all(c.weight == 1.0 for c in row)
            # the two halves of the K continuations average to the K-continuation credit (the
            # reference's split in bench/benchmark_gradient.py rests on it)
            assert all(c.adv == pytest.approx(sum(c.halves) / 2, abs=1e-12) for c in row)
            last.append(row[-1].adv - a_star[g][i][-1])
            for c, a in zip(row[:-1], a_star[g][i]):
                pivotal += abs(a) > 0.1                    # the key room's decision: ±0.4 here
                if c.se == 0:                              # both sides certain (e.g. the last turn's)
                    assert c.adv == pytest.approx(a, abs=1e-9)
                else:
                    z.append((c.adv - a) / c.se)
    assert pivotal >= 8 and len(z) >= 30
    assert max(map(abs, z)) < 4.5, max(map(abs, z))
    assert 0.4 < sum(x * x for x in z) / len(z) < 2.0        # the SE is calibrated: z² averages ≈ 1
    # the last turn (open door): V̂(s_T) = R is one draw of the door, so Â_{T−1} is unbiased but its
    # SE leaves that draw out — checked on average over the trajectories instead
    m = sum(last) / len(last)
    sd = math.sqrt(sum((x - m) ** 2 for x in last) / (len(last) - 1))
    assert abs(m) < 4 * sd / math.sqrt(len(last)), (m, sd)
    assert agent.counter["tokens/verify"] > 0 and agent.counter["env_steps/verify"] > 0


def test_alfworld_credit_and_value_at_a_hand_built_state_equal_their_known_values():
    spec = envs.get_spec("alfworld")
    tok = tokenizer(spec)
    probe = spec.make(split="train", seed=0)
    obs, info = probe.reset(5)
    n = 0
    while not info["won"]:                                 # the expert's plan length
        obs, _, _, info = probe.step(probe.expert_action())
        n += 1
    env = spec.make(split="train", seed=0, max_steps=n + 1)    # after n − 1 expert steps, 2 steps are left
    obs, info = env.reset(5)
    hist = []
    for _ in range(n - 1):
        a = env.expert_action()
        hist.append((obs, a))
        obs, _, _, info = env.step(a)
    win = env.expert_action()
    s = AgentState(env.snapshot(), obs, info, tuple(hist), n - 1)
    p = 0.5
    agent = Agent(ScriptedPolicy(tok, choose=lambda prompt, rng: win if rng.random() < p else "look"), tok, spec)
    pool = [spec.make(split="train", seed=0, max_steps=n + 1) for _ in range(512)]
    K = 400
    (v, var), = vine.state_values(agent, lambda m: pool[:m], [s], K, 1.0, seed=1)
    assert abs(v - (1 - (1 - p) ** 2)) < 4 * math.sqrt(var / K)
    turns, finals = run_episodes(agent, pool[:24], [s] * 24, 1.0, seed=2, purpose="rollout")
    trajs = make_trajectories(turns, finals, 0, 5)
    cr = vine.turn_credit(agent, lambda m: pool[:m], trajs, K, 1.0, seed=4)
    seen = set()
    for tr, row in zip(trajs, cr):
        for c in row:
            left = 2 - c.t                                 # steps left before the turn
            took = tr.turns[c.t].action == win
            v_pre = 1 - (1 - p) ** left
            truth = (1.0 if took else (1 - (1 - p) ** (left - 1))) - v_pre
            seen.add((c.t, took))
            assert abs(c.adv - truth) < 4 * c.se + 1e-9, (c.t, took, c.adv, truth, c.se)
    assert {(0, True), (0, False), (1, True)} <= seen          # both actions at the first turn, the win at the second
    assert agent.counter["env_steps/verify"] > 0


def test_subsampled_turns_are_uniform_and_weighted_so_the_sum_stays_unbiased():
    rng = random.Random(0)
    T, m, n = 7, 2, 20000
    hits = [0] * T
    for _ in range(n):
        ts = vine.pick_turns(T, m, rng)
        assert len(set(ts)) == m and ts == sorted(ts)
        for t in ts:
            hits[t] += 1
    # P(turn in the sample) = m/T, so weight T/m makes E[Σ credit] = Σ_t Â_t
    assert all(abs(h / n - m / T) < 0.015 for h in hits), hits
    assert vine.pick_turns(3, 0, rng) == [0, 1, 2] and vine.pick_turns(3, 5, rng) == [0, 1, 2]


def test_gradient_ladder_statistics_recover_known_signal_and_noise():
    """bench/benchmark_gradient.py's estimates from unbiased inner products, on batches ĝ = g + noise
    with |g|² = 1 and E|noise|² = σ² (d = 4000): snr = 1/σ², align = cos(E ĝ_m, E ĝ*), and one
    batch's cosine with g* ≈ align·√(snr/(1 + snr)) — recovered even where one batch is mostly noise."""
    import torch
    import benchmark_gradient as bg
    gen = torch.Generator().manual_seed(0)
    d, n = 4000, 60
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    g /= g.norm()
    h = torch.randn(d, generator=gen, dtype=torch.float64)
    h -= (h @ g) * g
    h /= h.norm()
    tilted = 0.6 * g + 0.8 * h                          # a method whose mean points 53° away from g
    def batches(mean, sigma2):
        return [mean + torch.randn(d, generator=gen, dtype=torch.float64) * (sigma2 / d) ** 0.5 for _ in range(n)]
    ref, m1, m2 = batches(g, 4.0), batches(g, 9.0), batches(tilted, 1.0)
    gram = (torch.stack(ref + m1 + m2) @ torch.stack(ref + m1 + m2).T).numpy()
    r, a, b = ({k: o + k for k in range(n)} for o in (0, n, 2 * n))
    (s_ref, se_ref), (s1, se1), (s2, se2) = (bg.snr_jk(gram, list(x.values())) for x in (r, a, b))
    assert s_ref == pytest.approx(1 / 4, rel=0.25) and s1 == pytest.approx(1 / 9, rel=0.35) and s2 == pytest.approx(1.0, rel=0.2)
    d_ref, d1, d2 = (bg.direction_jk(gram, x, r) for x in (r, a, b))
    assert d_ref["align"] == pytest.approx(1.0, abs=1e-12) and d_ref["align_se"] == pytest.approx(0.0, abs=1e-9)
    assert d1["align"] == pytest.approx(1.0, abs=0.2) and d2["align"] == pytest.approx(0.6, abs=0.1)
    assert d1["cosine"] == pytest.approx((1 / 10) ** 0.5, abs=0.06)          # √(snr/(1+snr)) at σ² = 9
    assert d2["cosine"] == pytest.approx(0.6 * 0.5 ** 0.5, abs=0.06)
    assert all(0 < se < 0.5 for se in (se_ref, se1, se2)) and all(0 < x["align_se"] < 0.5 for x in (d1, d2))
    zero = torch.stack(ref + m1[:-1] + [torch.zeros(d, dtype=torch.float64)])     # a batch with one outcome: ĝ = 0
    d0 = bg.direction_jk((zero @ zero.T).numpy(), a, r)
    assert d0["cosine"] == pytest.approx(d1["cosine"] * (n - 1) / n, abs=0.01)    # counted as cosine 0, not NaN


def test_exact_snr_takes_out_exactly_the_continuations_noise():
    """The reference's batch ĝ = (ĝ_1 + ĝ_2)/2 from two halves of its continuations: ĝ_h = g + s + e_h
    with s the rollouts' noise (E|s|² = 1, shared) and e_h a half's continuation noise (E|e_h|² = 8,
    so ĝ's is 4). snr = 1/(1 + 4); mc = |ĝ_1 − ĝ_2|²/4 estimates the 4, and the exact snr (K → ∞)
    = |g|²/E|s|² = 1, against a GRPO arm on the same rollouts: ĝ_grpo = g + s + f, E|f|² = 3."""
    import torch
    import benchmark_gradient as bg
    gen = torch.Generator().manual_seed(1)
    d, n = 4000, 60
    def noise(v):
        return torch.randn(d, generator=gen, dtype=torch.float64) * (v / d) ** 0.5
    g = noise(d) / (d ** 0.5)
    g /= g.norm()
    ref, grpo, mc = [], [], {}
    for b in range(n):
        s = noise(1.0)
        g1, g2 = g + s + noise(8.0), g + s + noise(8.0)
        ref.append((g1 + g2) / 2)
        mc[b] = float(((g1 - g2) ** 2).sum() / 4)
        grpo.append(g + s + noise(3.0))
    G = torch.stack(ref + grpo)
    gram = (G @ G.T).numpy()
    r, a = {k: k for k in range(n)}, {k: n + k for k in range(n)}
    snr, _ = bg.snr_jk(gram, list(r.values()))
    ex, ex_se = bg.snr_jk(gram, list(r.values()), mc)
    assert snr == pytest.approx(1 / 5, rel=0.3) and ex == pytest.approx(1.0, rel=0.3) and 0 < ex_se < 0.5
    pr = bg.paired_ratio(gram, r, a, mc)                 # exact credit over GRPO: 1 / (1/4)
    assert pr["ratio"] == pytest.approx(4.0, rel=0.35) and 0 < pr["ratio_se"] < 2 and pr["ratio_batches"] == n
    assert pr["ratio_lo"] < pr["ratio"] < pr["ratio_hi"]
    # paired: GRPO's batch k shares its rollouts with the reference's batch k; align leaves those pairs
    # out, so it stays ≈ 1 (with them in, s would count twice: |s|² = 1 against |g|² = 1)
    assert bg.direction_jk(gram, a, r)["align"] == pytest.approx(1.0, abs=0.15)


def _fake_cache(folder, plan, seed=0):
    """Batch files as benchmark_gradient's sittings keep them: plan = [(arm, batch index), ...] in the
    order the sittings made them; batch b of every arm shares a rollout noise (paired), as real ones do."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(500, generator=gen)
    shared = {b: torch.randn(500, generator=torch.Generator().manual_seed(100 + b)) for b in range(80)}
    scale = {"grpo": 4.0, "gigpo": 2.0, "prover": 3.0, "vine:vine_k=2,vine_turns=0": 1.0}
    for arm, b in plan:
        d = os.path.join(folder, arm.replace(":", "_").replace("=", "_").replace(",", "_"))
        os.makedirs(d, exist_ok=True)
        noise = torch.randn(500, generator=torch.Generator().manual_seed(hash((arm, b)) % 10**6))
        x = {"arm": arm, "grad": g * 0.05 + shared[b] * 0.1 + noise * 0.1 * scale[arm], "tokens": 100.0 + b, "judge_tokens": 0.0}
        if arm.startswith("vine"):
            x["mc"] = 0.5
        torch.save(x, os.path.join(d, f"{b}.pt"))


def test_gradient_ladder_table_is_the_same_whatever_the_order_of_the_sittings(tmp_path):
    """Two histories that keep the same batches — GRPO's 60 first, then a 20-batch sitting, or the other
    way round — give byte-identical tables; every ratio to GRPO is on exactly the batch indices both arms
    have (the 20-batch arm against GRPO's first 20, not all 60)."""
    import benchmark_gradient as bg
    ref = "vine:vine_k=2,vine_turns=0"
    first = [("grpo", b) for b in range(60)] + [("gigpo", b) for b in range(60)] + [(ref, b) for b in range(40)]
    second = [("grpo", b) for b in range(20)] + [("prover", b) for b in range(20)]
    texts = []
    for k, plan in enumerate((first + second, second[::-1] + first[::-1])):
        cache, out = tmp_path / f"cache{k}", tmp_path / f"out{k}"
        _fake_cache(str(cache), plan)
        meta = {"env": "alfworld", "policy": "P", "tasks": 4, "group": 8, "ref_arm": ref, "ref_k": 2, "ref_turns": 0}
        bg.save_store(bg.store_path(str(out / "bg"), "alfworld", "P", 4, 8), bg.build_store(str(cache), meta))
        bg.report(str(out / "bg.csv"), str(out / "bg.md"))
        texts.append(((out / "bg.csv").read_text(), (out / "bg.md").read_text()))
    assert texts[0] == texts[1]
    rows = {r["method"]: r for r in bg.load(str(tmp_path / "out0" / "bg.csv"))}
    st = bg.load_store(bg.store_path(str(tmp_path / "out0" / "bg"), "alfworld", "P", 4, 8))
    by = {a: {int(b): i for i, (x, b) in enumerate(zip(st["arm"], st["batch"])) if x == a} for a in ("grpo", "prover")}
    first20 = [by["grpo"][b] for b in range(20)]
    want = bg.snr_jk(st["gram"], list(by["prover"].values()))[0] / bg.snr_jk(st["gram"], first20)[0]
    assert rows["prover"]["ratio_batches"] == "20" and float(rows["prover"]["snr_vs_grpo"]) == pytest.approx(want, abs=1e-4)
    assert rows["gigpo"]["ratio_batches"] == "60" and rows[ref]["ratio_batches"] == "40" and rows[ref]["snr_exact"]
    assert float(rows["prover"]["snr_vs_grpo_lo"]) < float(rows["prover"]["snr_vs_grpo"]) < float(rows["prover"]["snr_vs_grpo_hi"])


def test_two_sittings_never_make_the_same_batch(tmp_path):
    """bench/benchmark_gradient.py's claim on a batch file: two processes asking for the same batches
    side by side make each once (the second waits for a held one instead of redoing it)."""
    import subprocess
    code = ("import sys, time; sys.path.insert(0, 'bench'); import benchmark_gradient as bg\n"
            "d, tag = sys.argv[1], sys.argv[2]\n"
            "def make(b):\n"
            "    open(f'{d}/made-{b}-{tag}', 'w').close(); time.sleep(0.3); return {'b': b}\n"
            "late = [b for b in range(6) if not bg.claimed(f'{d}/{b}.pt', lambda: make(b), wait=False)]\n"
            "for b in late: bg.claimed(f'{d}/{b}.pt', lambda: make(b), wait=True)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), t], cwd=root) for t in "ab"]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    made = sorted(f.name for f in tmp_path.iterdir() if f.name.startswith("made-"))
    assert sorted(m.split("-")[1] for m in made) == [str(b) for b in range(6)]      # each batch made once
    assert all((tmp_path / f"{b}.pt").exists() for b in range(6))


def test_window_credit_probability_is_the_binomial_sum():
    import credit_window as cw
    assert cw.p_credit(0.5, 0.5, 1) == pytest.approx(0.25)           # post wins, pre loses
    assert cw.p_credit(0.0, 1.0, 4) == pytest.approx(1.0) and cw.p_credit(1.0, 0.0, 4) == 0.0
    rng = random.Random(0)
    pre, post, K = 0.45, 0.6, 4
    sims = sum(sum(rng.random() < post for _ in range(K)) > sum(rng.random() < pre for _ in range(K)) for _ in range(40000))
    assert cw.p_credit(pre, post, K) == pytest.approx(sims / 40000, abs=0.01)


def test_vine_method_replaces_grpo_advantage_on_the_picked_turns(tmp_path):
    """--method vine through the registry: every group (all-success and all-failure ones too) gets
    A_t = (T/m)·Â_t on m picked turns and 0 elsewhere (no format penalty here: the sampler's actions
    are well formed); the continuations are policy tokens (tokens/verify)."""
    import config
    import grpo
    import methods
    import train
    spec = envs.get_spec("keydoor")
    tok = tokenizer(spec)
    agent = Agent(ScriptedPolicy(tok, Q), tok, spec)
    kw = dict(rooms=4, pivot=1, distractors=0, p_key=P1, p_nokey=P0)
    cfg = config.parse_args(["--env", "keydoor", "--method", "vine", "--vine-k", "4", "--vine-turns", "2", "--out", str(tmp_path)])
    config.validate(cfg)
    pool = [spec.make(split="train", seed=0, **kw) for _ in range(16)]
    groups = rollout_groups(agent, pool, [0, 1, 2], 4, 1.0, seed=5)
    adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    run = train.Run(cfg, agent, spec, kw, [], None, str(tmp_path))
    out = methods.credit_fn("vine")(groups, adv, run)
    assert out["vine/turns"] == 2 * sum(len(g) for g in groups) and out["vine/se_mean"] > 0
    for g, grp in enumerate(groups):
        for i, tr in enumerate(grp):
            nz = [t for t, a in enumerate(adv[g][i]) if a != 0.0]
            assert len(nz) <= 2 and len(adv[g][i]) == len(tr.turns)
            # each credited value is (T/m)·Â with Â a difference of two means of 4 outcomes (or R)
            for t in nz:
                assert abs(adv[g][i][t]) <= len(tr.turns) / 2 + 1e-9
    assert agent.counter["tokens/verify"] > 0


def test_benchmark_gradient_refuses_an_odd_reference_k_before_set_up():
    """The reference's batches are split in two halves of their continuations: an odd --ref-k is one
    error line, before any policy is loaded."""
    import benchmark_gradient as bg
    with pytest.raises(SystemExit, match="--ref-k 3: the reference splits its continuations in two halves"):
        bg.main(["--ref-k", "3", "--cache", "/nonexistent", "--out", "/nonexistent/x"])
