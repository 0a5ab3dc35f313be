"""bench/premise_confirm.py: the preregistered family of the premise study, on hand-made summaries.

    python -m pytest -q tests/test_premise_confirm.py

Summaries are written as compare.py writes them (protocol + summary); the report must wait while a
benchmark lacks seeds, compute the five one-sided tests and Holm once all are in (exact p 1/1024 when
all ten paired differences are positive), leave a seed whose arms started from different warm starts
out, refuse a summary made under another protocol in one line, and write runs.csv with the columns
the study promises, quote the gradient ladder only at the runs' warm start and at its resolution, and
pair the positive control with the study's GRPO runs by seed and weights.
Also: compare.py's prover-plus-l3k4 arm parses to λ = 3, K = 4.
"""
import csv
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import paired  # noqa: E402
import premise_confirm as pc  # noqa: E402


def write(out, env, arm, seed, final, accept=float("nan"), warm="w0", extra=None, iters=50, success=None):
    d = out / "summaries" / "compare"
    d.mkdir(parents=True, exist_ok=True)
    proto = {"env": env, "method": arm, "judge": None, "seed": seed, "eval_every": 25, "eval_episodes": 0,
             "eval_repeats": 4, "iters": iters, "extra": pc.REGIME[env] if extra is None else extra}
    summ = {"updates": 50, "init_success": 0.1, "final_success": final if success is None else success, "final_score": final,
            "policy_tokens_per_update": 1000.0 + (100 if "prover" in arm else 0), "rollout_tokens_per_update": 1000.0,
            "verify_tokens_per_update": 100.0 if "prover" in arm else 0.0, "judge_tokens_per_update": 50.0 if arm == "prover" else 0.0,
            "accept_rate": accept, "env_steps_per_update": 200.0, "warm_start": warm}
    (d / f"{env}-{arm}-s{seed}.json").write_text(json.dumps({"protocol": proto, "summary": summ}))


def fill(out, envs=pc.ENVS, seeds=pc.SEEDS):
    """ProVer = GRPO + 2 points on every seed, random = GRPO, the other arms = GRPO − 1."""
    for e in envs:
        for s in seeds:
            g = 0.3 + 0.01 * (s - 30)
            for arm, v in {"grpo": g, "prover": g + 0.02, "prover-random": g, "grpo-matched": g - 0.01,
                           "gigpo": g - 0.01, "prover-plus-l3k4": g - 0.01}.items():
                write(out, e, arm, s, v, accept=0.5 if "prover" in arm else float("nan"))


def test_the_family_waits_for_every_seed_then_tests_one_sided_with_holm(tmp_path):
    fill(tmp_path, envs=["searchqa"], seeds=range(30, 39))            # 9 of 10 seeds of one benchmark
    text = pc.report(pc.load(str(tmp_path)))
    assert text.count("| waiting (") == 5 and "waiting (54 of 60 runs)" in text and "Holm" in text
    fill(tmp_path)                                                     # every run
    res = pc.load(str(tmp_path))
    rows = pc.family(res)
    for r in rows[1:4]:                            # ten positive differences: exact one-sided p = 1/2^10
        assert r["d"]["n"] == 10 and r["d"]["mean"] == pytest.approx(2.0) and r["d"]["p"] == pytest.approx(1 / 1024)
    assert rows[0]["d"]["mean"] == pytest.approx(2.0) and rows[0]["d"]["p"] < 1e-3
    assert [r["p_holm"] for r in rows] == pytest.approx(paired.holm([r["d"]["p"] for r in rows]))
    assert all(r["p_holm"] < 0.05 for r in rows)
    text = pc.report(res)
    assert "Runs finished: **180 of 180**" in text and "waiting" not in text
    assert "| prover-random | " in text and "+2.4%" in text and "| prover | " in text


