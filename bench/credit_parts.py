"""bench/credit_parts.py — what ProVer's parts each buy: the judge's selection, the verification, λ.

    python bench/credit_parts.py --regimes "rooms=4,p_key=0.55,p_nokey=0.45,expert_neutral=0.6@3" \
        --methods grpo oracle prover-plus:lam=3 prover-plus:lam=3,trust_judge=1 ... --seeds 10 11 ... 19
    python bench/credit_parts.py ... --report-only          # rebuild the table, csv and figure

Arms are train.py methods with settings (METHOD:KEY=VALUE,..., as bench/credit_ladder.py):
    judge + verification   prover-plus:lam=3,verify_k=K[,verify_crn=true]    ProVer as it is
    judge only             prover-plus:lam=3,trust_judge=C                    the judge trusted: λ·C, no continuations
    random + verification  prover-plus:lam=3,judge=random                     no selection
    truth + verification   prover-plus:lam=3,judge=truth                      perfect selection, real estimation noise
    oracle, grpo           exact credit and none (the ladder's ends)
Per run (the csv: one row each): AUC = mean lab/p_key_held over the policies after 0..iters−1
updates (the lab's metrics are taken before each update's gradient step); the judge's hit rate
(lab/judge_hit: its segment holds the success's key turn); verification's discrimination
P(credited | pivotal) and P(credited | not pivotal) (lab/credited_pivotal, lab/credited_other,
from the truth labels); policy tokens (rollouts + verification) and judge tokens (prompt +
answer), both in the policy tokenizer's ids, per update.

Per arm against GRPO on the same seeds: E = mean(AUC_m − AUC_grpo) / mean(AUC_oracle − AUC_grpo)
with Fieller's 95% interval and its leave-one-seed-out range (bench/credit_ladder.py), and the
tests named by --tests:
    half:ARM       one-sided: E > ½, i.e. mean of (AUC_m − AUC_g) − ½(AUC_o − AUC_g) > 0
    beats:A>B      one-sided: mean of AUC_A − AUC_B > 0
exact sign-flip p (scipy.stats.permutation_test, bench/paired.py), Holm over exactly the tests
named (the family). The runs are bench/credit_phase.py's (shared directories and kept summaries),
so the study is resumable: rerun the same command.

Writes results/NAME.{md,csv} and NAME_window.png (with --window: hit rate and discrimination per
regime, the operating-window figure). Leaves out: choosing arms or regimes from the results (a
confirmatory study names them in its PLAN.md before it runs).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import credit_ladder as ladder  # noqa: E402  (efficiency, regimes)
import credit_phase as phase  # noqa: E402  (the runs)
import paired  # noqa: E402

COLUMNS = ["regime", "arm", "seed", "auc", "p_key_init", "p_key_final", "hit_rate", "credited_pivotal",
           "credited_other", "accept_rate", "policy_tokens", "judge_tokens", "iter_seconds"]


def one_sided(x: dict, y: dict) -> dict | None:
    """Paired x − y over shared seeds: mean, 95% t CI, exact one-sided sign-flip p for mean > 0."""
    seeds = sorted(set(x) & set(y))
    if len(seeds) < 2:
        return None
    d = [x[s] - y[s] for s in seeds]
    out = paired.summary(d)
    out["p"] = paired.sign_flip_p(d, alternative="greater")
    return out


def run_tests(names: list[str], by: dict) -> dict:
    """{test name: paired summary with its one-sided p}; a test whose arms have no runs is None."""
    g, o = by.get("grpo", {}), by.get("oracle", {})
    out = {}
    for t in names:
        kind, _, what = t.partition(":")
        if kind == "half":
            m = by.get(what, {})
            seeds = sorted(set(m) & set(g) & set(o))
            out[t] = one_sided({s: (m[s] - g[s]) - 0.5 * (o[s] - g[s]) for s in seeds}, {s: 0.0 for s in seeds})
        elif kind == "beats":
            a, b = what.split(">")
            out[t] = one_sided(by.get(a, {}), by.get(b, {}))
        else:
            raise SystemExit(f"credit_parts: test {t!r}: half:ARM or beats:ARM_A>ARM_B")
    return out


def fmt_rate(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def report(args, jobs) -> str:
    res = phase.collect(args, jobs)
    rows, lines, window = [], [], []
    for cell, mult in args.regime_list:
        name = f"{cell}@{mult:g}"
        mine = {(me, s): r for (c, m, me, s), r in res.items() if (c, m) == (cell, mult)}
        by = {me: {s: phase.auc(r["p_curve"]) for (me2, s), r in mine.items() if me2 == me} for me in args.methods}
        tests = run_tests(args.tests, by)
        adj = paired.holm_family({k: v for k, v in tests.items() if v is not None and v.get("p") is not None})
        g, o = by.get("grpo", {}), by.get("oracle", {})
        pt = {me: {s: r.get("policy_tokens_per_update") for (me2, s), r in mine.items() if me2 == me} for me in args.methods}
        lines += [f"## {name}\n", "| arm | n | AUC | Δ AUC vs GRPO | speed (× GRPO's updates) | credit efficiency E | judge hit rate | "
                  "credited if pivotal | credited if not pivotal | policy tokens × GRPO | judge tokens / update |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for me in args.methods:
            rs = [r for (me2, _), r in mine.items() if me2 == me]
            if not rs:
                continue
            mean = lambda k: paired.mean([r[k] for r in rs if r.get(k) is not None]) if any(r.get(k) is not None for r in rs) else None  # noqa: E731
            d = paired.paired(by[me], g) if me != "grpo" and g else None
            e = ladder.efficiency(by[me], g, o) if me not in ("grpo", "oracle") and g and o else None
            ratio = [pt[me][s] / pt["grpo"][s] for s in pt[me] if s in pt.get("grpo", {}) and pt[me][s] and pt["grpo"][s]]
            jt = mean("judge_tokens_per_update")
            sp = phase.speed(res, cell, mult, me, args.iters) if me != "grpo" else {}
            lines.append(f"| {me} | {len(rs)} | {paired.fmt(paired.summary(list(by[me].values())), digits=3)} | "
                         f"{paired.fmt(d, digits=3, sign=True) if d else '–'} | "
                         f"{paired.fmt(paired.summary(list(sp.values())), digits=2) if len(sp) > 1 else '–'} | {ladder.fmt_eff(e, loo=True)} | "
                         f"{fmt_rate(mean('judge_hit'))} | {fmt_rate(mean('credited_pivotal'))} | "
                         f"{fmt_rate(mean('credited_other'))} | {format(paired.mean(ratio), '.2f') if ratio else '–'} | "
                         f"{'–' if jt is None else format(jt, '.0f')} |")
            window.append((name, me, mean("judge_hit"), mean("credited_pivotal"), mean("credited_other")))
            for (me2, s), r in sorted(mine.items()):
                if me2 == me:
                    rows.append([name, me, s, by[me][s], r["p_curve"][0][1], r["p_curve"][-1][1], r.get("judge_hit"),
                                 r.get("credited_pivotal"), r.get("credited_other"), r.get("accept_rate"),
                                 r.get("policy_tokens_per_update"), r.get("judge_tokens_per_update"), r["iter_seconds"]])
        if tests:
            lines += ["", f"Tests (one-sided, exact sign-flip p; Holm over these {len(adj)}, the study's family):", "",
                      "| test | paired mean [95% t CI] (n) | p (one-sided) | p (Holm) |", "|---|---|---|---|"]
            for t, v in tests.items():
                lines.append(f"| {t} | {paired.fmt(v, digits=3, sign=True) if v else '–'} | "
                             f"{paired.fmt_p(v.get('p')) if v else '–'} | {paired.fmt_p(adj.get(t)) if v else '–'} |")
        if args.goal_arm:
            lines += goal_lines(args, tests, adj, pt)
        lines.append("")
    os.makedirs(os.path.dirname(os.path.join(args.out, args.name)), exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    head = (f"Key-to-door, {args.iters} updates per run, paired seeds. AUC: mean lab/p_key_held over the policies "
            f"after 0..{args.iters - 1} updates. Speed: updates to GRPO's final p_key_held of the same seed × GRPO's "
            f"own (a run that never reaches it counts {args.iters + 1}). Judge: the arm's (`builtin` unless the arm says judge=...); hit rate = "
            "share of its proposals whose segment holds the examined success's key turn. Discrimination from the "
            "truth labels: the share of proposals credited, given they hold the key turn / given they do not. "
            "Tokens: the policy tokenizer's ids; policy = rollouts + verification (× GRPO's on the same seeds, "
            "mean of per-seed ratios), judge = its prompts + answers per update. Credit efficiency E = mean(Δ AUC) / "
            "mean(oracle's Δ AUC) with Fieller's 95% interval for that ratio of paired means (it holds its level at "
            "this n; unbounded where oracle's gain is not clearly above 0) and the range of E with each seed left out "
            "in turn. Arms are named as `--methods` gives them: `prover-plus:lam=3,verify_k=4` is prover-plus with "
            "λ = 3 and K = 4, not the paper's ProVer.\n")
    text = "\n".join(lines)
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write(f"# What ProVer's parts buy\n\nCommand: `{' '.join(['python', 'bench/credit_parts.py', *sys.argv[1:]])}`\n\n"
                f"{head}\n{text}")
    if args.window and window:
        plot_window(args, window)
    return head + "\n" + text


def goal_lines(args, tests: dict, adj: dict, pt: dict) -> list[str]:
    """The PLAN's goal, condition by condition: every planned test rejects at Holm p < 0.05, and the
    goal arm's policy tokens are at most --goal-tokens × GRPO's (mean of per-seed ratios)."""
    out = ["", f"The plan's goal, condition by condition (met only if every line says yes):", ""]
    for t in tests:
        p = adj.get(t)
        out.append(f"- test `{t}` rejects at Holm p < 0.05: {'yes' if p is not None and p < 0.05 else 'no'} "
                   f"(Holm p {paired.fmt_p(p)})")
    r = [pt[args.goal_arm][s] / pt["grpo"][s] for s in pt.get(args.goal_arm, {})
         if s in pt.get("grpo", {}) and pt[args.goal_arm][s] and pt["grpo"][s]]
    x = paired.mean(r) if r else float("nan")
    out.append(f"- `{args.goal_arm}`'s policy tokens ≤ {args.goal_tokens:g}× GRPO's: {'yes' if x <= args.goal_tokens else 'no'} "
               f"({x:.2f}×)")
    return out


def plot_window(args, window):
    """Per regime and arm: the judge's hit rate and verification's P(credited | pivotal) vs
    P(credited | not pivotal) — where selection and verification each can work."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    regimes = list(dict.fromkeys(w[0] for w in window))
    for me in dict.fromkeys(w[1] for w in window):
        pts = [(regimes.index(r), h) for r, m, h, _, _ in window if m == me and h is not None]
        if pts:
            a.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=me)
        dis = [(cp, co) for _, m, _, cp, co in window if m == me and cp is not None and co is not None]
        if dis:
            b.scatter([x for _, x in dis], [y for y, _ in dis], label=me)
    a.axhline(0.6, color="grey", ls=":", lw=1)
    a.set_xticks(range(len(regimes)), [r.replace(",", ",\n") for r in regimes], fontsize=6)
    a.set_ylabel("judge hit rate (segment holds the key turn)")
    a.set_ylim(0, 1.02)
    a.legend(fontsize=6)
    b.plot([0, 1], [0, 1], color="grey", ls=":", lw=1)
    b.set_xlabel("P(credited | not pivotal)")
    b.set_ylabel("P(credited | pivotal)")
    b.set_title("verification's discrimination (above the diagonal: it tells them apart)", fontsize=8)
    b.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, f"{args.name}_window.png"), dpi=90)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="what ProVer's parts (selection, verification, λ) each buy, in keydoor "
                                            "regimes; paired seeds (resumable; runs shared with credit_phase)")
    p.add_argument("--regimes", nargs="+", required=True, help="CELL@LR, as bench/credit_ladder.py")
    p.add_argument("--tests", nargs="*", default=[], help="the family: half:ARM and beats:ARM_A>ARM_B (one-sided)")
    p.add_argument("--window", action="store_true", help="also draw NAME_window.png")
    p.add_argument("--goal-arm", default=None, help="state the PLAN's goal condition by condition for this arm")
    p.add_argument("--goal-tokens", type=float, default=1.3, help="the goal's cap on the arm's policy tokens × GRPO's")
    args = phase.parse_common(p, ["grpo", "oracle"], list(range(10, 20)), 15, "credit_parts/credit_parts",
                              "credit_parts", ["grpo", "oracle"])
    args.regime_list = [ladder.parse_regime(r) for r in args.regimes]
    phase.check_cells([c for c, _ in args.regime_list])
    jobs = [(c, m, me, s) for c, m in args.regime_list for s in args.seeds for me in args.methods]
    phase.run_study(args, jobs, "credit parts")
    print(report(args, jobs))


if __name__ == "__main__":
    main()
