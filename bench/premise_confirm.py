"""bench/premise_confirm.py — the preregistered family of results/premise_confirm/PLAN.md, and its csv.

The study (`bench/compare.py … --out results/premise_confirm`) trains six arms on the three
benchmarks in the regimes the premise screen chose, seeds 30–39. This report reads only the kept run
summaries (summaries/compare/ENV-METHOD-sSEED.json), checks that each was made under the PLAN's
protocol (50 updates, whole held-out split played 4×, the regime's flags), and computes:

  * the family — five one-sided tests (alternative "greater"), Holm over exactly these five:
      1. ProVer − GRPO, the average over benchmarks   (stratified sign-flip, each benchmark's seeds)
      2–4. ProVer − GRPO on ALFWorld, WebShop, SearchQA (exact sign-flip over 10 paired seeds)
      5. ProVer − ProVer-random, the average           (selection matters)
    with d_s = metric(arm, s) − metric(other, s); metric = final held-out success (WebShop: score,
    compare.py's metric, PLAN addendum 1). A test is computed only when every benchmark it spans has
    all ten paired seeds; until then its row says "waiting" with the count, and Holm waits for all
    five (an adjusted p depends on every p of the family);
  * beside it, exploratory and labelled so: every arm − GRPO per benchmark (95% t CI, two-sided p),
    ProVer − ProVer-random per benchmark, the acceptance in the runs (judged and random), policy
    tokens per update (rollouts + verification continuations, the policy tokenizer's ids) × GRPO's
    on the same seeds beside the paper's +2.4 / +11.6 / +16.8%, and judge tokens apart (the built-in
    judge ran: its tokens are what an LLM judge doing the same would write, in the policy tokenizer's
    ids), and the gradient ladder at the regime's warm start (results/benchmark_gradient/'s csv). A
    benchmark's exploratory table appears only once all its 60 runs are in;
  * a positive control (exploratory, decided after the results: results/premise_control/): GRPO at
    twice the learning rate on ALFWorld, paired by seed with the study's GRPO runs.

  * why, per run (exploratory; `why.csv`, from the run folders' metrics.jsonl and records.jsonl and
    kept in git, so a clone without the run folders rebuilds the report): per update the groups with
    a GRPO signal, the judged and credited segments, the mean Δ̂ of the verified ones, the bonus
    λ·Δ̂ added and its size against the success's own GRPO advantage A on the segment's turns, and
    credit/share (how far the credit moved the update from GRPO's).

Writes <study>/confirm.md, <study>/runs.csv (one row per finished run: env, method, seed, final,
final_success, final_score, policy_tokens, judge_tokens, accept, …) and <study>/why.csv. Leaves out:
the learning curves and the cost figures in seconds (compare.md has them), and any test not named in
the PLAN.

    python bench/premise_confirm.py [--out results/premise_confirm]
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired  # noqa: E402  (bench/paired.py)
from compare import by_seed, cost_ratio  # noqa: E402  ({seed: summary[key]} of one env and arm; cost × GRPO's)
import premise  # noqa: E402  (bench/premise.py: the screen's studies and its rule)
from runs import same_start, weights_id  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVS = ["alfworld", "webshop", "searchqa"]
ARMS = ["grpo", "grpo-matched", "prover", "prover-random", "gigpo", "prover-plus-l3k4"]
SEEDS = list(range(30, 40))
# the regimes results/premise/premise.md ("Chosen") picked, as the PLAN's command passes them
REGIME = {"alfworld": ["--max-steps", "30", "--temperature", "0.7"], "webshop": ["--margin", "0.125"],
          "searchqa": ["--temperature", "0.5", "--margin", "0.125"]}
PROTOCOL = dict(iters=50, eval_every=25, eval_episodes=0, eval_repeats=4)
METRIC = {"alfworld": "final_success", "webshop": "final_score", "searchqa": "final_success"}
PAPER_TOKENS = {"alfworld": 2.4, "webshop": 11.6, "searchqa": 16.8}   # ProVer's policy tokens over GRPO, %, at 4B
PAPER_ACCEPT = "SearchQA: random segments 19.5%, the paper's LLM judges 58.5–72.4%"
LADDER = os.path.join(ROOT, "results", "benchmark_gradient", "benchmark_gradient.csv")
# the study's arms under their names in the ladder, and its Monte Carlo reference (K = 2, every turn)
LADDER_ARMS = {"grpo-matched": "grpo-matched", "prover": "prover", "prover-plus-l3k4": "prover-plus:lam=3,verify_k=4",
               "gigpo": "gigpo"}
LADDER_REF = "vine:vine_k=2,vine_turns=0"
# the positive control (exploratory, decided after the study's results; its folder's README): GRPO at
# twice the learning rate on ALFWorld in the study's regime, the rest as the study's GRPO arm
CONTROL = os.path.join(ROOT, "results", "premise_control")
CONTROL_ENV, CONTROL_FLAGS = "alfworld", ["--lr", "2e-4"]
# the family, in the PLAN's order: (name, arm, other, the benchmarks it spans)
FAMILY = [("1. ProVer > GRPO, average", "prover", "grpo", ENVS),
          ("2. ProVer > GRPO, ALFWorld", "prover", "grpo", ["alfworld"]),
          ("3. ProVer > GRPO, WebShop", "prover", "grpo", ["webshop"]),
          ("4. ProVer > GRPO, SearchQA", "prover", "grpo", ["searchqa"]),
          ("5. ProVer > ProVer-random, average", "prover", "prover-random", ENVS)]


def misses(rec: dict, want: dict, whose: str) -> list[str]:
    """Each protocol key of summary `rec` that differs from `want`, said as 'key=value (whose: wanted)'."""
    return [f"{k}={rec['protocol'].get(k)!r} ({whose}: {v!r})" for k, v in want.items() if rec["protocol"].get(k) != v]


def load(out: str) -> dict:
    """{(env, arm, seed): summary} of the study's finished runs; one line (SystemExit) for a summary
    made under another protocol, an arm or seed outside the PLAN."""
    res = {}
    for path in sorted(glob.glob(os.path.join(out, "summaries", "compare", "*.json"))):
        name = os.path.basename(path)[:-5]
        env, rest = name.split("-", 1)
        arm, seed = rest.rsplit("-s", 1)
        rec, seed = json.load(open(path)), int(seed)
        bad = misses(rec, {**PROTOCOL, "env": env, "seed": seed, "extra": REGIME.get(env)}, "the PLAN")
        if env not in ENVS or arm not in ARMS or seed not in SEEDS or bad:
            raise SystemExit(f"premise_confirm: {path} is not a run of the PLAN ({bad[0] if bad else f'{env}/{arm}/s{seed}'})")
        res[env, arm, seed] = rec["summary"]
    return res


def diff(res: dict, env: str, arm: str, other: str, alternative: str = "two-sided") -> dict:
    """Paired arm − other on `env` over the seeds both ran from the same warm start (points)."""
    a, b = by_seed(res, env, arm, METRIC[env]), by_seed(res, env, other, METRIC[env])
    keep = [s for s in set(a) & set(b) if same_start(res[env, arm, s], res[env, other, s])]
    return paired.paired({s: 100 * a[s] for s in keep}, {s: 100 * b[s] for s in keep}, alternative)


def family(res: dict) -> list[dict]:
    """The five planned tests: each {name, n_by, d (the paired/stratified output or None), p_holm}."""
    rows = []
    for name, arm, other, envs in FAMILY:
        per_env = [diff(res, e, arm, other, "greater") for e in envs]
        n_by = [d["n"] for d in per_env]
        if min(n_by) < len(SEEDS):
            d = None
        elif len(envs) > 1:
            d = paired.stratified(per_env, alternative="greater")
        else:
            d = per_env[0]
        rows.append({"name": name, "n_by": n_by, "d": d})
    if all(r["d"] is not None for r in rows):
        for r, p in zip(rows, paired.holm([r["d"]["p"] for r in rows])):
            r["p_holm"] = p
    return rows


def closest_to_grpo(res: dict) -> tuple[float, str, str] | None:
    """Beside the family (exploratory): the smallest two-sided p of any arm − GRPO on any benchmark,
    with its arm and benchmark (None until every run is in)."""
    if len(res) < len(ENVS) * len(ARMS) * len(SEEDS):
        return None
    return min((diff(res, e, a, "grpo")["p"], a, e) for e in ENVS for a in ARMS if a != "grpo")


def write_csv(path: str, res: dict) -> None:
    cols = ["env", "method", "seed", "final", "final_success", "final_score", "init_success", "policy_tokens",
            "rollout_tokens", "verify_tokens", "judge_tokens", "accept", "env_steps", "warm_start"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for (e, m, s), r in sorted(res.items(), key=lambda kv: (ENVS.index(kv[0][0]), ARMS.index(kv[0][1]), kv[0][2])):
            w.writerow([e, m, s, r[METRIC[e]], r["final_success"], r["final_score"], r["init_success"],
                        r["policy_tokens_per_update"], r["rollout_tokens_per_update"], r["verify_tokens_per_update"],
                        r["judge_tokens_per_update"], r["accept_rate"], r["env_steps_per_update"], r.get("warm_start", "")])


WHY = ["env", "method", "seed", "updates", "mixed_groups", "judged", "verified", "credited", "accept", "delta_mean",
       "bonus_mean", "bonus_over_adv", "credit_share"]


def why_row(d: str) -> dict | None:
    """One finished run's credit figures (module docstring), or None without its metrics. Counts per
    update, acceptance and mean Δ̂ pooled over the run's verified segments, all from metrics.jsonl;
    the bonus and its size against A from records.jsonl, which keeps up to 4 groups an update,
    credited ones first (so every credited segment of an update with at most 4)."""
    mp = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(mp):
        return None
    tr = [r for r in map(json.loads, filter(str.strip, open(mp))) if r.get("step", 0) > 0 and "train/mixed_groups" in r]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")        # noqa: E731
    n_ver = [r.get("prover/valid", 0) + r.get("prover/repaired", 0) for r in tr]
    pooled = lambda k: (sum(r.get(k, 0) * n for r, n in zip(tr, n_ver) if n) / sum(n_ver)  # noqa: E731
                        if sum(n_ver) else float("nan"))
    bonus, ratio = [], []
    rp = os.path.join(d, "records.jsonl")
    for rec in map(json.loads, filter(str.strip, open(rp) if os.path.exists(rp) else [])):
        for g in rec.get("groups", []):
            j = g.get("judge") or {}
            if not j.get("applied"):
                continue
            bonus.append(j["bonus"])
            a = (g["trajs"][j["sid"]]["A"] or [])[j["start"]:j["end"] + 1]      # the success's GRPO advantage per turn
            if a and mean(a) > 0:                       # a success's GRPO advantage: > 0 in a mixed group
                ratio.append(j["bonus"] / mean(a))
    return {"updates": len(tr), "mixed_groups": mean([r["train/mixed_groups"] for r in tr]),
            "judged": mean([r.get("prover/proposals", 0) for r in tr]), "verified": mean(n_ver),
            "credited": mean([r.get("prover/credited", 0) for r in tr]),
            "accept": pooled("prover/accept_rate"), "delta_mean": pooled("prover/delta_mean"),
            "bonus_mean": mean(bonus), "bonus_over_adv": mean(ratio),
            "credit_share": mean([r["credit/share"] for r in tr if "credit/share" in r])}


def update_why(out: str, res: dict) -> dict:
    """{(env, arm, seed): why row} for every finished run: recomputed where its folder is here, kept
    from why.csv where it is not (a fresh clone); written back to why.csv."""
    path, rows = os.path.join(out, "why.csv"), {}
    if os.path.exists(path):
        for r in csv.DictReader(open(path, newline="")):
            rows[r["env"], r["method"], int(r["seed"])] = {k: float(r[k]) for k in WHY[3:]}
    for e, m, s in res:
        row = why_row(os.path.join(out, "runs", f"{e}-{m}-s{s}"))
        if row is not None:
            rows[e, m, s] = row
    rows = {k: v for k, v in rows.items() if k in res}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(WHY)
        for k in sorted(rows, key=lambda k: (ENVS.index(k[0]), ARMS.index(k[1]), k[2])):
            w.writerow([*k, *(round(rows[k][c], 6) for c in WHY[3:])])
    return rows


def why_table(why: dict, env: str) -> list[str]:
    head = ["| arm | groups with a signal / update | judged | verified | credited | accept | mean Δ̂ (verified) "
            "| mean bonus λ·Δ̂ | bonus ÷ the success's A | credit/share |", "|---|" + "---|" * 9]
    body = []
    for m in ARMS:
        rs = [v for (e, a, _), v in why.items() if e == env and a == m]
        if not rs:
            continue
        cell = lambda c, f="{:.2f}": (lambda xs: f.format(sum(xs) / len(xs)) if xs else "–")(  # noqa: E731
            [r[c] for r in rs if r[c] == r[c]])
        judged = (f"{cell('judged')} | {cell('verified')} | {cell('credited')} | {cell('accept')} | "
                  f"{cell('delta_mean', '{:+.3f}')} | {cell('bonus_mean', '{:.3f}')} | {cell('bonus_over_adv')}"
                  if "prover" in m else " | ".join(["–"] * 7))
        body.append(f"| {m} | {cell('mixed_groups', '{:.1f}')} | {judged} | {cell('credit_share', '{:.3f}')} |")
    return head + body


def ladder_regime(env: str) -> str:
    """The regime as the ladder's --regime names it: ["--max-steps", "30", …] → "max_steps=30,…"."""
    f = REGIME[env]
    return ",".join(f"{f[i][2:].replace('-', '_')}={f[i + 1]}" for i in range(0, len(f), 2))


