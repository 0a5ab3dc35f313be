"""bench/credit_ladder.py — the credit ladder where credit decides learning: how much of perfect credit's gain each method gets.

    python bench/credit_ladder.py --regimes rooms=4,p_key=0.6,p_nokey=0.4@10 --seeds 0 1 2 3 4 5 6 7 8 9
    python bench/credit_ladder.py --regimes rooms=4@10 "rooms=4,apples=0.5,reward=score@10" --methods grpo oracle prover
    python bench/credit_ladder.py --report-only ...        # rebuild the table, the csv and the curves

A regime is a credit_phase cell (comma-separated keydoor options and train.py settings) and a
learning-rate multiplier, `CELL@LR` — pick it from bench/credit_phase.py's screen: a cell where
`oracle` reaches GRPO's final `lab/p_key_held` in ≤ 0.5× GRPO's updates, at the multiplier that is
best for GRPO (the ladder must not handicap GRPO). Every method × seed trains
`train.py --env keydoor --method M --seed S` in that regime, paired by seed (shared warm start and
first rollouts). The runs are credit_phase's: same names, directories and kept summaries
(results/summaries/credit_phase/), so a GRPO or oracle run of the screen is reused here and the
other way round; nothing finished is re-run.

Per regime and method, against GRPO on the same seeds:

    AUC       mean lab/p_key_held of the policies after 0..iters − 1 updates (taken before each update)
    speed     updates to GRPO's final p_key_held of the same seed, over GRPO's own (never: iters + 1);
              this target moves with the horizon (GRPO's curve is still rising at its end)
    half-way  median updates until p reaches half the way from the warm start to exact credit's final
              mean (fixed by the regime, not the horizon); censored runs sort last, reached k of n shown
    Δ AUC     method − GRPO: mean, 95% t CI, exact sign-flip p
    credit efficiency   E = mean(AUC_m − AUC_grpo) / mean(AUC_oracle − AUC_grpo)
              (1 = all of perfect credit's gain, 0 = none of it); its 95% interval is Fieller's for
              a ratio of paired means (bench/paired.py), unbounded where oracle's own gain is not
              clearly above 0
    E > ½     d_s = (AUC_m − AUC_grpo) − ½ (AUC_oracle − AUC_grpo): is E above one half? mean, t CI
              and the one-sided exact sign-flip p of d (alternative: greater)
    tokens    generated tokens per update (rollout + verification + judge) over GRPO's, same seeds
Δ AUC's p is two-sided. p-values are Holm-adjusted over the table's family: every Δ AUC and every E > ½
test of every regime.

Writes results/NAME.{md,csv,png} (--name, a path under --out: default credit_ladder/credit_ladder, the
study's folder and its stem, e.g. credit_ladder_tinygap/credit_ladder_tinygap; csv: one row per run with at least
regime, method, seed, auc, updates_to_grpo_final, tokens_per_update; png: the mean p_key_held
curves with 95% t bands, one panel per regime).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import credit_phase as phase  # noqa: E402  (the runs: cells, names, launch, result, speed)
import paired  # noqa: E402

METHODS = ["grpo", "oracle", "prover", "prover-plus"]


def parse_regime(r: str) -> tuple[str, float]:
    """'rooms=4,p_nokey=0.4@10' → ('rooms=4,p_nokey=0.4', 10.0); one clear line when malformed."""
    cell, sep, lr = r.rpartition("@")
    try:
        mult = float(lr) if sep else 1.0
    except ValueError:
        raise SystemExit(f"credit_ladder: regime {r!r}: the part after @ must be a learning-rate multiplier") from None
    if not sep:
        cell = r
    if mult <= 0:
        raise SystemExit(f"credit_ladder: regime {r!r}: the learning-rate multiplier must be > 0")
    return cell, mult


def efficiency(m: dict, g: dict, o: dict) -> dict | None:
    """E = mean(m − g) / mean(o − g) over the seeds all three have, with Fieller's 95% interval for
    that ratio of paired means (bench/paired.py: it holds its level at n = 6–10, where a bootstrap of
    the ratio does not) and the range of E with each seed left out in turn (`loo`: one seed that
    collapsed can carry E)."""
    seeds = sorted(set(m) & set(g) & set(o))
    if len(seeds) < 3:
        return None
    def ratio(ss):
        den = sum(o[s] - g[s] for s in ss)
        return sum(m[s] - g[s] for s in ss) / den if den else float("nan")
    lo, hi = paired.fieller([m[s] - g[s] for s in seeds], [o[s] - g[s] for s in seeds])
    loo = [ratio([s for s in seeds if s != x]) for x in seeds]
    return {"mean": ratio(seeds), "lo": lo, "hi": hi, "n": len(seeds), "loo": (min(loo), max(loo))}


def half_test(m: dict, g: dict, o: dict) -> dict | None:
    """d_s = (m_s − g_s) − ½ (o_s − g_s): its paired summary (mean, t CI, one-sided exact sign-flip p)."""
    seeds = sorted(set(m) & set(g) & set(o))
    if len(seeds) < 2:
        return None
    d = {s: (m[s] - g[s]) - 0.5 * (o[s] - g[s]) for s in seeds}
    out = paired.paired(d, {s: 0.0 for s in seeds})
    out["p"] = paired.sign_flip_p(out["d"], alternative="greater")      # the hypothesis is E > ½: one-sided
    return out


def fmt_eff(e: dict | None, loo: bool = False) -> str:
    """'0.33 [0.03, 0.72] (n=10)' (Fieller), 'unbounded' where the oracle's gain is not clearly
    away from 0; `loo` adds the leave-one-seed-out range."""
    if not e:
        return "–"
    band = f"[{e['lo']:.2f}, {e['hi']:.2f}]" if math.isfinite(e["lo"]) else "[unbounded]"
    return f"{e['mean']:.2f} {band} (n={e['n']})" + (f"; leave-one-out {e['loo'][0]:.2f}–{e['loo'][1]:.2f}" if loo else "")


def report(args, jobs) -> str:
    res = phase.collect(args, jobs)
    aucs = {k: phase.auc(r["p_curve"]) for k, r in res.items()}
    rows, tests, stats = [], {}, {}
    for cell, mult in args.regime_list:
        name = f"{cell}@{mult:g}"
        by = {me: {s: aucs[(c, m, mm, s)] for (c, m, mm, s) in res if (c, m, mm) == (cell, mult, me)} for me in args.methods}
        tok = {me: {s: res[(c, m, mm, s)]["tokens_per_update"] for (c, m, mm, s) in res if (c, m, mm) == (cell, mult, me)}
               for me in args.methods}
        g, o = by.get("grpo", {}), by.get("oracle", {})
        for me in args.methods:
            st = {"n": len(by[me]), "auc": paired.summary(list(by[me].values())) if by[me] else None}
            sp = phase.speed(res, cell, mult, me, args.iters) if me != "grpo" else {}
            st["speed"] = paired.summary(list(sp.values())) if sp else None
            st["halfway"] = phase.fmt_halfway(phase.halfway(res, cell, mult, me))
            tr = [tok[me][s] / tok["grpo"][s] for s in tok[me] if s in tok.get("grpo", {}) and tok["grpo"][s]]
            st["tokens"] = paired.mean(tr) if tr else None
            both = [s for s in tok[me] if s in tok.get("grpo", {})]
            # the ratio of the means beside the mean of per-seed ratios: GRPO's own tokens per update vary
            # several-fold over seeds (some drift to long outputs), which moves the two summaries apart
            st["tokens_rom"] = (sum(tok[me][s] for s in both) / sum(tok["grpo"][s] for s in both)
                                if both and sum(tok["grpo"][s] for s in both) else None)
            st["secs"] = paired.mean([res[(cell, mult, me, s)]["iter_seconds"] for s in by[me]]) if by[me] else None
            hits = [res[(cell, mult, me, s)].get("judge_hit") for s in by[me]]
            hits = [h for h in hits if h is not None]
            judge = dict(x.split("=", 1) for x in me.partition(":")[2].split(",") if "=" in x).get("judge", "builtin")
            st["judge"] = f"{judge} ({paired.mean(hits):.2f})" if hits else "–"
            if me != "grpo" and by[me] and g:
                tests[(name, me, "delta")] = st["delta"] = paired.paired(by[me], g)
            if me not in ("grpo", "oracle") and by[me] and g and o:
                st["eff"] = efficiency(by[me], g, o)
                h = half_test(by[me], g, o)
                if h:
                    tests[(name, me, "half")] = st["half"] = h
            stats[(name, me)] = st
            hw = phase.halfway(res, cell, mult, me)
            for s in sorted(by[me]):
                r = res[(cell, mult, me, s)]
                target = res[(cell, mult, "grpo", s)]["p_curve"][-1][1] if (cell, mult, "grpo", s) in res else None
                rows.append([name, cell, mult, me, s, r["p_curve"][0][1], r["p_curve"][-1][1], aucs[(cell, mult, me, s)],
                             phase.first_reach(r["p_curve"], target, args.iters + 1) if target is not None else "",
                             sp.get(s, ""), r["tokens_per_update"],
                             r["tokens_per_update"] / tok["grpo"][s] if s in tok.get("grpo", {}) else "",
                             r["final_success"], r["iter_seconds"], "" if hw.get(s) is None else hw[s]])
    os.makedirs(os.path.dirname(os.path.join(args.out, args.name)), exist_ok=True)      # NAME may name a folder
    with open(os.path.join(args.out, f"{args.name}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["regime", "cell", "lr_mult", "method", "seed", "p_key_init", "p_key_final", "auc",
                    "updates_to_grpo_final", "speed_ratio", "tokens_per_update", "tokens_ratio", "final_success",
                    "iter_seconds", "updates_to_halfway"])
        w.writerows(rows)
    adj = paired.holm_family({k: v for k, v in tests.items() if v.get("p") is not None})
    lines = [f"Key-to-door, {args.iters} updates per run, paired seeds (one warm start and the same first rollouts "
             f"per seed; runs shared with bench/credit_phase.py). AUC = mean `lab/p_key_held` of the policies after "
             f"0..{args.iters - 1} updates (taken before each update); speed = updates to GRPO's final p_key_held of the "
             f"same seed × GRPO's own (never: {args.iters + 1}; the target moves with the horizon); half-way = median "
             "updates until p is half the way from the warm start to exact credit's final mean (fixed by the regime; "
             "censored runs sort last; reached k of n); "
             "credit efficiency E = mean(AUC − AUC_grpo) / mean(AUC_oracle − AUC_grpo), Fieller's 95% interval for that ratio of paired means; "
             "'E > ½' = the paired test of (AUC − AUC_grpo) − ½(AUC_oracle − AUC_grpo), one-sided (greater); mean [95% t CI] (n) "
             f"elsewhere; p exact sign-flip (Δ AUC: two-sided), Holm over the table's {len(adj)} tests (every Δ AUC and every E > ½ "
             "test); tokens = generated tokens per update × GRPO's on the same seeds: the mean of per-seed ratios "
             "(in brackets: the ratio of the means); they add the built-in judge's output (counted in words in runs made "
             "before it was counted in the policy tokenizer's ids) to the policy's rollout and verification tokens — "
             "bench/credit_parts.py's table keeps the two apart. judge: which ran, and the share of its proposals whose "
             "segment holds the key turn (lab/judge_hit, mean over seeds).\n",
             "| regime | method | n | AUC | speed (× GRPO) | updates to half-way | Δ AUC vs GRPO | p | p (Holm) | credit efficiency | "
             "E − ½ (in AUC) | p (E > ½, one-sided) | p (Holm) | tokens × GRPO | judge (hit rate) | s / update |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, me), st in stats.items():
        if not st["n"]:
            continue
        d, h, e = st.get("delta"), st.get("half"), st.get("eff")
        lines.append(
            f"| {name} | {me} | {st['n']} | {paired.fmt(st['auc'], digits=3)} | "
            f"{paired.fmt(st['speed'], digits=2) if st['speed'] else '–'} | {st['halfway']} | "
            f"{paired.fmt(d, digits=3, sign=True) if d else '–'} | {paired.fmt_p(d.get('p')) if d else '–'} | "
            f"{paired.fmt_p(adj.get((name, me, 'delta'))) if d else '–'} | "
            f"{fmt_eff(e)} | "
            f"{paired.fmt(h, digits=3, sign=True) if h else '–'} | {paired.fmt_p(h.get('p')) if h else '–'} | "
            f"{paired.fmt_p(adj.get((name, me, 'half'))) if h else '–'} | "
            f"{'–' if st['tokens'] is None else format(st['tokens'], '.2f') + ' (' + format(st['tokens_rom'], '.2f') + ')'} | "
            f"{st['judge']} | {st['secs']:.1f} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write(f"# The credit ladder where credit decides learning\n\n"
                f"Command: `{' '.join(['python', 'bench/credit_ladder.py', *sys.argv[1:]])}`\n\n{table}")
    if res:
        plot(args, res)
    return table


def plot(args, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(args.regime_list)
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 3.6), squeeze=False)
    for ax, (cell, mult) in zip(axes[0], args.regime_list):
        for me in args.methods:
            curves = [r["p_curve"] for (c, m, mm, s), r in sorted(res.items(), key=lambda kv: str(kv[0]))
                      if (c, m, mm) == (cell, mult, me)]
            if not curves:
                continue
            k = min(len(x) for x in curves)
            xs = [curves[0][i][0] for i in range(k)]
            cols = [[x[i][1] for x in curves] for i in range(k)]
            mu = [paired.mean(c) for c in cols]
            line, = ax.plot(xs, mu, label=f"{me} (n={len(curves)})", ls="-" if me in ("grpo", "oracle") else "--")
            if len(curves) > 1:
                ci = [paired.t_ci(c) for c in cols]
                ax.fill_between(xs, [a for a, _ in ci], [b for _, b in ci], color=line.get_color(), alpha=0.12)
        ax.set_title(f"{cell} @ lr ×{mult:g}", fontsize=8)
        ax.set_xlabel("before update x (the policy after x − 1 updates)")
        ax.set_ylabel("lab/p_key_held (mean, 95% t band)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, f"{args.name}.png"), dpi=90)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="the credit ladder (GRPO … ProVer … exact credit) in chosen keydoor regimes, "
                                            "paired seeds, credit efficiency (resumable; runs shared with credit_phase)")
    p.add_argument("--regimes", nargs="+", default=["rooms=4,p_key=0.6,p_nokey=0.4@10"],
                   help="CELL@LR: a credit_phase cell and a learning-rate multiplier (the one best for GRPO)")
    args = phase.parse_common(p, METHODS, list(range(10)), 15, "credit_ladder/credit_ladder", "credit_ladder", ["grpo", "oracle"])
    args.regime_list = [parse_regime(r) for r in args.regimes]
    phase.check_cells([c for c, _ in args.regime_list])
    jobs = [(c, m, me, s) for c, m in args.regime_list for s in args.seeds for me in args.methods]
    phase.run_study(args, jobs, "credit ladder")
    print(report(args, jobs))


if __name__ == "__main__":
    main()
