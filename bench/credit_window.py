"""bench/credit_window.py — ProVer's operating window in keydoor: per regime, whether exact credit
beats GRPO at all, how often the judge's pick holds the pivotal turn, and whether verification
can tell such a segment from a worthless one — measured at the regime's warm start, no training.

    python bench/credit_window.py                        # the default regimes (door gap × horizon × distractors × neutral detours)
    python bench/credit_window.py --regimes rooms=4,p_key=0.55,p_nokey=0.45,expert_neutral=0.6 --seeds 0 1 2

Per regime (a bench/credit_phase.py cell of keydoor options) and seed, at the warm start of that
cell and seed (train.py's, cached under results/warmstarts/):
  1. `--batches` batches of the trainer's rollouts (tasks × G), prover-plus's built-in judge on every
     mixed group (ProVer's selection step exactly as training runs it)
  2. selection: hit rate = share of the proposals whose segment holds the examined success's key
     turn (the env's truth labels, never shown to judge or policy)
  3. verification: the exact V^π before and after each proposed segment (lab/oracle.py), and the
     probability that ProVer credits it, P(Δ̂ > 0), Δ̂ = mean of K Bernoulli(V_post) − mean of K
     Bernoulli(V_pre) (independent sides: an exact binomial sum), averaged over the proposals that
     hold the key turn, over the others and over a control (a random turn of the same success that is
     not the key turn), for each K; discrimination = P(cred | pivotal) − P(cred | control).
     CRN is left out: the joint law of paired continuations needs the sampler, not the values
  4. exact credit's gain where the phase screen ran the cell (results/credit_phase/credit_phase.csv,
     at GRPO's best learning rate by AUC): oracle's mean speed × GRPO and the seeds ≥ 2× faster
Reading it: ProVer can work where (1) exact credit is clearly faster, (2) the hit rate is high or
(3) verification discriminates, i.e. P(credited | pivotal) − P(credited | other) is well above 0 at
an affordable K. The mean exact segment advantage of each kind is beside them: verification must
resolve an effect of that size with K outcomes per side.
Writes results/credit_window/credit_window.{md,csv,png}. Leaves out: CRN (above); trained policies
(the window is read at the warm start, where a run's first updates are decided).
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

REGIMES = ["rooms=4", "rooms=4,p_key=0.6,p_nokey=0.4", "rooms=4,p_key=0.55,p_nokey=0.45", "rooms=8,p_key=0.6,p_nokey=0.4",
           "rooms=12,p_key=0.6,p_nokey=0.4", "rooms=4,p_key=0.6,p_nokey=0.4,distractors=4",
           "rooms=4,p_key=0.55,p_nokey=0.45,expert_neutral=0.3", "rooms=4,p_key=0.55,p_nokey=0.45,expert_neutral=0.6",
           "rooms=8,p_key=0.6,p_nokey=0.4,expert_neutral=0.6"]
KS = [1, 4, 8, 16]
COLUMNS = ["regime", "seed", "proposals", "hit_rate", "a_pivotal", "a_other", "a_control", "oracle_speed", "oracle_speed_lo",
           "oracle_speed_hi", "oracle_fast_seeds", "oracle_clearly_faster"] + \
          [f"{k}_k{K}" for K in KS for k in ("cred_pivotal", "cred_other", "cred_control")]


def p_credit(v_pre: float, v_post: float, K: int) -> float:
    """P(mean of K Bernoulli(v_post) − mean of K Bernoulli(v_pre) > 0), independent sides."""
    from scipy.stats import binom
    a = binom.pmf(range(K + 1), K, v_post)
    cb = binom.cdf(range(K + 1), K, v_pre)           # P(pre successes ≤ b)
    return float(sum(a[i] * cb[i - 1] for i in range(1, K + 1)))


def phase_speed(cell: str, path: str) -> dict:
    """Exact credit's speed in the phase screen at GRPO's best multiplier by AUC: {"speed": mean of
    the seeds' oracle updates × GRPO's, "lo"/"hi": its 95% t CI, "fast": 'k of n' seeds ≤ 0.5,
    "clearly": mean ≤ 0.5 and the CI's upper end below 1 (≥ 2× faster on average, and faster at
    all beyond doubt)}; {} without oracle runs of the cell."""
    import paired
    if not os.path.exists(path):
        return {}
    rows = [r for r in csv.DictReader(open(path, newline="")) if r["cell"] == cell]
    auc: dict = {}
    for r in rows:
        if r["method"] == "grpo":
            auc.setdefault(r["lr_mult"], []).append(float(r["auc"]))
    if not auc:
        return {}
    best = max(auc, key=lambda m: sum(auc[m]) / len(auc[m]))
    sp = [float(r["speed_ratio"]) for r in rows if r["lr_mult"] == best and r["method"] == "oracle" and r["speed_ratio"]]
    if not sp:
        return {}
    m = paired.summary(sp)
    lo, hi = m.get("lo", float("nan")), m.get("hi", float("nan"))
    return {"speed": f"{m['mean']:.2f}", "lo": f"{lo:.2f}", "hi": f"{hi:.2f}", "fast": f"{sum(x <= 0.5 for x in sp)} of {len(sp)}",
            "clearly": str(m["mean"] <= 0.5 and hi < 1.0)}


def measure(cell: str, seed: int, batches: int, out_dir: str, cache: str) -> list[dict]:
    """One dict per proposal: hit, exact V before / after the segment."""
    import credit_gradient as cg
    import config
    import grpo
    import train
    from lab import ladder
    from methods import prover_options
    from rollout import rollout_groups
    cfg = config.parse_args(["--env", "keydoor", *cg.cell_argv(cell), "--method", "prover-plus", "--seed", str(seed),
                             "--cache-dir", cache, "--out", out_dir, "--threads", "1"])
    config.validate(cfg)
    tr = train.setup(cfg, lambda *a, **k: None)
    run = tr.run
    orc = ladder.make_oracle(run)
    exact = ladder.exact_estimator(orc)
    seen: list = []

    def estimate(*a, **k):
        v = exact(*a, **k)
        seen.append((v.sr_pre, v.sr_post))
        return v

    props = []
    rng = random.Random(seed)
    for b in range(batches):
        tasks = [hash((seed, b, k, 0x3D0)) % 10**6 for k in range(cfg.tasks_per_iter)]
        groups = rollout_groups(run.agent, tr.train_envs, tasks, cfg.group_size, cfg.temperature, seed=hash((seed, b, 0x5EED)) & 0x7FFFFFFF)
        adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
        run.step, run.proposals, seen[:] = b, [], []
        prover_options.plus_credit(groups, adv, run, estimate=estimate)
        assert len(seen) == len(run.proposals)        # one exact verification per proposal, in order
        for (g, sid, start, end, _d, _a), (pre, post) in zip(run.proposals, seen):
            turns = groups[g][sid].turns
            hit = any(start <= t <= end for t, tn in enumerate(turns) if tn.truth == "key")
            others = [t for t in range(len(turns) - 1) if turns[t].truth != "key"]
            c = rng.choice(others) if others else None       # a control: one worthless turn of the same success
            ctrl = (orc.values([turns[c].state])[0], orc.turn_q(turns[c].state, turns[c].action)) if c is not None else None
            props.append({"hit": hit, "pre": pre, "post": post, "control": ctrl})
    return props


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--regimes", nargs="+", default=REGIMES)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batches", type=int, default=4, help="rollout batches per regime and seed")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "credit_window", "credit_window"))
    ap.add_argument("--cache-dir", default=os.path.join(ROOT, "results", "warmstarts"))
    args = ap.parse_args(argv)
    import credit_phase
    credit_phase.check_cells(args.regimes)
    from tqdm import tqdm
    done = {}
    if os.path.exists(args.out + ".csv"):            # resumable: finished (regime, seed) rows are kept
        done = {(r["regime"], int(r["seed"])): r for r in csv.DictReader(open(args.out + ".csv", newline=""))}
    rows = []
    phase_csv = os.path.join(ROOT, "results", "credit_phase", "credit_phase.csv")
    for cell in args.regimes:
        for seed in tqdm(args.seeds, desc=cell):
            if (cell, seed) in done:
                rows.append(done[(cell, seed)])
                continue
            props = measure(cell, seed, args.batches, tempfile.mkdtemp(prefix="credit_window-"), args.cache_dir)
            piv = [p for p in props if p["hit"]]
            oth = [p for p in props if not p["hit"]]
            ctl = [{"pre": p["control"][0], "post": p["control"][1]} for p in props if p["control"]]
            row = {"regime": cell, "seed": seed, "proposals": len(props),
                   "hit_rate": f"{len(piv) / len(props):.4f}" if props else "",
                   "a_pivotal": f"{sum(p['post'] - p['pre'] for p in piv) / len(piv):.4f}" if piv else "",
                   "a_other": f"{sum(p['post'] - p['pre'] for p in oth) / len(oth):.4f}" if oth else "",
                   "a_control": f"{sum(p['post'] - p['pre'] for p in ctl) / len(ctl):.4f}" if ctl else ""}
            for K in KS:
                for name, ps in (("cred_pivotal", piv), ("cred_other", oth), ("cred_control", ctl)):
                    row[f"{name}_k{K}"] = f"{sum(p_credit(p['pre'], p['post'], K) for p in ps) / len(ps):.4f}" if ps else ""
            rows.append(row)
            write(args, rows)
    write(args, rows)
    print(open(args.out + ".md").read())


def mean_of(rows: list[dict], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if r.get(key) not in ("", None)]
    return sum(vals) / len(vals) if vals else None


def write(args, rows: list[dict]) -> None:
    """The csv and md from the measured rows; exact credit's speed is read from the phase screen's
    csv here, for every row (so a resumed study's old rows follow it too)."""
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    phase_csv = os.path.join(ROOT, "results", "credit_phase", "credit_phase.csv")
    speeds = {reg: phase_speed(reg, phase_csv) for reg in dict.fromkeys(r["regime"] for r in rows)}
    for r in rows:
        sp = speeds[r["regime"]]
        r.update({"oracle_speed": sp.get("speed", ""), "oracle_speed_lo": sp.get("lo", ""), "oracle_speed_hi": sp.get("hi", ""),
                  "oracle_fast_seeds": sp.get("fast", ""), "oracle_clearly_faster": sp.get("clearly", "")})
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    f = lambda x, d=2: "–" if x is None else f"{x:.{d}f}"      # noqa: E731
    lines = ["# ProVer's operating window in keydoor", "",
             f"Command: `python bench/credit_window.py {' '.join(sys.argv[1:])}`. At each regime's warm start (each seed its "
             "own warm start and rollouts; a cell is the mean over seeds of each seed's mean, proposals are summed), no training. hit: share of prover-plus's built-in judge's "
             "proposals whose segment holds the key turn. A: mean exact V(after) − V(before) of the proposed segments that "
             "hold it / that do not, and of a control: one turn drawn at random among the judged success's turns that are "
             "not the key turn (so discrimination is measured even where the judge never misses). P(cred) at K: the "
             "chance that ProVer credits them (Δ̂ > 0 with K independent continuations per side, from the exact values); "
             "disc. = P(cred | pivotal) − P(cred | control). Exact credit: "
             "oracle's speed × GRPO's updates [95% t CI over seeds] and the seeds ≥ 2× faster, from the phase screen at GRPO's "
             "best learning rate (– = no exact-credit runs of the cell in the screen); **bold**: ≥ 2× faster on average "
             "with the CI's upper end below 1 (the regimes counted as 'exact credit ≥ 2× faster'; a regime whose CI "
             "holds 1 is not).", "",
             "| regime | seeds | proposals | exact credit: speed (≥ 2× seeds) | judge hit | A pivotal / other / control | "
             + " | ".join(f"K={K}: P(cred) piv / other / control (disc.)" for K in KS) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(KS)]
    for reg in regimes:
        rs = [r for r in rows if r["regime"] == reg]
        cells = []
        for K in KS:
            a, b, c = (mean_of(rs, f"cred_{k}_k{K}") for k in ("pivotal", "other", "control"))
            cells.append(f"{f(a)} / {f(b)} / {f(c)} ({f(a - c) if a is not None and c is not None else '–'})")
        r0 = rs[0]
        sp = (f"{r0['oracle_speed']} [{r0['oracle_speed_lo']}, {r0['oracle_speed_hi']}] ({r0['oracle_fast_seeds']})"
              if r0["oracle_speed"] else "–")
        lines.append(f"| {reg} | {len(rs)} | {sum(int(r['proposals']) for r in rs)} | "
                     f"{'**' + sp + '**' if r0['oracle_clearly_faster'] == 'True' else sp} | {f(mean_of(rs, 'hit_rate'))} | "
                     f"{f(mean_of(rs, 'a_pivotal'), 3)} / {f(mean_of(rs, 'a_other'), 3)} / {f(mean_of(rs, 'a_control'), 3)} | "
                     + " | ".join(cells) + " |")
    open(args.out + ".md", "w").write("\n".join(lines) + "\n")
    plot(args, rows, regimes)


def plot(args, rows, regimes) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.9 + 0.45 * len(regimes)), sharey=True)
    y = list(range(len(regimes)))
    sp = [float(next(r for r in rows if r["regime"] == reg)["oracle_speed"] or "nan") for reg in regimes]
    axes[0].barh(y, sp, color="tab:gray")
    axes[0].axvline(0.5, ls="--", color="k", lw=1)
    axes[0].set_xlabel("exact credit: updates × GRPO's (< 0.5: ≥ 2× faster; blank: no exact-credit runs)")
    hit = [mean_of([r for r in rows if r["regime"] == reg], "hit_rate") or float("nan") for reg in regimes]
    axes[1].barh(y, hit, color="tab:blue")
    axes[1].axvline(0.6, ls="--", color="k", lw=1)
    axes[1].set_xlabel("judge hit rate on the pivotal turn")
    axes[1].set_xlim(0, 1)
    for K, m in zip(KS, "o^sD"):
        d = []
        for reg in regimes:
            rs = [r for r in rows if r["regime"] == reg]
            a, b = mean_of(rs, f"cred_pivotal_k{K}"), mean_of(rs, f"cred_control_k{K}")
            d.append(a - b if a is not None and b is not None else float("nan"))
        axes[2].plot(d, y, m, label=f"K = {K}")
    axes[2].axvline(0, color="k", lw=1)
    axes[2].set_xlabel("discrimination: P(cred. | pivotal) − P(cred. | worthless turn)")
    axes[2].legend(fontsize=8)
    axes[0].set_yticks(y, [reg.replace("rooms=", "r").replace("p_key=", "").replace(",p_nokey=", "/").replace("expert_neutral", "neutral")
                           for reg in regimes], fontsize=8)
    axes[0].invert_yaxis()
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("Where ProVer can work: exact credit's gain, the judge's selection, verification's discrimination (keydoor warm starts)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
