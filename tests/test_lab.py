"""The credit lab's metrics (lab/metrics.py), the paired statistics (bench/paired.py) and the code's shape.

    python -m pytest -q tests/test_lab.py
"""
import ast
import itertools
import os
import random
import shutil
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import envs  # noqa: E402
import config  # noqa: E402
from infra import runlog  # noqa: E402
from lab import metrics as lab  # noqa: E402
import paired  # noqa: E402  (bench/paired.py)
from infra import warmstart  # noqa: E402
from rollout import Agent, Trajectory, Turn  # noqa: E402


@pytest.fixture(scope="module")
def keydoor_policy():
    spec = envs.get_spec("keydoor")
    tok = warmstart.env_tokenizer(spec)
    model = warmstart.build_tiny_model(len(tok), warmstart.TinyConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128), seed=0)
    return spec, tok, model


def test_q_key_equals_a_hand_computation_from_the_logits(keydoor_policy):
    spec, tok, model = keydoor_policy
    kw = {"rooms": 4, "pivot": 1}
    agent = Agent(None, tok, spec, history_len=2)
    probe = lab.make_probe(agent, spec, kw, seed=0, temperature=0.7)
    states = lab.probe_states(spec, kw, seed=0)
    assert all("take key" in s.info["admissible"] and s.step == 1 for s in states)   # walked one room to the key
    resp = tok("<action>take key</action>", add_special_tokens=False)["input_ids"]
    assert probe.response == resp
    probs = []
    with torch.no_grad():
        for p in probe.prompts:            # one prompt at a time, full forward, no padding
            logits = model(torch.tensor([p + resp])).logits[0] / 0.7        # (T, V)
            lp = torch.log_softmax(logits, -1)
            probs.append(float(sum(lp[len(p) - 1 + j, resp[j]] for j in range(len(resp))).exp()))
    assert lab.q_key(model, probe) == pytest.approx(sum(probs) / len(probs), rel=1e-4)
    assert 0.0 < lab.q_key(model, probe) < 1.0


def _traj(tid, truths, ntok=3):
    turns = [Turn(t=t, obs="o", admissible=[], text="", action="a", valid=True, next_obs="o", reward=0.0, done=False,
                  action_ids=[1] * ntok, truth=tr) for t, tr in enumerate(truths)]
    return Trajectory(traj_id=tid, group_id=0, task=0, task_text="", task_type="keydoor", turns=turns, won=True, score=1.0)


def test_credit_precision_on_a_hand_built_group():
    g = [[_traj(0, ["", "key", "", ""]), _traj(1, ["trap", "", ""])]]
    grpo_adv = [[[0.5] * 4, [-0.5] * 3]]
    final = [[[0.5, 0.75, 0.5, 0.6], [-0.7, -0.5, -0.5]]]          # +0.25 on key, +0.1 off, −0.2 on trap
    s = lab.credit_sums(g, grpo_adv, final, "added")
    m = lab.merge([{**s, "q_key": 0.3, "shaped": True, "proposals": 0, "hits": 0, "present": 0}])
    assert m["lab/credit_precision"] == pytest.approx((0.25 + 0.2) / (0.25 + 0.1 + 0.2))
    assert m["lab/credit_key"] == pytest.approx(0.25) and m["lab/credit_trap"] == pytest.approx(-0.2)
    # a replacing method (SPO) is scored on its whole advantages
    s2 = lab.credit_sums(g, grpo_adv, final, "final")
    assert s2["on"] / s2["total"] == pytest.approx((0.75 + 0.7) * 3 / (3 * sum(map(abs, final[0][0] + final[0][1]))))
    # ... but only on the groups it changed: a second group SPO left at GRPO's advantages (all on a
    # key turn) is not its credit, for "final" methods as for "added" ones
    g3 = g + [[_traj(2, ["key", "key"])]]
    s3 = lab.credit_sums(g3, grpo_adv + [[[0.9, 0.9]]], final + [[[0.9, 0.9]]], "final")
    assert (s3["on"], s3["total"], s3["key_n"]) == pytest.approx((s2["on"], s2["total"], s2["key_n"]))
    # judge hits: a proposal covering turn 1 of trajectory 0 hits; one on turns 2-3 does not
    j = lab.judge_sums(g, [(0, 0, 0, 1, 0.2, True), (0, 0, 2, 3, 0.0, False), (0, 1, 0, 0, 0.1, True)])
    assert j == {"proposals": 3, "hits": 1, "present": 2, "fail_props": 0, "fail_hits": 0, "hit_cred": 1, "miss_cred": 1}
    # verification's discrimination from the truth labels: the hit was credited (1 of 1), one of the
    # two misses was (1 of 2)
    md = lab.merge([{**s2, "q_key": 0.3, "shaped": True, **j}])
    assert md["lab/credited_pivotal"] == 1.0 and md["lab/credited_other"] == 0.5
    # a failure that left the key behind ("nokey"): its group's proposals count in judge_hit_fail
    fail = _traj(2, ["nokey", "", ""])
    fail.won = False
    g2 = [[_traj(0, ["", "key", "", ""]), fail]]
    j2 = lab.judge_sums(g2, [(0, 0, 1, 2, 0.2, True), (0, 0, 2, 3, 0.0, False)])
    assert (j2["fail_props"], j2["fail_hits"]) == (2, 1)
    m2 = lab.merge([{**lab.credit_sums(g2, [[[0.0] * 4, [0.0] * 3]], [[[0.0] * 4, [-0.3, 0.0, 0.0]]], "added"),
                     "q_key": 0.3, "shaped": True, **j2}])
    assert m2["lab/judge_hit_fail"] == 0.5 and m2["lab/credit_nokey"] == pytest.approx(-0.3)
    assert m2["lab/credit_precision"] == pytest.approx(1.0)