def ladder_line(res: dict, env: str, path: str = LADDER) -> str | None:
    """The gradient ladder beside the family (the PLAN's promise): the csv's rows in this regime whose
    policy's weights (sha1, first 12 hex) are the ones every run of `env` started from; None when the
    csv has no such rows. Each ratio as the ladder's rule lets it be said (`benchmark_gradient.claim`)."""
    import benchmark_gradient as bg
    starts = {r.get("warm_start") for k, r in res.items() if k[0] == env}
    rows, ids = {}, {}                                   # ids: each policy folder's weights, hashed once
    for r in csv.DictReader(open(path, newline="")):
        pol, _, regime = r["policy"].partition(" [")
        if r["env"] != env or regime != ladder_regime(env) + "]":
            continue
        if pol not in ids:
            ids[pol] = weights_id(os.path.join(ROOT, pol))
        if ids[pol] is not None and {ids[pol]} == starts:
            rows[r["method"]] = r
    if "grpo" not in rows or LADDER_REF not in rows:
        return None
    g, ref = rows["grpo"], rows[LADDER_REF]
    ok = bg.truthy(g["snr_resolved"])
    arms = ", ".join(f"{m} {bg.claim(rows[x], 'snr_vs_grpo', ok and bg.truthy(rows[x]['ratio_resolved']))}"
                     for m, x in LADDER_ARMS.items() if x in rows)
    return (f"Gradient ladder at this regime's warm start (`results/benchmark_gradient/`, {g['batches']} batches; "
            "snr × GRPO's on the same batches, 95% BCa, 'unresolved' where an snr it rests on is within 2 SE of 0): "
            f"GRPO's snr {float(g['snr']):.4f} ± {float(g['snr_se']):.4f}; {arms}; exact per-turn advantages "
            f"{bg.claim(ref, 'exact_vs_grpo', ok and bg.truthy(ref['exact_resolved']))}.\n")