def test_a_null_effect_is_not_decided_and_a_negative_one_is_not_significant_one_sided(tmp_path):
    fill(tmp_path)
    for s in pc.SEEDS:                             # SearchQA: ProVer 2 points *below* GRPO on every seed
        write(tmp_path, "searchqa", "prover", s, 0.3 + 0.01 * (s - 30) - 0.02)
    rows = pc.family(pc.load(str(tmp_path)))
    assert rows[3]["d"]["mean"] == pytest.approx(-2.0) and rows[3]["d"]["p"] == pytest.approx(1.0)
    row4 = [line for line in pc.report(pc.load(str(tmp_path))).splitlines() if line.startswith("| 4.")][0]
    assert row4.endswith("| no |") and "-2.0 [" in row4


def test_a_seed_from_another_warm_start_leaves_the_difference(tmp_path):
    fill(tmp_path)
    write(tmp_path, "alfworld", "prover", 35, 0.9, warm="other")
    d = pc.diff(pc.load(str(tmp_path)), "alfworld", "prover", "grpo", "greater")
    assert d["n"] == 9 and 35 not in d["seeds"]
    assert pc.family(pc.load(str(tmp_path)))[1]["d"] is None          # 9 paired seeds: the test waits


@pytest.mark.parametrize("kw, word", [({"iters": 40}, "iters=40"), ({"extra": ["--margin", "0.125"]}, "extra="),
                                      ({"seed": 25}, "s25")])
def test_a_run_outside_the_plan_is_refused_in_one_line(tmp_path, kw, word):
    fill(tmp_path, envs=["alfworld"], seeds=[30])
    seed = kw.pop("seed", 30)
    write(tmp_path, "alfworld", "gigpo", seed, 0.3, **kw)
    with pytest.raises(SystemExit, match=word):
        pc.load(str(tmp_path))


def test_runs_csv_has_one_row_per_run_with_the_promised_columns(tmp_path):
    fill(tmp_path, envs=["webshop"], seeds=[30, 31])
    write(tmp_path, "webshop", "grpo", 30, 0.3, success=0.01)      # WebShop's metric is the score
    pc.write_csv(str(tmp_path / "runs.csv"), pc.load(str(tmp_path)))
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert len(rows) == 12 and {"env", "method", "seed", "final", "policy_tokens", "judge_tokens", "accept"} <= set(rows[0])
    assert {r["seed"] for r in rows} == {"30", "31"} and rows[0]["method"] == "grpo"
    assert (rows[0]["final"], rows[0]["final_success"]) == ("0.3", "0.01")


def test_compares_prover_plus_l3k4_arm_is_lambda_3_k_4():
    import config
    sys.path.insert(0, ROOT)
    import compare
    cfg = config.parse_args(["--env", "alfworld", *compare.METHOD_ARGS["prover-plus-l3k4"]])
    assert (cfg.method, cfg.lam, cfg.verify_k) == ("prover-plus", 3.0, 4)


def test_the_answer_waits_for_the_family_and_follows_holm(tmp_path):
    fill(tmp_path, envs=["alfworld", "webshop"])
    assert pc.answer(pc.load(str(tmp_path))) is None                   # SearchQA missing: nothing said
    fill(tmp_path)
    text = pc.answer(pc.load(str(tmp_path)))
    assert text.startswith("ProVer beats GRPO on the average and on ALFWorld, WebShop, SearchQA") and "beats random segments" in text
    for e in pc.ENVS:                              # no effect anywhere: ProVer = GRPO = random on every seed
        for s in pc.SEEDS:
            write(tmp_path, e, "prover", s, 0.3 + 0.01 * (s - 30))
    text = pc.answer(pc.load(str(tmp_path)))
    assert text.startswith("ProVer is not shown to beat GRPO") and "is not shown to beat random segments" in text
    short = pc.answer(pc.load(str(tmp_path)), short=True)
    assert short.startswith("ProVer is not shown to beat GRPO (one-sided Δ points, Holm p: average ") and len(short) < len(text)
    assert "[" in text and "[" not in short                  # the CIs in the full sentence only


