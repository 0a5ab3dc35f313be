"""bench/labs.py — the guided labs of LABS.md: run each lab's command as a reader would, time it, read
its figures, and keep LABS.md's measured blocks true to the files they come from.

    python bench/labs.py run spread              # one lab: run its command, time it, record it, re-render LABS.md
    python bench/labs.py run --all               # every lab in order (the sitting's machine should be idle)
    python bench/labs.py render                  # rewrite LABS.md's generated blocks from results/
    python bench/labs.py check                   # exit 1 when LABS.md is not what render would write

Each lab (LABS below) is one shell command that writes under runs/labs/ (git-ignored), the figures
read from what it wrote, and a "what we measured" text that quotes those figures and the committed
study the lab is a small slice of (results/STUDY/*.md, *.csv). `run` executes the command exactly as
LABS.md shows it (bash, from the repository root), records seconds, date, commit, the machine's load
before it started and the figures in results/labs.json, then re-renders LABS.md. The commit is
recorded only when the tracked files are that commit's; a lab run on uncommitted code cites none. LABS.md carries
two generated blocks per lab, the command and the measured text, between markers

    <!-- lab:KEY:command -->  …  <!-- /lab -->         <!-- lab:KEY:measured -->  …  <!-- /lab -->

and everything else in it is prose. tests/test_labs.py runs every command at a reduced size (`quick`:
substitutions of flags, outputs under a temporary folder) and checks that LABS.md is what render
writes, and that every recorded measurement is of the command LABS.md shows.

Leaves out: a lab's wall time on other machines (the record says what this one was doing).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import os
import re
import subprocess
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LABS_MD = os.path.join(ROOT, "LABS.md")
RECORD = os.path.join(ROOT, "results", "labs.json")
OUT = "runs/labs"                 # every lab writes under this folder (relative to the repository root)

SMALL_GAP = "rooms=4,p_key=0.6,p_nokey=0.4"
LAM3 = "prover-plus:lam=3,negative_credit=true,verify_k=4"


# ---------------------------------------------------------------------------------------------
# Reading what the runs and the studies wrote
# ---------------------------------------------------------------------------------------------
def jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def read_csv(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def metric_mean(run: str, key: str) -> float:
    """Mean of `key` over the rows of run/metrics.jsonl that log it (nan when none do)."""
    xs = [r[key] for r in jsonl(os.path.join(ROOT, run, "metrics.jsonl")) if r.get(key) is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def md_rows(file: str, section: str = "") -> tuple[list[str], list[list[str]]]:
    """(header cells, body rows) of the first markdown table of results/FILE (FILE = STUDY/NAME.md),
    under `## section` when given (tests/test_claims.py reads the results tables through this too)."""
    text = open(os.path.join(ROOT, "results", file)).read()
    if section:
        m = re.search(rf"^## {re.escape(section)}\s*$", text, re.M)
        if not m:
            raise KeyError(f"{file}: no section '## {section}'")
        text = text[m.end():]
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| "))
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split(" | ")])
    return rows[0], rows[2:]


def md_cell(file: str, row: str, column: str, section: str = "", first_cols: int = 1) -> str:
    """A cell of a results/STUDY/*.md table: the row whose first `first_cols` cells join (with ' / ') to
    `row`, in the column whose header starts with `column`; under `## section` when given."""
    header, body = md_rows(file, section)
    j = next(i for i, h in enumerate(header) if h.startswith(column))
    hits = [r for r in body if " / ".join(r[:first_cols]) == row]
    if len(hits) != 1:
        raise KeyError(f"{file}: {len(hits)} rows named {row!r}")
    return hits[0][j]


def mean_of(rows: list[dict], key: str) -> tuple[float, int]:
    xs = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return (sum(xs) / len(xs) if xs else float("nan")), len(xs)


def phase_auc(cell: str, mult: float, method: str) -> tuple[float, int]:
    """Mean AUC and n of the committed phase screen (results/credit_phase/credit_phase.csv) at one cell, lr ×, method."""
    rows = [r for r in read_csv(os.path.join(ROOT, "results", "credit_phase", "credit_phase.csv"))
            if r["cell"] == cell and float(r["lr_mult"]) == mult and r["method"] == method]
    return mean_of(rows, "auc")


# ---------------------------------------------------------------------------------------------
# The labs: what each one's outputs say
# ---------------------------------------------------------------------------------------------
def spread_figures(out: str) -> dict:
    """From the GRPO run's records.jsonl (≤ 4 groups per update): how one outcome lands on every turn."""
    turns = mass = pivot_mass = 0.0
    trajs = key_turns = key_neg = skip_turns = skip_pos = groups = flat = 0
    for rec in jsonl(os.path.join(ROOT, out, "spread", "records.jsonl")):
        for g in rec.get("groups") or []:
            groups += 1
            flat += all(abs(a) < 1e-12 for t in g["trajs"] for a in t["A"])
            for t in g["trajs"]:
                trajs += 1
                turns += t["n"]
                mass += sum(abs(a) for a in t["A"])
                for turn, kind in (t.get("truth") or {}).items():
                    a = t["A"][int(turn) - t["s0"]] if 0 <= int(turn) - t["s0"] < len(t["A"]) else None
                    if a is None:
                        continue
                    pivot_mass += abs(a)
                    if kind == "key":
                        key_turns += 1
                        key_neg += a < 0
                    elif kind == "nokey":
                        skip_turns += 1
                        skip_pos += a > 0
    return {"trajectories": trajs, "groups": groups, "turns_per_rollout": turns / max(trajs, 1),
            "pivot_share": pivot_mass / mass if mass else float("nan"),
            "key_turns": key_turns, "key_negative": key_neg / max(key_turns, 1),
            "skip_turns": skip_turns, "skip_positive": skip_pos / max(skip_turns, 1),
            "flat_groups": flat / max(groups, 1)}


def spread_text(f: dict) -> str:
    return (f"Over the {f['trajectories']} recorded rollouts ({f['groups']} groups), a rollout is "
            f"{f['turns_per_rollout']:.1f} turns long and the decision turn (take or leave the key) carries "
            f"{f['pivot_share']:.0%} of the advantage mass |A|: the rest is spread over turns that did not matter. "
            f"{f['key_negative']:.0%} of the {f['key_turns']} turns that took the key got a negative advantage "
            f"(the door stayed shut anyway: p_key = 0.8), and {f['skip_positive']:.0%} of the {f['skip_turns']} turns that "
            f"left it got a positive one (the door opened anyway). {f['flat_groups']:.0%} of the groups had one outcome "
            f"for all 8 rollouts and taught nothing (A = 0).")


def judge_figures(out: str) -> dict:
    f = {}
    for judge in ("builtin", "random"):
        run = os.path.join(out, f"judge-{judge}")
        rows = list(jsonl(os.path.join(ROOT, run, "metrics.jsonl")))
        f[judge] = {"hit": metric_mean(run, "lab/judge_hit"), "accept": metric_mean(run, "prover/accept_rate"),
                    "delta": metric_mean(run, "prover/delta_mean"),
                    "proposals": sum(r.get("prover/proposals") or 0 for r in rows),
                    "credited": sum(r.get("prover/credited") or 0 for r in rows)}
    return f


def judge_text(f: dict) -> str:
    b, r = f["builtin"], f["random"]
    ref_b = md_cell("credit_lab/credit_lab.md", "prover", "judge hit", section="rooms = 8")
    ref_r = md_cell("credit_lab/credit_lab.md", "prover-random", "judge hit", section="rooms = 8")
    acc_b = md_cell("credit_lab/credit_lab.md", "prover", "accept", section="rooms = 8")
    acc_r = md_cell("credit_lab/credit_lab.md", "prover-random", "accept", section="rooms = 8")
    return (f"This run: the built-in judge's segments contain the key turn in {b['hit']:.0%} of its {b['proposals']} "
            f"proposals, the random judge's in {r['hit']:.0%} of {r['proposals']}; verification accepted (Δ̂ > 0) {b['accept']:.0%} against {r['accept']:.0%}, "
            f"mean Δ̂ {b['delta']:+.2f} against {r['delta']:+.2f}. The committed credit lab (rooms 8, 10 seeds × 40 updates, "
            f"`results/credit_lab/credit_lab.md`): hit {ref_b} against {ref_r}, accept {acc_b} against {acc_r}.")


def verify_figures(out: str) -> dict:
    rows = read_csv(os.path.join(ROOT, out, "verify", "verify_noise.csv"))
    f = {}
    for r in rows:
        k = f"{r['segment']}-K{r['K']}-{'crn' if r['crn'] == 'True' else 'ind'}"
        f[k] = {"true": float(r["true"]), "mean": float(r["mean"]), "sd": float(r["sd"]), "credited": float(r["credited"]),
                "mc_se": float(r["mc_se"]), "n": int(r["n"])}
    return f


def verify_text(f: dict) -> str:
    p = lambda k, crn="ind": f[f"pivotal-K{k}-{crn}"]          # noqa: E731
    z = lambda k, crn="ind": f[f"neutral-K{k}-{crn}"]          # noqa: E731
    zmax = max(abs(r["mean"] - r["true"]) / r["mc_se"] for r in f.values() if r["mc_se"] > 0)
    return (f"Pivotal segment (A_seg = {p(8)['true']:.2f}): SD(Δ̂) {p(2)['sd']:.2f} / {p(8)['sd']:.2f} / {p(32)['sd']:.2f} "
            f"at K = 2 / 8 / 32 (it halves when K quadruples), credited {p(2)['credited']:.0%} / {p(8)['credited']:.0%} / "
            f"{p(32)['credited']:.0%} of the time; the means sit within {zmax:.1f} Monte Carlo SE of A_seg in every row "
            f"(unbiased). Neutral segment (A_seg = 0): falsely credited {z(2)['credited']:.0%} / {z(8)['credited']:.0%} / "
            f"{z(32)['credited']:.0%} of the time — more K makes ties at 0 rarer, so false credit under Δ̂ > 0 climbs "
            f"toward one half. With CRN the "
            f"neutral segment's two sides share every door draw: SD {z(8, 'crn')['sd']:.2f}, false credit "
            f"{z(8, 'crn')['credited']:.0%} at K = 8; the pivotal one's SD at K = 8 goes {p(8)['sd']:.2f} → "
            f"{p(8, 'crn')['sd']:.2f}. ({p(8)['n']} estimates per row.)")


def lr_figures(out: str) -> dict:
    f = {}
    for r in read_csv(os.path.join(ROOT, out, "lr", "lr.csv")):
        f[f"{r['method']}-x{float(r['lr_mult']):g}"] = {"auc": float(r["auc"]), "init": float(r["p_key_init"]),
                                                        "final": float(r["p_key_final"])}
    return f


def lr_text(f: dict) -> str:
    g1, g10, o1, o10 = (f[k] for k in ("grpo-x1", "grpo-x10", "oracle-x1", "oracle-x10"))
    ref = {k: phase_auc(SMALL_GAP, m, meth) for k, m, meth in
           (("g1", 1, "grpo"), ("g3", 3, "grpo"), ("g10", 10, "grpo"), ("o1", 1, "oracle"), ("o10", 10, "oracle"))}
    s = (f"Seed 0, 6 updates, p_key_held from {g1['init']:.2f}: GRPO ends at {g1['final']:.2f} (×1) and {g10['final']:.2f} (×10), "
         f"exact credit at {o1['final']:.2f} (×1) and {o10['final']:.2f} (×10); AUC {g1['auc']:.2f} / {g10['auc']:.2f} / "
         f"{o1['auc']:.2f} / {o10['auc']:.2f}. The committed screen (`results/credit_phase/credit_phase.csv`, 15 updates): GRPO's AUC "
         f"{ref['g1'][0]:.3f} at ×1 (n={ref['g1'][1]}), {ref['g3'][0]:.3f} at ×3 (n={ref['g3'][1]}), {ref['g10'][0]:.3f} at ×10 "
         f"(n={ref['g10'][1]}); exact credit {ref['o10'][0]:.3f} at ×10 (n={ref['o10'][1]})")
    if ref["o1"][1]:
        s += f" and {ref['o1'][0]:.3f} at ×1 (n={ref['o1'][1]})"
    step = "more" if g10["auc"] > o1["auc"] else "less"
    return (s + f". In this run the tenfold step moved p_key_held {step} than perfect credit at the default step "
            f"(GRPO ×10 AUC {g10['auc']:.2f} against exact credit ×1 {o1['auc']:.2f}), and at either step exact credit "
            + ("beat" if o1["auc"] > g1["auc"] and o10["auc"] > g10["auc"] else "did not always beat") + " GRPO.")


def ladder_figures(out: str) -> dict:
    rows = read_csv(os.path.join(ROOT, out, "lr", "ladder.csv"))
    return {r["method"]: {"auc": float(r["auc"]), "tokens_ratio": float(r["tokens_ratio"] or "nan"),
                          "speed": float(r["speed_ratio"]) if r["speed_ratio"] else None} for r in rows}


def ladder_text(f: dict) -> str:
    regime = f"{SMALL_GAP}@10"
    g, o = f["grpo"]["auc"], f["oracle"]["auc"]
    parts = []
    for m in ("prover", LAM3):
        if m in f:
            e = (f[m]["auc"] - g) / (o - g) if abs(o - g) > 1e-9 else float("nan")
            parts.append(f"{m} {f[m]['auc']:.3f} (E = {e:.2f} on this one seed, {f[m]['tokens_ratio']:.2f}× GRPO's tokens)")
    cell = lambda m, c: md_cell("credit_ladder/credit_ladder.md", f"{regime} / {m}", c, first_cols=2)      # noqa: E731
    return (f"Seed 0, 6 updates: AUC GRPO {g:.3f}, exact credit {o:.3f}, " + ", ".join(parts) + ". The committed ladder "
            f"(`results/credit_ladder/credit_ladder.md`, 10 paired seeds × 15 updates): exact credit Δ AUC {cell('oracle', 'Δ AUC')} "
            f"at speed {cell('oracle', 'speed')}; the paper's ProVer Δ AUC {cell('prover', 'Δ AUC')}; prover-plus "
            f"(λ = 1) credit efficiency {cell('prover-plus', 'credit efficiency')}; "
            f"`{LAM3}` credit efficiency {cell(LAM3, 'credit efficiency')} at {cell(LAM3, 'tokens').split()[0]}× GRPO's "
            f"tokens (mean of per-seed ratios).")


def horizon_figures(out: str) -> dict:
    rows = read_csv(os.path.join(ROOT, out, "horizon", "credit_gradient.csv"))
    return {f"{r['config']}/{r['method']}": {"cosine": float(r["cosine"]), "tokens": float(r["tokens"])} for r in rows}


HORIZON_ROOMS = (4, 8, 12)


def horizon_text(f: dict) -> str:
    def row(m):
        return " / ".join(f"{f[f'rooms={n}/{m}']['cosine']:.2f}" for n in HORIZON_ROOMS)
    tok = " / ".join(f"{f[f'rooms={n}/grpo']['tokens']:.0f}" for n in HORIZON_ROOMS)
    lo, hi = HORIZON_ROOMS[0], HORIZON_ROOMS[-1]
    drop = {m: f[f"rooms={lo}/{m}"]["cosine"] - f[f"rooms={hi}/{m}"]["cosine"] for m in ("grpo", "prover-plus")}
    lab_rooms = (4, 8, 16)
    return (f"Cosine to the exact-credit gradient at rooms {' / '.join(map(str, HORIZON_ROOMS))}: GRPO {row('grpo')}, "
            f"prover-plus {row('prover-plus')} (from rooms {lo} to {hi} GRPO's falls by {drop['grpo']:.2f}, "
            f"prover-plus's by {drop['prover-plus']:.2f}); rollout tokens per batch {tok} (GRPO). The committed credit lab "
            f"(`results/credit_lab/credit_lab.md`, 10 seeds × 40 updates): prover-plus's Δ q_key over GRPO at update 10 is "
            + " / ".join(md_cell("credit_lab/credit_lab.md", "prover-plus", "Δ q_key vs GRPO at update 10", section=f"rooms = {n}")
                         for n in lab_rooms) + f" at rooms {' / '.join(map(str, lab_rooms))}.")


def alfworld_figures(out: str) -> dict:
    rows = [r for r in jsonl(os.path.join(ROOT, out, "alfworld", "metrics.jsonl")) if r.get("eval/success") is not None]
    return {"eval": [[r["step"], r["eval/success"]] for r in rows],
            "episodes": rows[0].get("eval/episodes") if rows else None}


def alfworld_text(f: dict) -> str:
    ev = ", ".join(f"{s}: {v:.3f}" for s, v in f["eval"])
    p0 = f["eval"][0][1]
    se = math.sqrt(p0 * (1 - p0) / f["episodes"])          # binomial SE of one evaluation at the first reading
    g = [learning_gain(s) for s in (0, 1, 2)]
    return (f"Held-out success of this run ({f['episodes']} episodes per evaluation; update: success) {ev}. One "
            f"evaluation of {f['episodes']} episodes has a standard error of about {se:.2f}: compare the change with it, "
            f"and read the trend over more updates. The committed 30-minute runs (`results/learning/learning_alfworld.md`, 3 seeds, "
            f"re-evaluated 4 × 140 episodes): gains {', '.join(g)}.")


BENCH_METHODS = ("grpo", "grpo-matched", "gigpo")
BENCH_REF = "vine:vine_k=2,vine_turns=0"          # the committed study's reference
BENCH_STUDY = os.path.join("results", "benchmark_gradient", "benchmark_gradient.csv")


def benchmark_figures(out: str) -> dict:
    rows = read_csv(os.path.join(ROOT, out, "benchmark", "benchmark_gradient.csv"))
    return {r["method"]: {k: float(r[k]) for k in ("snr", "snr_se", "tokens")} for r in rows}


def benchmark_text(f: dict) -> str:
    import benchmark_gradient as bg
    one = lambda m: f"{m} {f[m]['snr']:.3f} ± {f[m]['snr_se']:.3f} ({f[m]['tokens']:.0f} tokens)"  # noqa: E731
    st = {(r["env"], os.path.basename(r["policy"]), r["method"]): r for r in read_csv(os.path.join(ROOT, BENCH_STUDY))}
    parts = [f"{e} {p} ({g['batches']} batches): GRPO {float(g['snr']):.4f} ± {float(g['snr_se']):.4f}"
             + (f", GiGPO / GRPO {bg.claim(q, 'snr_vs_grpo', q['ratio_resolved'])}" if q else "")
             + (f", exact per-turn advantages / GRPO {bg.claim(x, 'exact_vs_grpo', x['exact_resolved'])}" if x else "")
             for e, p in sorted({k[:2] for k in st}) for g, q, x in [(st[(e, p, "grpo")], st.get((e, p, "gigpo")), st.get((e, p, BENCH_REF)))]]
    return (f"Signal-to-noise of one batch's gradient (4 tasks × G = 8, ± jackknife SE): {', '.join(one(m) for m in BENCH_METHODS)}. "
            f"A batch whose snr is s is s/(1 + s) signal (8 batches resolve it only roughly); a method that doubles s is worth two GRPO batches. "
            f"The committed study (`results/benchmark_gradient/benchmark_gradient.md`; ratios on the same batches, 95% BCa "
            f"intervals, 'unresolved' where an snr they rest on is within 2 SE of 0): " + "; ".join(parts) + "."
            + ("" if any(k[0] == "alfworld" and "[" not in k[1] for k in st) else " ALFWorld's default-regime rows are not in it yet (the earlier table divided "
               "by GRPO over other batches: results/archive/benchmark_gradient_unpaired/)."))


def learning_gain(seed: int) -> str:
    """The re-evaluated gain of one seed in results/learning/learning_alfworld.md (its second table)."""
    text = open(os.path.join(ROOT, "results", "learning", "learning_alfworld.md")).read()
    m = re.search(rf"^\| {seed} \| [0-9.]+ \| [0-9.]+ \([^)]*\) \| ([+-][0-9.]+ ± [0-9.]+) \|", text, re.M)
    if not m:
        raise KeyError(f"learning_alfworld.md: no re-evaluated row for seed {seed}")
    return m.group(1)


@dataclasses.dataclass
class Lab:
    key: str
    command: str                                   # exactly as LABS.md shows it, run by bash from the repository root
    quick: list[tuple[str, str]]                   # the test's reduced run: (text, replacement) on the command
    figures: Callable[[str], dict]                 # OUT-relative outputs → figures
    text: Callable[[dict], str]                    # figures (+ committed results) → the measured block's prose

    def quick_command(self, out: str, cache: str) -> str:
        cmd = self.command
        for a, b in self.quick:
            if a not in cmd:
                raise ValueError(f"lab {self.key}: quick substitution {a!r} is not in its command")
            cmd = cmd.replace(a, b)
        return cmd.replace("{CACHE}", cache).replace(OUT, out)


# The test's reduced runs: the tiny policy at its smallest, one update, small batches (figures may
# then be nan where nothing happened, e.g. no mixed group; the test checks the command and the parsing)
PHASE_TINY = "--tiny-hidden 64 --tiny-layers 2 --bc-episodes 20 --bc-steps 30 --group-size 4 --tasks-per-iter 2"
TRAIN_TINY = PHASE_TINY + " --cache-dir {CACHE}"

LABS = [
    Lab("spread",
        f"python train.py --env keydoor --method grpo --iters 5 --eval-every 0 --out {OUT}/spread",
        [("--iters 5", f"--iters 1 --group-size 4 --tasks-per-iter 2 {TRAIN_TINY}")],
        spread_figures, spread_text),
    Lab("judge",
        f"python train.py --env keydoor --method prover --iters 6 --eval-every 0 --threads 1 --out {OUT}/judge-builtin & "
        f"python train.py --env keydoor --method prover --judge random --iters 6 --eval-every 0 --threads 1 "
        f"--out {OUT}/judge-random & wait",
        [("--iters 6", f"--iters 1 --group-size 4 --tasks-per-iter 2 --verify-k 2 {TRAIN_TINY}")],
        judge_figures, judge_text),
    Lab("verify",
        f"python bench/verify_noise.py --out {OUT}/verify",
        [("--out", "--n 4 --out")],
        verify_figures, verify_text),
    Lab("lr",
        f"python bench/credit_phase.py --cells {SMALL_GAP} --lr-mult 1 10 --methods grpo oracle --seeds 0 --iters 6 "
        f"--out {OUT}/lr --name lr",
        [("--lr-mult 1 10", "--lr-mult 10"), ("--iters 6", "--iters 2"), ("--name lr", f"--name lr -- {PHASE_TINY}")],
        lr_figures, lr_text),
    Lab("ladder",
        f"python bench/credit_ladder.py --regimes {SMALL_GAP}@10 --methods grpo oracle prover {LAM3} --seeds 0 --iters 6 "
        f"--out {OUT}/lr --name ladder",
        [("--iters 6", "--iters 2"), ("--name ladder", f"--name ladder -- {PHASE_TINY}")],
        ladder_figures, ladder_text),
    Lab("horizon",
        "python bench/credit_gradient.py --rooms " + " ".join(map(str, HORIZON_ROOMS)) +
        f" --methods grpo prover-plus --repeats 3 --ref-batches 2 --out {OUT}/horizon/credit_gradient",
        [("--rooms 4 8 12", "--rooms 4"), ("--repeats 3 --ref-batches 2", "--repeats 1 --ref-batches 1 --tasks 1 --group 2")],
        horizon_figures, horizon_text),
    Lab("alfworld",
        f"python train.py --env alfworld --method grpo --iters 10 --eval-every 5 --eval-episodes 64 --out {OUT}/alfworld",
        [("--iters 10 --eval-every 5 --eval-episodes 64",
          f"--iters 1 --eval-every 1 --eval-episodes 4 --group-size 4 --tasks-per-iter 2 --max-steps 8 {TRAIN_TINY}")],
        alfworld_figures, alfworld_text),
    Lab("benchmark",
        "python bench/benchmark_gradient.py --env alfworld --policy results/compare/warmstarts/tiny-alfworld-0355c899bead "
        f"--methods {' '.join(BENCH_METHODS)} --repeats 8 --ref-batches 4 --ref-k 4 --ref-turns 2 --cache {OUT}/benchmark/cache "
        f"--out {OUT}/benchmark/benchmark_gradient",
        [("--repeats 8 --ref-batches 4", "--repeats 3 --ref-batches 3 --tasks 1 --group 2")],
        benchmark_figures, benchmark_text),
    Lab("premise",
        f"python bench/premise.py --env alfworld --groups 4 --name alfworld-default --out {OUT}/premise",
        [("--groups 4", "--groups 1 --tasks 2 --max-batches 4")],
        lambda out: __import__("premise").lab_figures(os.path.join(ROOT, out, "premise", "alfworld-default.csv")),
        lambda f: __import__("premise").lab_text(f)),
]
BY_KEY = {lab.key: lab for lab in LABS}


# ---------------------------------------------------------------------------------------------
# Record and render
# ---------------------------------------------------------------------------------------------
def load_record() -> dict:
    if not os.path.exists(RECORD):
        return {}
    with open(RECORD) as f:
        return json.load(f)


def commit() -> str | None:
    """HEAD's short hash when the tracked files are HEAD's; None when they differ (the lab ran code no
    commit holds, so no commit is cited) or outside a git checkout."""
    r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    out = r.stdout.strip()
    return out if r.returncode == 0 and out and not out.endswith("-dirty") else None


def run_lab(lab: Lab, note: str = "") -> dict:
    """Run the command as LABS.md shows it; a failed command raises (nothing is recorded)."""
    load = os.getloadavg()[0]
    t0 = time.time()
    print(f"lab {lab.key}: {lab.command}", flush=True)
    rc = subprocess.call(["bash", "-c", lab.command], cwd=ROOT)
    secs = time.time() - t0
    if rc != 0:
        raise SystemExit(f"labs: lab {lab.key} failed (rc={rc}); nothing recorded")
    rec = {"command": lab.command, "seconds": round(secs, 1), "date": datetime.date.today().isoformat(),
           "commit": commit(), "load_before": round(load, 2), "note": note, "figures": lab.figures(OUT)}
    record = load_record()
    record[lab.key] = rec
    os.makedirs(os.path.dirname(RECORD), exist_ok=True)
    with open(RECORD + ".tmp", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(RECORD + ".tmp", RECORD)
    return rec


def measured_block(lab: Lab, rec: dict | None) -> str:
    if rec is None or rec.get("command") != lab.command:
        return "*Not measured yet with this command: `python bench/labs.py run " + lab.key + "`.*"
    mins = rec["seconds"] / 60
    # the 1-min load average at the start includes the tail of a lab that just ended (`run --all`):
    # it is shown, not read as "something else was running"; the note says what else was
    where = (rec.get("note") or "no other job noted") + (f", load {rec['load_before']:.1f} at start"
                                                           if rec.get("load_before") is not None else "")
    at = f"commit `{rec['commit']}`, " if rec.get("commit") else ""
    return (f"**We measured** ({rec['date']}, {at}{mins:.1f} min, {where}; "
            f"`results/labs.json`): {lab.text(rec['figures'])}")


def command_block(lab: Lab) -> str:
    return "```bash\n" + lab.command.replace(" & ", " &\n") + "\n```"


# a block's body holds no HTML comment, so an empty block (opening marker, newline, closing marker)
# is matched too and never reaches into the next block
MARK = re.compile(r"(<!-- lab:([a-z]+):(command|measured) -->\n)((?:(?!<!-- ).)*?)\n?(<!-- /lab -->)", re.S)


def render(text: str, record: dict) -> str:
    def fill(m):
        lab = BY_KEY.get(m.group(2))
        if lab is None:
            raise KeyError(f"LABS.md names an unknown lab {m.group(2)!r}")
        body = command_block(lab) if m.group(3) == "command" else measured_block(lab, record.get(lab.key))
        return m.group(1) + body + "\n" + m.group(5)
    return MARK.sub(fill, text)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="run, time and render the guided labs of LABS.md")
    p.add_argument("action", choices=["run", "render", "check"])
    p.add_argument("labs", nargs="*", help="lab keys for run: " + ", ".join(BY_KEY))
    p.add_argument("--all", action="store_true", help="run every lab, in order")
    p.add_argument("--note", default="", help="what else the machine was doing (recorded; empty = alone on it)")
    args = p.parse_args(argv)
    unknown = [k for k in args.labs if k not in BY_KEY]
    if unknown:
        raise SystemExit(f"labs: unknown lab(s) {', '.join(unknown)}; choose from {', '.join(BY_KEY)}")
    text = open(LABS_MD).read()
    if args.action == "check":
        if render(text, load_record()) != text:
            raise SystemExit("labs: LABS.md differs from `python bench/labs.py render`")
        print("LABS.md is up to date")
        return
    if args.action == "run":
        keys = list(BY_KEY) if args.all else args.labs
        if not keys:
            raise SystemExit("labs: name the lab(s) to run, or --all")
        for k in keys:
            rec = run_lab(BY_KEY[k], args.note)
            print(f"lab {k}: {rec['seconds'] / 60:.1f} min — {BY_KEY[k].text(rec['figures'])}", flush=True)
    new = render(text, load_record())
    if new != text:
        with open(LABS_MD, "w") as f:
            f.write(new)
        print("LABS.md re-rendered")


if __name__ == "__main__":
    main()