def control(res: dict, out: str = CONTROL) -> dict | None:
    """The positive control beside the family: final(GRPO at lr ×2) − final(the study's GRPO) per seed
    on CONTROL_ENV, over the seeds both ran from the same weights (points: paired.paired's mean, 95% t
    CI, two-sided exact sign-flip p, n); None before a paired run is in. A control summary made under
    another protocol than the study's GRPO arm plus CONTROL_FLAGS is one error line."""
    ctl = {}
    for path in sorted(glob.glob(os.path.join(out, "summaries", "compare", f"{CONTROL_ENV}-grpo-s*.json"))):
        rec, seed = json.load(open(path)), int(path[:-5].rsplit("-s", 1)[1])
        bad = misses(rec, {**PROTOCOL, "env": CONTROL_ENV, "seed": seed, "extra": CONTROL_FLAGS + REGIME[CONTROL_ENV]},
                     "the control")
        if bad or seed not in SEEDS:
            raise SystemExit(f"premise_confirm: {path} is not a run of the positive control ({bad[0] if bad else f's{seed}'})")
        ctl[CONTROL_ENV, "grpo-lr2", seed] = rec["summary"]
    both = {**{k: v for k, v in res.items() if k[:2] == (CONTROL_ENV, "grpo")}, **ctl}
    d = diff(both, CONTROL_ENV, "grpo-lr2", "grpo")
    return d if d.get("n") else None


