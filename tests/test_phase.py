"""bench/credit_phase.py: cells are checked before anything runs, the speed and AUC columns are the
hand computations, and a real two-update screen (GRPO and the exact-credit arm on a 3-room
keydoor) runs, resumes without re-running, and reports."""
import argparse
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import credit_phase  # noqa: E402


def test_cells_split_into_env_options_and_train_flags_and_bad_ones_fail_in_one_line():
    assert credit_phase.parse_cell("rooms=4,p_nokey=0.4,group_size=4") == (["rooms=4", "p_nokey=0.4"], ["--group-size", "4"])
    for bad, msg in (("rooms4", "not KEY=VALUE"), ("doors=3", "neither a keydoor option"), ("lr=1", "neither a keydoor option")):
        with pytest.raises(SystemExit, match=msg):
            credit_phase.parse_cell(bad)
    with pytest.raises(SystemExit, match="cell 'rooms=1'"):              # keydoor's own range check
        credit_phase.check_cells(["rooms=1"])
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "credit_phase.py"), "--cells", "rooms=4,p_key=2",
                        "--out", "/nonexistent/never"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "p_key" in r.stderr


def test_speed_is_updates_to_grpo_final_over_grpos_own_and_auc_the_mean():
    g = {"p_curve": [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]}
    fast = {"p_curve": [(1, 0.5), (2, 0.85), (3, 0.9), (4, 0.9)]}
    never = {"p_curve": [(1, 0.5), (2, 0.5), (3, 0.6), (4, 0.7)]}
    res = {("c", 1.0, "grpo", 0): g, ("c", 1.0, "oracle", 0): fast, ("c", 1.0, "grpo", 1): g, ("c", 1.0, "oracle", 1): never}
    assert credit_phase.speed(res, "c", 1.0, "oracle", iters=4) == {0: 2 / 4, 1: 5 / 4}    # never: iters + 1
    assert credit_phase.auc(fast["p_curve"]) == pytest.approx((0.5 + 0.85 + 0.9 + 0.9) / 4)


def test_half_way_is_fixed_by_warm_start_and_exact_credit_and_counts_censored_runs():
    """half-way target = p_init + ½(oracle's final mean − p_init): oracle's finals 0.9 and 0.7 → 0.8,
    so from 0.5 the target is 0.65; the x of the curve is 'before update x', i.e. x − 1 updates."""
    g = {"p_curve": [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]}
    fast = {"p_curve": [(1, 0.5), (2, 0.85), (3, 0.9), (4, 0.9)]}
    never = {"p_curve": [(1, 0.5), (2, 0.5), (3, 0.6), (4, 0.7)]}
    res = {("c", 1.0, "grpo", 0): g, ("c", 1.0, "oracle", 0): fast, ("c", 1.0, "grpo", 1): never, ("c", 1.0, "oracle", 1): never}
    assert credit_phase.halfway(res, "c", 1.0, "grpo") == {0: 2, 1: 3}
    assert credit_phase.halfway(res, "c", 1.0, "oracle") == {0: 1, 1: 3}
    assert credit_phase.fmt_halfway({0: 2, 1: None, 2: None}) == "never (1 of 3)"      # censored sort last
    assert credit_phase.fmt_halfway({0: 2, 1: 4, 2: None}) == "4 (2 of 3)"
    assert credit_phase.halfway({("c", 1.0, "grpo", 0): g}, "c", 1.0, "grpo") == {}      # no exact-credit runs: no target