def test_lab_metrics_absent_outside_the_lab():
    spec = envs.get_spec("alfworld")
    assert lab.make_probe(None, spec, {}, 0) is None
    assert lab.step_metrics(None, None, [], [], [], [], "prover") == {} and lab.merge([{}]) == {}


def test_paired_statistics_against_plain_loops():
    d = [0.05, -0.01, 0.08, 0.03, 0.0, 0.06]
    # exact sign flip: enumerate the 64 patterns by hand
    obs = abs(sum(d))
    hits = 0
    for signs in itertools.product([1, -1], repeat=len(d)):
        hits += abs(sum(s * x for s, x in zip(signs, d))) >= obs - 1e-12
    assert paired.sign_flip_p(d) == hits / 64
    assert paired.sign_flip_p([1.0, 2.0, 3.0]) == 0.25              # n = 3: the smallest p possible
    # bootstrap (scipy's, percentile): a plain resampling loop with another RNG lands within one step
    # of the resampled means' lattice (multiples of 1/600 here); a fixed seed repeats exactly
    rng, n, means = random.Random(0), len(d), []
    for _ in range(10_000):
        means.append(sum(d[rng.randrange(n)] for _ in range(n)) / n)
    means.sort()
    lo, hi = paired.bootstrap_ci(d)
    assert lo == pytest.approx(means[250], abs=2e-3) and hi == pytest.approx(means[9749], abs=2e-3)
    assert paired.bootstrap_ci(d) == (lo, hi)
    s = paired.paired({0: 0.5, 1: 0.6, 2: 0.7, 9: 0.1}, {0: 0.4, 1: 0.6, 2: 0.5})
    assert s["seeds"] == [0, 1, 2] and s["mean"] == pytest.approx(0.1) and s["p"] == 0.5
    assert paired.fmt(paired.summary([0.4]), 100) == "40.0 (n = 1, no spread)"
    assert paired.fmt({"n": 0}) == "–"


def test_stratified_average_against_plain_loops():
    """The average over benchmarks: one stratum is exactly `paired`; two strata of unequal size give
    the mean of the strata's means and the p of flipping every sign independently (plain loop)."""
    a = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.65}
    b = {0: 0.4, 1: 0.62, 2: 0.5, 3: 0.55}
    one = paired.paired(a, b)
    st = paired.stratified([one])
    assert (st["mean"], st["lo"], st["hi"], st["p"]) == (one["mean"], one["lo"], one["hi"], one["p"])
    two = paired.paired({0: 0.3, 1: 0.1}, {0: 0.2, 1: 0.15})
    st = paired.stratified([one, two])
    d1, d2 = one["d"], two["d"]
    assert st["mean"] == pytest.approx((sum(d1) / 4 + sum(d2) / 2) / 2) and st["n"] == 6 and st["n_by"] == [4, 2]
    obs, hits = abs(st["mean"]), 0
    for signs in itertools.product([1, -1], repeat=6):
        m = (sum(s * x for s, x in zip(signs[:4], d1)) / 4 + sum(s * x for s, x in zip(signs[4:], d2)) / 2) / 2
        hits += abs(m) >= obs - 1e-12
    assert st["p"] == hits / 64 and st["lo"] <= st["mean"] <= st["hi"]
    assert paired.fmt(st, 100, sign=True).endswith("(n=4+2)")
    # a benchmark with no paired seed leaves the average undefined; one with a single seed, no band
    assert paired.stratified([one, {}])["n"] == 0
    single = paired.stratified([one, paired.paired({0: 0.3}, {0: 0.2})])
    assert "lo" not in single and paired.fmt(single, 100, sign=True).endswith("(n=4+1, no spread)")