def control_line(res: dict, out: str = CONTROL) -> str | None:
    """confirm.md's line for the positive control (`control`), or None before it has a pair."""
    d = control(res, out)
    if d is None:
        return None
    return (f"Positive control (exploratory, decided after these results; `{os.path.relpath(out, ROOT)}/`): GRPO at "
            f"twice the learning rate (`{' '.join(CONTROL_FLAGS)}`) − GRPO on {CONTROL_ENV}, final points: "
            f"{paired.fmt(d, sign=True)}, two-sided exact sign-flip p {paired.fmt_p(d.get('p'))}.\n")


def report(res: dict, why: dict | None = None, screen: list[str] | None = None) -> str:
    """confirm.md: the family, its answer, the exploratory tables; `screen`: the screen's choice per
    env (premise.choose), said beside the regimes with the targets each misses."""
    done = len(res)
    total = len(ENVS) * len(ARMS) * len(SEEDS)
    out = ["# The paper's comparison in the regimes closest to its premise — the preregistered family\n",
           f"Plan: `PLAN.md` (committed before any run). Runs finished: **{done} of {total}**. Metric: final "
           "held-out success in points (WebShop: score), 50 updates, the whole held-out split played 4×. "
           "Regimes: " + "; ".join(f"{e} `{' '.join(REGIME[e])}`" for e in ENVS) + ".\n",
           *(["The regimes against the screen's targets (results/premise/premise.md, its rule; the PLAN took "
              "each benchmark's pick): " + " ".join(ln[2:] for ln in screen) + "\n"] if screen else []),
           "## The family (one-sided, Holm over these five)\n",
           "| test | Δ (points) [95% CI] | one-sided p | p (Holm) | decided at α = 0.05 |", "|---|---|---|---|---|"]
    rows = family(res)
    for r in rows:
        if r["d"] is None:
            out.append(f"| {r['name']} | waiting ({'+'.join(map(str, r['n_by']))} of {len(SEEDS)} paired seeds per benchmark) | – | – | – |")
            continue
        ph = r.get("p_holm")
        verdict = "waiting for the family" if ph is None else ("yes" if ph < 0.05 else "no")
        out.append(f"| {r['name']} | {paired.fmt(r['d'], sign=True)} | {paired.fmt_p(r['d']['p'])} | "
                   f"{paired.fmt_p(ph)} | {verdict} |")
    out += ["", "The CI is two-sided 95% (t; the average: Welch over benchmarks); p is the exact one-sided "
            "sign-flip (the average: the stratified sign-flip, 100,000 random patterns at 30 differences).\n",
            f"**Answer** (the family only): {answer(res) or 'waiting for every run.'}\n",
            "## Beside it (exploratory: not in the family)\n"]
    for e in ENVS:
        n_env = sum(1 for k in res if k[0] == e)
        if n_env < len(ARMS) * len(SEEDS):
            out.append(f"### {e}\n\nwaiting ({n_env} of {len(ARMS) * len(SEEDS)} runs).\n")
            continue
        out += [f"### {e}\n", "| arm | final (points) | − GRPO [95% t CI] | p (two-sided) | policy tokens / update "
                "(× GRPO) | judge tokens / update | accept |", "|---|---|---|---|---|---|---|"]
        for m in ARMS:
            vals = by_seed(res, e, m, METRIC[e])
            if not vals:
                continue
            d = diff(res, e, m, "grpo") if m != "grpo" else None
            pt, jt = (cost_ratio(res, e, m, k) for k in ("policy_tokens_per_update", "judge_tokens_per_update"))
            acc = [v for v in by_seed(res, e, m, "accept_rate").values() if v == v]
            out.append(f"| {m} | {paired.fmt(paired.summary([100 * v for v in vals.values()]))} | "
                       f"{paired.fmt(d, sign=True) if d else '–'} | {paired.fmt_p(d.get('p')) if d else '–'} | "
                       f"{pt[0]:.0f} ({100 * (pt[1] - 1):+.1f}%) | {jt[0]:.0f} | "
                       f"{f'{100 * paired.mean(acc):.0f}%' if acc else '–'} |")
        d = diff(res, e, "prover", "prover-random")
        out += ["", f"ProVer − ProVer-random: {paired.fmt(d, sign=True)}, two-sided p {paired.fmt_p(d.get('p'))}. "
                f"The paper's ProVer policy tokens over GRPO here: +{PAPER_TOKENS[e]}%.\n"]
        lad = ladder_line(res, e) if os.path.exists(LADDER) else None
        out += [lad] if lad else []
        ctl = control_line(res) if e == CONTROL_ENV else None
        out += [ctl] if ctl else []
        if why:
            out += ["Why (means over the seeds of per-run figures; why.csv):\n", *why_table(why, e), ""]
    out.append(f"The paper's acceptance ({PAPER_ACCEPT}). Judge: the built-in one (`--judge builtin`); "
               "prover-random's judge is `random` (no judge tokens).")
    return "\n".join(out) + "\n"