@pytest.mark.slow
def test_a_real_screen_runs_resumes_and_reports(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "credit_phase.py"), "--cells", "rooms=3,group_size=2,tasks_per_iter=2",
           "--seeds", "0", "--iters", "2", "--out", str(tmp_path), "--", "--bc-episodes", "20", "--bc-steps", "20"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-800:]
    md = (tmp_path / "credit_phase" / "credit_phase.md").read_text()     # the report beside the runs: --name credit_phase/credit_phase
    rows = [ln for ln in md.splitlines() if ln.startswith("| rooms=3")]
    assert [ln.split(" | ")[2] for ln in rows[:2]] == ["grpo", "oracle"]
    assert (tmp_path / "credit_phase" / "credit_phase.png").stat().st_size > 5000
    assert len(list((tmp_path / "summaries" / "credit_phase").iterdir())) == 2
    import shutil
    shutil.rmtree(tmp_path / "credit_phase" / "runs")          # the kept summaries stand in for the runs
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r2.returncode == 0 and r2.stdout.count("skipped (done)") + r2.stderr.count("skipped (done)") == 2
    assert (tmp_path / "credit_phase" / "credit_phase.md").read_text().split("Command:")[1] == md.split("Command:")[1]
    # the ladder on the same study reuses the screen's GRPO and oracle runs and trains only ProVer
    lad = [sys.executable, os.path.join(ROOT, "bench", "credit_ladder.py"), "--regimes", "rooms=3,group_size=2,tasks_per_iter=2@1",
           "--methods", "grpo", "oracle", "prover:verify_crn=true,verify_k=2", "--seeds", "0", "--iters", "2", "--out", str(tmp_path),
           "--", "--bc-episodes", "20", "--bc-steps", "20"]
    r3 = subprocess.run(lad, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r3.returncode == 0, r3.stderr[-800:]
    assert r3.stdout.count("skipped (done)") + r3.stderr.count("skipped (done)") == 2
    import csv
    rows = list(csv.DictReader(open(tmp_path / "credit_ladder" / "credit_ladder.csv")))
    assert [r["method"] for r in rows] == ["grpo", "oracle", "prover:verify_crn=true,verify_k=2"]
    import json                                     # the arm's own settings reached its run
    cfg = json.load(open(tmp_path / "credit_phase" / "runs" / "rooms3-group_size2-tasks_per_iter2-lr1-prover-verify_crntrue-verify_k2-s0" / "config.json"))
    assert cfg["method"] == "prover" and cfg["verify_crn"] is True and cfg["verify_k"] == 2
    assert {"regime", "method", "seed", "auc", "updates_to_grpo_final", "tokens_per_update"} <= set(rows[0])
    assert float(rows[0]["tokens_ratio"]) == 1.0 and float(rows[2]["tokens_per_update"]) > 0
    assert (tmp_path / "credit_ladder" / "credit_ladder.png").stat().st_size > 5000


def test_credit_efficiency_and_the_half_test_are_the_hand_computations():
    import credit_ladder
    g = {0: 0.5, 1: 0.6, 2: 0.4}
    o = {0: 0.9, 1: 0.8, 2: 0.8}                   # oracle's gains 0.4, 0.2, 0.4 (mean 1/3)
    m = {0: 0.7, 1: 0.6, 2: 0.6}                   # the method's 0.2, 0, 0.2 (mean 2/15)
    e = credit_ladder.efficiency(m, g, o)
    assert e["mean"] == pytest.approx((0.4 / 3) / (1.0 / 3)) and e["n"] == 3 and e["lo"] <= e["mean"] <= e["hi"]
    h = credit_ladder.half_test(m, g, o)           # d = gain − ½ oracle's gain = 0, −0.1, 0
    assert h["mean"] == pytest.approx(-0.1 / 3) and h["n"] == 3
    assert h["p"] == 1.0          # one-sided (E > ½): a mean below ½ never rejects
    up = credit_ladder.half_test({0: 0.8, 1: 0.8, 2: 0.7}, g, o)      # d = 0.1, 0.1, 0.1: every flip lowers the sum
    assert up["p"] == pytest.approx(1 / 8)      # exact one-sided: only the observed pattern reaches it (two-sided 2/8)
    assert credit_ladder.parse_regime("rooms=4,p_nokey=0.4@10") == ("rooms=4,p_nokey=0.4", 10.0)
    assert credit_ladder.parse_regime("rooms=4") == ("rooms=4", 1.0)
    with pytest.raises(SystemExit, match="multiplier"):
        credit_ladder.parse_regime("rooms=4@fast")


def test_arms_carry_their_own_settings_and_a_revised_arm_refuses_its_old_summaries(tmp_path):
    """METHOD:KEY=VALUE arms: flags for train.py (booleans as --x / --no-x), checked in one line;
    a plain method keeps its run name; the oracle's protocol records its credit revision, so a
    summary kept from an earlier revision is refused rather than mixed in."""
    assert credit_phase.parse_arm("prover-plus:verify_crn=true,verify_k=4") == ("prover-plus", ["--verify-crn", "--verify-k", "4"])
    assert credit_phase.parse_arm("prover:negative_credit=false") == ("prover", ["--no-negative-credit"])
    assert credit_phase.parse_arm("grpo") == ("grpo", [])
    assert credit_phase.name_of(("rooms=4", 10.0, "grpo", 3)) == "rooms4-lr10-grpo-s3"
    for bad, msg in (("prover:verify_crn=yes", "true or false"), ("prover:seed=1", "not KEY=VALUE"),
                     ("prover:verify_k=0", "verify-k"), ("nomethod", "not a train.py method")):
        with pytest.raises(SystemExit, match=msg):
            credit_phase.check_arms([bad], "credit_phase")
    args = argparse.Namespace(out=str(tmp_path), iters=15, eval_every=15, extra=[])
    job = ("rooms=4", 10.0, "oracle", 0)
    assert credit_phase.protocol(job, args)["credit_rev"] == 2
    assert "credit_rev" not in credit_phase.protocol(("rooms=4", 10.0, "grpo", 0), args)
    import runs  # noqa: E402  (bench/runs.py)
    old = credit_phase.protocol(job, args)
    del old["credit_rev"]                            # what a revision-1 run recorded
    runs.save_summary(credit_phase.kept(job, args), old, {"p_curve": [[1, 0.5]]})
    with pytest.raises(SystemExit, match="credit_rev"):
        credit_phase.result(job, args)


def test_credit_parts_tests_are_one_sided_paired_and_named():
    """bench/credit_parts.py's family: half:ARM tests E > ½ as mean of (m − g) − ½(o − g) > 0 and
    beats:A>B the paired AUC_A − AUC_B > 0, each with the exact one-sided sign-flip p."""
    import credit_parts
    g = {s: 0.5 for s in range(6)}
    o = {s: 0.9 for s in range(6)}
    m = {s: 0.5 + 0.3 + 0.01 * s for s in range(6)}          # 0.3 + ... of a 0.4 gain: E ≈ 0.8
    jo = {s: 0.5 + 0.1 for s in range(6)}
    t = credit_parts.run_tests(["half:pv", "beats:pv>jo", "beats:jo>pv"], {"grpo": g, "oracle": o, "pv": m, "jo": jo})
    assert t["half:pv"]["n"] == 6 and t["half:pv"]["mean"] == pytest.approx(0.1 + 0.025)
    assert t["half:pv"]["p"] == pytest.approx(1 / 64)             # all 6 differences positive: 1 of 2^6 patterns
    assert t["beats:pv>jo"]["p"] == pytest.approx(1 / 64) and t["beats:jo>pv"]["p"] == pytest.approx(1.0)
    with pytest.raises(SystemExit, match="half:ARM or beats"):
        credit_parts.run_tests(["nope:pv"], {})


@pytest.mark.slow
def test_operating_window_measures_selection_and_verification_at_a_warm_start(tmp_path):
    """bench/credit_window.py on one regime and seed (its committed warm start): the judge's hit rate
    from the truth labels, and P(credited) rising with K for the segments that hold the key turn
    (their exact advantage is positive) while a worthless control turn's stays below ½."""
    import csv as _csv
    import credit_window
    out = str(tmp_path / "w")
    credit_window.main(["--regimes", "rooms=4,p_key=0.55,p_nokey=0.45,expert_neutral=0.6", "--seeds", "0", "--batches", "1",
                        "--out", out])
    (row,) = list(_csv.DictReader(open(out + ".csv", newline="")))
    assert int(row["proposals"]) > 0 and 0.0 <= float(row["hit_rate"]) <= 1.0
    assert float(row["a_pivotal"]) > 0 and abs(float(row["a_control"])) < 0.05
    piv = [float(row[f"cred_pivotal_k{k}"]) for k in credit_window.KS]
    assert piv == sorted(piv) and piv[-1] > piv[0]
    assert all(float(row[f"cred_control_k{k}"]) < 0.5 for k in credit_window.KS)
    assert os.path.exists(out + ".png") and "| rooms=4,p_key=0.55" in open(out + ".md").read()