def test_credit_lab_speed_columns_on_hand_made_curves(tmp_path):
    """bench/credit_lab.py: updates to GRPO's final q_key of the same seed (censored at iters + 1),
    the per-seed ratio to GRPO's own updates, and the paired Δ q_key curve; and summarize() reads
    a run's metrics.jsonl as train.py writes it."""
    import credit_lab
    curve = lambda qs: [(t + 1, q) for t, q in enumerate(qs)]              # noqa: E731
    res = {(4, "grpo", 0): {"q_curve": curve([0.5, 0.6, 0.7, 0.8]), "q_key_final": 0.8},
           (4, "grpo", 1): {"q_curve": curve([0.5, 0.55, 0.6, 0.6]), "q_key_final": 0.6},   # reaches 0.6 at 3
           (4, "fast", 0): {"q_curve": curve([0.6, 0.8, 0.8, 0.9]), "q_key_final": 0.9},
           (4, "fast", 1): {"q_curve": curve([0.5, 0.5, 0.5, 0.5]), "q_key_final": 0.5},     # never: censored
           (8, "fast", 0): {"q_curve": curve([0.9, 0.9, 0.9, 0.9]), "q_key_final": 0.9}}    # no GRPO at rooms 8
    upd, ratio = credit_lab.to_reference_final(res, 4, "fast", iters=4)
    assert upd == {0: 2, 1: 5} and ratio == {0: 2 / 4, 1: 5 / 3}
    assert credit_lab.to_reference_final(res, 8, "fast", iters=4) == ({}, {})
    dc = credit_lab.delta_curve(res, 4, "fast")
    assert [t for t, _ in dc] == [1, 2, 3, 4]
    assert [round(d["mean"], 6) for _, d in dc] == [round(((0.6 - 0.5) + 0.0) / 2, 6), round((0.2 - 0.05) / 2, 6),
                                                    round((0.1 - 0.1) / 2, 6), round((0.1 - 0.1) / 2, 6)]
    # summarize: a finished run's metrics as train.py writes them (step 0 = the warm start's evaluation)
    d = tmp_path / "run"
    d.mkdir()
    rows = [{"step": 0, "eval/success": 0.4, "lab/q_key": 0.3},
            {"step": 1, "lab/q_key": 0.5, "tokens/rollout": 100, "tokens/verify": 50, "prover/credited": 2},
            {"step": 2, "lab/q_key": 0.95, "tokens/rollout": 100, "tokens/verify": 150, "prover/credited": 0,
             "eval/success": 0.7}]
    (d / "metrics.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    r = credit_lab.summarize(str(d), iters=2)
    assert r["updates_to_q"] == 2 and r["reached"] and r["q_key_final"] == 0.95 and r["final_success"] == 0.7
    assert r["verify_tokens_per_credit"] == 200 / 2 and r["credited_per_update"] == 1.0
    assert r["tokens_per_update"] == (150 + 250) / 2
    assert credit_lab.summarize(str(d), iters=3) is None                  # not finished: not reported


def _hand_run(d, final, rows_extra=None, cfg=None, step=2, init=0.3):
    """A finished run directory as train.py writes it: config.json, checkpoint/state.json and a
    metrics.jsonl with the warm start's evaluation, `step` updates and the final evaluation."""
    import json
    (d / "checkpoint").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg or {}))
    (d / "checkpoint" / "state.json").write_text(json.dumps({"step": step}))
    rows = [{"step": 0, "eval/success": init, "eval/score": init}]
    for t in range(1, step + 1):
        rows.append({"step": t, "tokens/rollout": 100, "tokens/verify": 0, "tokens/judge": 0, "env_steps/total": 10,
                     "time/iter_s": 2.0, **(rows_extra or {}).get(t, {})})
    rows[-1].update({"eval/success": final, "eval/score": final})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow
def test_compare_report_plan_and_protocol_on_hand_made_runs(tmp_path):
    """bench/compare.py: --cell-seeds widens single cells and the plan runs seed by seed; the table's
    Δ vs GRPO equals paired.paired on the per-seed finals; the policy-token change, the pooled
    acceptance rate and the paired average over envs are the hand computations; a run directory made
    under another protocol is named and refused before any set-up."""
    import argparse
    import subprocess
    import compare
    args = argparse.Namespace(envs=["alfworld", "searchqa"], methods=["grpo", "prover"], seeds=[0, 1], iters=2,
                              eval_every=25, eval_episodes=0, eval_repeats=4, cell_seeds=["alfworld/prover=3"],
                              jobs=2, out=str(tmp_path), extra=[], warm_start="shared")
    assert compare.plan(args) == [("alfworld", "grpo", 0), ("alfworld", "prover", 0), ("searchqa", "grpo", 0),
                                  ("searchqa", "prover", 0), ("alfworld", "grpo", 1), ("alfworld", "prover", 1),
                                  ("searchqa", "grpo", 1), ("searchqa", "prover", 1), ("alfworld", "prover", 2)]
    for bad in ("alfworld/nope=3", "alfworld-prover=3", "alfworld/prover=x"):
        with pytest.raises(SystemExit, match="--cell-seeds"):
            compare.plan(argparse.Namespace(**{**vars(args), "cell_seeds": [bad]}))
    finals = {("alfworld", "grpo"): [0.40, 0.50], ("alfworld", "prover"): [0.45, 0.60, 0.70],
              ("searchqa", "grpo"): [0.20, 0.30], ("searchqa", "prover"): [0.20, 0.36]}
    # prover: 2 verified proposals at update 1 (half accepted), 6 at update 2 (all accepted), 60 verify tokens each
    extra = {1: {"prover/valid": 2, "prover/accept_rate": 0.5, "tokens/verify": 60, "tokens/judge": 7},
             2: {"prover/valid": 5, "prover/repaired": 1, "prover/accept_rate": 1.0, "tokens/verify": 60, "tokens/judge": 7}}
    for (e, m), fs in finals.items():
        for s, f in enumerate(fs):
            _hand_run(tmp_path / "runs" / f"{e}-{m}-s{s}", f, extra if m == "prover" else None,
                      cfg={"env": e, "method": m, "seed": s, "eval_every": 25, "eval_episodes": 0, "eval_repeats": 4})
    table = compare.report(args, compare.plan(args))
    d = paired.paired({0: 0.45, 1: 0.60, 2: 0.70}, {0: 0.40, 1: 0.50})
    assert d["n"] == 2 and f"| prover | {paired.fmt(paired.summary([0.45, 0.60, 0.70]), 100)} | {paired.fmt(d, 100, sign=True)} |" in table
    row = next(line for line in table.splitlines() if line.startswith("| prover |"))
    assert "160 (+60.0%)" in row                         # policy tokens: (100 + 60) vs GRPO's 100
    assert row.rstrip(" |").endswith(f"{100 * (2 * 0.5 + 6 * 1.0) / 8:.0f}%")     # pooled: 7 of 8 accepted
    # the average over benchmarks is stratified: the mean of each env's paired Δ (alfworld over seeds
    # 0, 1: +0.05, +0.10; searchqa: 0, +0.06), relative to GRPO's average on the same seeds
    avg = paired.stratified([d, paired.paired({0: 0.20, 1: 0.36}, {0: 0.20, 1: 0.30})])
    assert avg["n_by"] == [2, 2] and abs(avg["mean"] - (0.075 + 0.03) / 2) < 1e-12
    rel = 100 * avg["mean"] / (((0.40 + 0.50) / 2 + (0.20 + 0.30) / 2) / 2)
    assert f"| {paired.fmt(avg, 100, sign=True)} | {rel:+.1f}% | {paired.fmt_p(avg['p'])} |" in table.split("## average over benchmarks")[1]
    assert "(n=2+2)" in paired.fmt(avg, 100, sign=True)
    assert (tmp_path / "compare_delta.png").stat().st_size > 1000 and (tmp_path / "compare.csv").exists()
    # beside the paper: its figure for the method and ours per env, with whether the CI excludes 0;
    # at 2 seeds the t interval (t_1 = 12.7) includes 0 where the percentile bootstrap did not
    sq = paired.paired({0: 0.20, 1: 0.36}, {0: 0.20, 1: 0.30})
    assert (f"| prover | {compare.PAPER['methods']['prover']} | alfworld {paired.fmt(d, 100, sign=True)}: CI includes 0 "
            f"(p {paired.fmt_p(d['p'])}, Holm {paired.fmt_p(d['p'])}); searchqa {paired.fmt(sq, 100, sign=True)}: CI includes 0 "
            f"(p {paired.fmt_p(sq['p'])}, Holm {paired.fmt_p(sq['p'])}) |") in table.split("## beside the paper")[1]
    assert "The rows have different seeds (grpo: 0, 1; prover: 0, 1, 2)" in table.split("## searchqa")[0]
    assert "The rows have different seeds" not in table.split("## searchqa")[1]
    # the summaries kept beside the report stand in for run directories lost with the machine: the
    # same table from them alone, and the CLI reuses them without a warm start or a training
    kept = sorted(p.name for p in (tmp_path / "summaries" / "compare").iterdir())
    assert kept == sorted(f"{e}-{m}-s{s}.json" for (e, m), fs in finals.items() for s in range(len(fs)))
    shutil.rmtree(tmp_path / "runs")
    assert compare.report(args, compare.plan(args)) == table
    cli = [sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--envs", "alfworld", "--methods", "grpo", "prover",
           "--iters", "2", "--eval-every", "25", "--eval-episodes", "0", "--out", str(tmp_path)]
    r = subprocess.run([*cli, "--seeds", "0", "1", "--eval-repeats", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "skipped (done)" in r.stdout + r.stderr and not (tmp_path / "runs").exists(), r.stderr[-500:]
    assert f"| prover | {paired.fmt(paired.summary([0.45, 0.60]), 100)} | {paired.fmt(d, 100, sign=True)} |" in r.stdout
    # --full on another env alone: the preset's ALFWorld cells do not apply there (no error), and a
    # report of nothing finished yet into a new folder is a table without plots
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--full", "--envs", "webshop",
                        "--methods", "grpo", "--seeds", "0", "--out", str(tmp_path / "new"), "--report-only"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and (tmp_path / "new" / "compare.md").exists(), r.stderr[-500:]
    # a kept summary from another protocol is refused with one line, before any set-up
    r = subprocess.run([*cli, "--seeds", "0", "--eval-repeats", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and not (tmp_path / "runs").exists()
    assert "alfworld-grpo-s0.json was made with eval_repeats=4 (this study: 2)" in r.stderr
    # a finished run made with another evaluation is refused, naming the run, before any warm start
    _hand_run(tmp_path / "runs" / "alfworld-grpo-s2", 0.5, cfg={"env": "alfworld", "method": "grpo", "seed": 2,
                                                               "eval_every": 25, "eval_episodes": 64, "eval_repeats": 4})
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--envs", "alfworld", "--methods", "grpo",
                        "--seeds", "2", "--iters", "2", "--eval-every", "25", "--eval-episodes", "0", "--eval-repeats", "4",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "alfworld-grpo-s2 was made with eval_episodes=64 (this study: 0)" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and not (tmp_path / "runs" / "alfworld-warmstart").exists()


def test_compare_leaves_a_seed_with_different_warm_starts_out_of_the_paired_difference(tmp_path):
    """A seed is paired when its runs loaded the same warm-start weights (their logs name folders
    whose weights hash alike), even if the update-0 readings differ (another machine's evaluation);
    seed 1's prover run loaded other weights, so the Δ pairs seeds 0 and 2 only and the table names
    seed 1; seed 2's runs name no warm start, and there equal update-0 readings decide."""
    import argparse
    import compare
    args = argparse.Namespace(envs=["alfworld"], methods=["grpo", "prover"], seeds=[0, 1, 2], iters=2, eval_every=25,
                              eval_episodes=0, eval_repeats=4, cell_seeds=[], jobs=2, out=str(tmp_path), extra=[],
                              warm_start="shared")
    for w, data in (("a", b"weights a"), ("a2", b"weights a"), ("b", b"weights b")):
        (tmp_path / w).mkdir()
        (tmp_path / w / "model.safetensors").write_bytes(data)
    finals = {"grpo": [0.40, 0.50, 0.45], "prover": [0.45, 0.30, 0.55]}
    folder = {("grpo", 0): "a", ("prover", 0): "a2", ("grpo", 1): "a", ("prover", 1): "b"}
    for m, fs in finals.items():
        for s, f in enumerate(fs):
            d = tmp_path / "runs" / f"alfworld-{m}-s{s}"
            _hand_run(d, f, init={("prover", 0): 0.31, ("prover", 1): 0.2}.get((m, s), 0.3),
                      cfg={"env": "alfworld", "method": m, "seed": s, "eval_every": 25, "eval_episodes": 0, "eval_repeats": 4})
            if (m, s) in folder:
                (d / "stdout.log").write_text(f"tiny policy: cached warm start at {tmp_path / folder[m, s]}\n")
    table = compare.report(args, compare.plan(args))
    d = paired.paired({0: 0.45, 2: 0.55}, {0: 0.40, 2: 0.45})
    assert d["n"] == 2 and f"| {paired.fmt(d, 100, sign=True)} |" in table
    assert f"| prover | {paired.fmt(paired.summary(finals['prover']), 100)} |" in table       # the cell keeps all 3
    assert "Not paired, left out of prover's Δ: seed 1 started from another warm start than GRPO's (update-0 held-out 20.0 vs 30.0)" in table
    assert table.count("Not paired") == 1


def test_credit_share_from_every_group_by_hand():
    """runlog.credit_share: token-weighted |A − A^GRPO| / |A^GRPO| over all groups; appended rows ignored."""
    import train
    g = [[_traj(0, ["", ""], ntok=2), _traj(1, ["", ""], ntok=1)], [_traj(2, [""], ntok=4)]]
    base = [[[0.5, 0.5], [-0.5, -0.5]], [[0.25]]]
    final = [[[0.5, 1.0], [-0.5, -0.5]], [[0.25]], [[9.0]]]          # +0.5 on one 2-token turn; a third, appended row
    assert runlog.credit_share(g + [[_traj(3, [""])]], base, final) == pytest.approx((0.5 * 2) / (0.5 * 2 * 2 + 0.5 * 2 + 0.25 * 4))
    assert runlog.credit_share(g, base, base) == 0.0
    grown = [g[0] + [_traj(4, [""])], g[1]]                               # a rollout added to group 0 (grpo-matched)
    assert runlog.credit_share(grown, base, [final[0] + [[7.0]], final[1]]) == runlog.credit_share(g, base, final)


def test_a_failing_credit_step_is_confined_to_its_group(tmp_path, monkeypatch):
    """infra/guard.py: a method that raises on one group: that group keeps its GRPO advantages, the
    others get the method's credit, errors.log holds the traceback; --strict re-raises."""
    from collections import Counter
    from types import SimpleNamespace
    import train

    def boom(groups, adv, run):
        for g, grp in enumerate(groups):
            run.agent.counter["tokens/verify"] += 10        # each group's verification, say
            if grp[0].group_id == 1:
                raise RuntimeError("bad reply")
            adv[g][0][0] += 1.0
        return {"boom/groups": len(groups)}
    groups = []
    for gid in range(3):
        t = _traj(0, ["", ""])
        t.group_id = gid
        groups.append([t])
    adv = [[[0.1, 0.1]] for _ in range(3)]
    from infra.guard import guarded_credit
    run = train.Run(train.Config(method="grpo"), SimpleNamespace(counter=Counter()), None, {}, [], None, str(tmp_path))
    lines = []
    st = guarded_credit(boom, run, groups, adv, 5, lines.append, strict=False)
    assert adv == [[[1.1, 0.1]], [[0.1, 0.1]], [[1.1, 0.1]]]
    assert st["credit/failed_groups"] == 1 and st["boom/groups"] == 2 and run.agent.counter["credit/errors"] == 1
    # the whole-batch attempt's 20 tokens (groups 0, 1) are void: not in tokens/verify, which holds
    # the retry's 30 (each group once), but in credit/retry_tokens
    assert run.agent.counter["tokens/verify"] == 30 and st["credit/retry_tokens"] == 20
    assert "RuntimeError: bad reply" in (tmp_path / "errors.log").read_text() and any("1 of 3 groups" in m for m in lines)
    with pytest.raises(RuntimeError):
        guarded_credit(boom, run, groups, [[[0.1, 0.1]] for _ in range(3)], 6, lines.append, strict=True)


def test_credit_lab_report_table_csv_and_plot_on_hand_made_runs(tmp_path, monkeypatch):
    """bench/credit_lab.py's report() over run directories as train.py leaves them: an unfinished run
    is left out, the `--mid-update` column is the paired Δ q_key at that update (hand computation,
    exact sign-flip p over 3 seeds = 2/8), the csv carries q_key_mid per run, and the plot is written."""
    import argparse
    import csv
    import json
    import credit_lab
    q = {("grpo", 0): [0.30, 0.40, 0.50], ("grpo", 1): [0.20, 0.30, 0.60], ("grpo", 2): [0.25, 0.35, 0.55],
         ("prover", 0): [0.32, 0.50, 0.50], ("prover", 1): [0.22, 0.34, 0.60], ("prover", 2): [0.27, 0.45, 0.50]}
    for (m, s), qs in q.items():
        extra = {t + 1: {"lab/q_key": v, **({"tokens/verify": 20, "prover/credited": 1} if m == "prover" else {})}
                 for t, v in enumerate(qs)}
        _hand_run(tmp_path / "credit_lab" / "runs" / f"keydoor-r4-{m}-s{s}", 0.5 + qs[-1] / 10, extra, step=3)
    unfinished = tmp_path / "credit_lab" / "runs" / "keydoor-r4-prover-s3"
    unfinished.mkdir()
    (unfinished / "metrics.jsonl").write_text(json.dumps({"step": 1, "lab/q_key": 0.9}) + "\n")
    args = argparse.Namespace(out=str(tmp_path), iters=3, mid_update=2, rooms=[4], methods=["grpo", "prover"],
                              versus=["grpo"], plot_methods=None, curve_rooms=0, name="lab", title="Credit lab",
                              eval_every=10, eval_repeats=1, extra=[])
    jobs = [(4, m, s) for s in range(4) for m in ("grpo", "prover")]
    table = credit_lab.report(args, jobs)
    row = next(line for line in table.splitlines() if line.startswith("| prover |")).split(" | ")
    header = next(line for line in table.splitlines() if line.startswith("| method |")).split(" | ")
    mid = row[header.index("Δ q_key vs GRPO at update 2 (after 1) (p)")]
    hand = ((0.50 - 0.40) + (0.34 - 0.30) + (0.45 - 0.35)) / 3
    # one method against GRPO: a family of one, so Holm's p is the raw p
    assert mid.startswith(f"{hand:+.4f} [") and "(n=3)" in mid and mid.endswith("(p 0.250, Holm 0.250)"), mid
    assert row[header.index("credited / update")] == "1.0" and row[header.index("verify tokens / credited")] == "20"
    with open(tmp_path / "lab.csv") as f:
        got = {(r["method"], int(r["seed"])): float(r["q_key_mid"]) for r in csv.DictReader(f)}
    assert got == {k: v[1] for k, v in q.items()}                        # seed 3 (unfinished) is not there
    assert (tmp_path / "lab.png").stat().st_size > 10_000 and (tmp_path / "lab.md").read_text().count("## rooms = 4") == 1
    # the kept summaries (q_key curves included) rebuild the same report once the run directories are
    # gone; a variant whose flags changed since its runs is refused, not reused
    csv_text = (tmp_path / "lab.csv").read_text()
    assert len(list((tmp_path / "summaries" / "credit_lab").iterdir())) == 6          # not the unfinished one
    shutil.rmtree(tmp_path / "credit_lab")
    assert credit_lab.report(args, jobs) == table and (tmp_path / "lab.csv").read_text() == csv_text
    # a seed whose methods started from different warm starts is left out of the whole report, by name
    for m, init in (("grpo", 0.3), ("prover", 0.2)):
        _hand_run(tmp_path / "credit_lab" / "runs" / f"keydoor-r4-{m}-s4", 0.9, {t: {"lab/q_key": 0.9} for t in (1, 2, 3)},
                  step=3, init=init)
    more = credit_lab.report(args, jobs + [(4, "grpo", 4), (4, "prover", 4)])
    assert "Not paired, left out: seed 4 started from different warm starts (update-0 held-out grpo 30.0, prover 20.0)" in more
    assert [x for x in more.splitlines() if x and not x.startswith("Not paired")] == [x for x in table.splitlines() if x]
    monkeypatch.setitem(credit_lab.ARGS, "prover", ["--method", "prover", "--lam", "2"])
    with pytest.raises(SystemExit, match=r"keydoor-r4-prover-s0.json was made with flags="):
        credit_lab.result((4, "prover", 0), args)
    monkeypatch.undo()
    # the study's own CSV is its record once run directories and summaries are both gone (lab runs
    # made before summaries/ existed): the same table, said so in one line, and the same CSV
    shutil.rmtree(tmp_path / "credit_lab")
    shutil.rmtree(tmp_path / "summaries")
    again = credit_lab.report(args, jobs)
    assert "6 of the 6 runs are read from this study's own record, lab.csv" in again
    assert [x for x in again.splitlines() if x and "own record" not in x] == [x for x in table.splitlines() if x]
    assert (tmp_path / "lab.csv").read_text() == csv_text
    # ... and it wins over a kept summary of the same job that records another run (summaries are
    # shared by every study; one may be another study's re-run): a summary of seed 0, other figures
    _hand_run(tmp_path / "credit_lab" / "runs" / "keydoor-r4-grpo-s0", 0.95, {t: {"lab/q_key": 0.99} for t in (1, 2, 3)}, step=3)
    assert credit_lab.result((4, "grpo", 0), args)["q_key_final"] == 0.99        # the summary is kept...
    shutil.rmtree(tmp_path / "credit_lab")
    assert credit_lab.report(args, jobs) == again                                 # ...but the record is read


def test_beside_the_paper_calls_a_difference_resolved_only_when_ci_and_exact_p_agree():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import compare
    ten = paired.paired({s: 0.5 + 0.01 * (s + 1) for s in range(10)}, {s: 0.5 for s in range(10)})   # all 10 up
    four = paired.paired({s: 0.5 - 0.01 * (s + 1) for s in range(4)}, {s: 0.5 for s in range(4)})    # all 4 down
    assert ten["lo"] > 0 and ten["p"] < 0.05 and four["hi"] < 0 and four["p"] >= 0.05
    rows = "\n".join(compare.beside_the_paper(["prover"], ["alfworld", "webshop"],
                                              {("alfworld", "prover"): ten, ("webshop", "prover"): four}))
    assert f"alfworld {paired.fmt(ten, 100, sign=True)}: CI excludes 0, better (p {paired.fmt_p(ten['p'])}, Holm" in rows
    assert f"webshop {paired.fmt(four, 100, sign=True)}: CI excludes 0 (worse) but Holm p ≥ 0.05 at n=4: not resolved" in rows
    # the verdict reads the Holm-adjusted p of its table's family: the same raw p, adjusted above 0.05
    ten["p_holm"] = 0.2
    rows = "\n".join(compare.beside_the_paper(["prover"], ["alfworld"], {("alfworld", "prover"): ten}))
    assert "CI excludes 0 (better) but Holm p ≥ 0.05 at n=10: not resolved" in rows and "Holm 0.200" in rows


def test_compare_tables_adjust_p_within_each_table_and_divide_costs_on_the_same_seeds(tmp_path):
    """Holm within one env's table (its methods' Δ vs GRPO) and within the average table; a cost
    ratio divides by GRPO's mean over the method's own seeds, not over all of GRPO's."""
    import argparse
    import compare
    res = {}
    for s in range(4):
        res["alfworld", "grpo", s] = {"policy_tokens_per_update": 100.0 * (s + 1)}    # 100, 200, 300, 400
    for s in (0, 1):
        res["alfworld", "spo", s] = {"policy_tokens_per_update": 300.0}
    # same seeds: 300 / mean(100, 200) = 2.00×, not 300 / mean(100..400) = 1.20×
    assert compare.ratio(res, "alfworld", "spo", "policy_tokens_per_update") == "300 (2.00×)"
    assert compare.ratio(res, "alfworld", "spo", "policy_tokens_per_update", pct=True) == "300 (+100.0%)"
    args = argparse.Namespace(envs=["alfworld", "searchqa"], methods=["grpo", "prover", "gigpo"], seeds=[0, 1, 2, 3, 4], iters=2,
                              eval_every=25, eval_episodes=0, eval_repeats=4, cell_seeds=[], jobs=2, out=str(tmp_path),
                              extra=[], warm_start="shared")
    finals = {"grpo": [0.40, 0.50, 0.45, 0.42, 0.48], "prover": [0.46, 0.57, 0.50, 0.49, 0.53], "gigpo": [0.41, 0.49, 0.47, 0.40, 0.49]}
    for e in args.envs:
        for m, fs in finals.items():
            for s, f in enumerate(fs):
                _hand_run(tmp_path / "runs" / f"{e}-{m}-s{s}", f,
                          cfg={"env": e, "method": m, "seed": s, "eval_every": 25, "eval_episodes": 0, "eval_repeats": 4})
    table = compare.report(args, compare.plan(args))
    da = paired.paired(dict(enumerate(finals["prover"])), dict(enumerate(finals["grpo"])))
    db = paired.paired(dict(enumerate(finals["gigpo"])), dict(enumerate(finals["grpo"])))
    ha, hb = paired.holm([da["p"], db["p"]])
    assert ha == min(1.0, 2 * da["p"]) and da["p"] == 1 / 16          # all 5 up: 2/32; Holm doubles it
    alf = table.split("## alfworld")[1].split("## searchqa")[0]
    assert f"| {paired.fmt_p(da['p'])} | {paired.fmt_p(ha)} |" in alf and f"| {paired.fmt_p(db['p'])} | {paired.fmt_p(hb)} |" in alf
    avg = table.split("## average over benchmarks")[1].split("The paper")[0]
    sa = paired.stratified([da, da])
    sb = paired.stratified([db, db])
    assert f"| {paired.fmt_p(sa['p'])} | {paired.fmt_p(paired.holm([sa['p'], sb['p']])[0])} |" in avg
    assert "p (Holm, this table)" in avg


@pytest.mark.slow
def test_paired_intervals_hold_their_level_at_small_n():
    """The CI that paired.summary reports (Student t) covers the true mean ~95% at n = 4 on synthetic
    normal differences, where the percentile bootstrap covers ~79% (measured here, not assumed);
    the stratified Welch interval covers ~95% with two benchmarks of 4 and 3 seeds and unequal spread;
    t_quantile matches the tabulated t values."""
    import random
    for df, t in [(1, 12.706), (3, 3.182), (5, 2.571), (9, 2.262), (30, 2.042)]:
        assert paired.t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    rng = random.Random(7)
    reps, mu = 2000, 0.3
    hit_t = hit_b = hit_s = 0
    for r in range(reps):
        d = [rng.gauss(mu, 1.0) for _ in range(4)]
        s = paired.summary(d)
        hit_t += s["lo"] <= mu <= s["hi"]
        lo, hi = paired.bootstrap_ci(d, n_boot=200, seed=r)
        hit_b += lo <= mu <= hi
        a, b = [rng.gauss(0.1, 0.5) for _ in range(4)], [rng.gauss(-0.2, 2.0) for _ in range(3)]
        st = paired.stratified([{"d": a}, {"d": b}])
        hit_s += st["lo"] <= (0.1 - 0.2) / 2 <= st["hi"]
    se = (0.95 * 0.05 / reps) ** 0.5                   # ≈ 0.005
    assert abs(hit_t / reps - 0.95) < 4 * se, hit_t / reps
    assert hit_b / reps < 0.86, hit_b / reps               # the reason the t interval replaced it
    assert hit_s / reps > 0.93, hit_s / reps               # Welch–Satterthwaite is slightly conservative


def test_holm_adjustment_by_hand():
    """Holm on 4 p-values: sorted 0.01, 0.02, 0.03, 0.5 → 0.04, 0.06, 0.06 (monotone), 0.5; input order kept."""
    assert paired.holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert paired.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0]) and paired.holm([]) == []


def test_compare_env_flags_are_one_envs_regime_and_part_of_its_protocol(tmp_path):
    """bench/compare.py --env-flags: an env's regime flags follow the common ones in that env's runs
    only, and are in its protocol (a run made without them is another protocol); a flag for an env
    outside --envs is one error line."""
    import argparse
    import compare
    args = argparse.Namespace(envs=["alfworld", "searchqa"], methods=["grpo"], seeds=[0], iters=2, eval_every=25,
                              eval_episodes=0, eval_repeats=4, cell_seeds=[], jobs=1, out=str(tmp_path),
                              extra=["--lr", "2e-4"], warm_start="shared", env_extra={"alfworld": ["--max-steps", "30"]})
    assert compare.extra_for(args, "alfworld") == ["--lr", "2e-4", "--max-steps", "30"]
    assert compare.extra_for(args, "searchqa") == ["--lr", "2e-4"]
    a, q = (compare.protocol((e, "grpo", 0), args) for e in ("alfworld", "searchqa"))
    assert a["extra"][-2:] == ["--max-steps", "30"] and q["extra"] == ["--lr", "2e-4"]
    import subprocess
    p = subprocess.run([sys.executable, "bench/compare.py", "--envs", "alfworld", "--methods", "grpo", "--env-flags",
                        "webshop=--max-steps 8", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--env-flags" in p.stderr and "Traceback" not in p.stderr
    # the report's command, copied, is the command that ran: a regime with spaces stays one argument
    argv = ["--envs", "alfworld", "--methods", "grpo", "--seeds", "0", "--env-flags", "alfworld=--max-steps 30",
            "--out", str(tmp_path / "cmd"), "--report-only"]
    p = subprocess.run([sys.executable, "bench/compare.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    import re
    import shlex
    cmd = re.search(r"^Command: `(.*)`$", (tmp_path / "cmd" / "compare.md").read_text(), re.M).group(1)
    assert shlex.split(cmd) == ["python", "bench/compare.py", *argv]