def answer(res: dict, short: bool = False) -> str | None:
    """The study's answer in one sentence, from the family only (None until every test is decided):
    each Δ with its 95% CI and n and its Holm p, and a verdict word that follows the Holm p at α = 0.05;
    `short` (README's Results): each Δ's mean and Holm p only."""
    rows = family(res)
    if any(r.get("p_holm") is None for r in rows):
        return None
    if short:
        part = lambda r: f"{r['d']['mean']:+.1f} ({paired.fmt_p(r['p_holm'])})"  # noqa: E731
        head, sep = "one-sided Δ points, Holm p: ", ", "
    else:
        part = lambda r: f"{paired.fmt(r['d'], sign=True)}, p {paired.fmt_p(r['p_holm'])}"  # noqa: E731
        head, sep = "Δ points [95% CI], one-sided Holm p: ", "; "
    envs = [r["name"].split(", ")[1] for r in rows[1:4] if r["p_holm"] < 0.05]
    avg = rows[0]["p_holm"] < 0.05
    first = ("ProVer is not shown to beat GRPO" if not (avg or envs) else
             "ProVer beats GRPO " + " and ".join((["on the average"] if avg else []) + ([f"on {', '.join(envs)}"] if envs else []))
             + ("" if avg else " (not on the average)"))
    second = "beats random segments" if rows[4]["p_holm"] < 0.05 else "is not shown to beat random segments"
    return (f"{first} ({head}average {part(rows[0])}{sep}ALFWorld {part(rows[1])}{sep}"
            f"WebShop {part(rows[2])}{sep}SearchQA {part(rows[3])}), and {second} ({part(rows[4])}).")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "results", "premise_confirm"), help="the study folder")
    args = p.parse_args()
    res = load(args.out)
    write_csv(os.path.join(args.out, "runs.csv"), res)
    text = report(res, update_why(args.out, res), premise.choose(premise.load_studies()))
    with open(os.path.join(args.out, "confirm.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