def test_report_says_which_screen_targets_each_regime_misses(tmp_path):
    """The report carries the screen's choice per benchmark (premise.choose over the committed studies):
    each chosen regime is named with the PLAN's regime and, where it meets not every target, which."""
    import premise
    screen = premise.choose(premise.load_studies())
    assert len(screen) == 3
    text = pc.report(pc.load(str(tmp_path)), screen=screen)
    line = [ln for ln in text.splitlines() if ln.startswith("The regimes against the screen's targets")][0]
    for e, ln in zip(("alfworld", "webshop", "searchqa"), screen):
        assert f"**{e}: `" in ln and ln[2:] in line
        met = "meets every target at the warm start and after 10 GRPO updates" in ln
        assert met or "failing: " in ln
    assert "The regimes against" not in pc.report(pc.load(str(tmp_path)))


def test_the_ladder_beside_the_family_is_the_runs_warm_start_at_its_resolution(tmp_path):
    """The ladder line reads the committed csv's rows in the env's regime only when their policy's weights
    are the ones the runs started from (sha1, 12 hex), quotes each ratio with its BCa interval, and says
    'unresolved' for every ratio once GRPO's snr is within 2 SE of 0."""
    from runs import weights_id
    rows = [r for r in csv.DictReader(open(pc.LADDER, newline="")) if r["env"] == "alfworld"
            and r["policy"].endswith(f" [{pc.ladder_regime('alfworld')}]")]
    assert pc.ladder_regime("alfworld") == "max_steps=30,temperature=0.7" and len(rows) == 6
    pol = rows[0]["policy"].partition(" [")[0]
    weights = weights_id(os.path.join(ROOT, pol))
    assert weights == "79df9c312ba3"                                            # the pinned warm start's
    path = tmp_path / "ladder.csv"

    def save(rs):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rs)
    save(rows)
    fill(tmp_path, envs=["alfworld"])
    assert pc.ladder_line(pc.load(str(tmp_path)), "alfworld", str(path)) is None      # runs from weights "w0"
    for s in pc.SEEDS:
        for arm in pc.ARMS:
            write(tmp_path, "alfworld", arm, s, 0.3, warm=weights)
    res = pc.load(str(tmp_path))
    line = pc.ladder_line(res, "alfworld", str(path))
    by = {r["method"]: r for r in rows}
    p = by["prover"]
    assert f"prover {float(p['snr_vs_grpo']):.2f}× [{float(p['snr_vs_grpo_lo']):.2f}, {float(p['snr_vs_grpo_hi']):.2f}]" in line
    assert f"{by['grpo']['batches']} batches" in line and "unresolved" not in line.split("): GRPO's snr")[1]
    by["grpo"]["snr_resolved"] = "False"
    save(by.values())
    line = pc.ladder_line(res, "alfworld", str(path))
    tail = line.split("): GRPO's snr")[1]                              # 4 arms and exact credit, no ratio
    assert tail.count("unresolved") == 5 and "×" not in tail
    assert pc.ladder_line(res, "webshop", str(path)) is None


def test_the_positive_control_pairs_with_the_studys_grpo_by_seed_and_weights(tmp_path):
    """GRPO at lr ×2 − the study's GRPO, per seed from the same weights: +3 points on every seed gives
    mean +3.0 and the exact two-sided p 2/2^10; a seed whose control started elsewhere is left out; a
    control summary made without the control's flags is refused in one line."""
    study, ctl = tmp_path / "study", tmp_path / "control"
    fill(study, envs=["alfworld"])
    res = pc.load(str(study))
    assert pc.control_line(res, str(ctl)) is None                              # nothing run yet
    flags = pc.CONTROL_FLAGS + pc.REGIME["alfworld"]
    for s in pc.SEEDS:
        write(ctl, "alfworld", "grpo", s, 0.3 + 0.01 * (s - 30) + 0.03, extra=flags, warm="w0" if s < 39 else "w1")
    line = pc.control_line(res, str(ctl))
    assert f"`{' '.join(pc.CONTROL_FLAGS)}`" in line and "GRPO on alfworld" in line
    assert "+3.0 [+3.0, +3.0] (n=9)" in line and f"p {paired.fmt_p(2 / 2 ** 9)}" in line, line
    write(ctl, "alfworld", "grpo", 30, 0.5, extra=pc.REGIME["alfworld"])
    with pytest.raises(SystemExit, match="not a run of the positive control"):
        pc.control_line(res, str(ctl))
