"""bench/adaptive_bias.py — how biased is adaptive K's Δ̂, and does the fresh batch remove it?

    python bench/adaptive_bias.py                       # q ∈ {0.2, 0.5, 0.8}, CRN off/on, 400 estimates each
    python bench/adaptive_bias.py --n 100 --out /tmp    # quicker

Setting: keydoor with 3 rooms, the key in room 1, no distractors, the door opening with p_key = 0.9
holding the key and p_nokey = 0.1 without. A scripted policy takes the key with probability q when
it is offered and otherwise walks to the door, so the segment "take key" has the analytic value

    A_seg = V(after) − V(before) = p_key − (q·p_key + (1 − q)·p_nokey) = (1 − q)(p_key − p_nokey)

(the step limit never binds here). For each (q, CRN) this calls verify_options.estimate `--n` times with
independent seeds and reports the mean Δ̂, its Monte Carlo SE, the bias against A_seg in SEs and
the continuations spent per side, for four estimators:

    fixed-2     one round of K = 2 per side (the paper's procedure at a small K)
    fixed-16    one round of K = 16
    pooled      adaptive K: rounds of 2 until |Δ̂| clears z·SE (z = 1) or 16 per side; Δ̂ over the
                stopping rounds (`--verify-estimate pooled`)
    fresh       the same stopping rounds choose k; Δ̂ from a second, independent batch of k per side
                (`--verify-estimate fresh`, the default with --verify-k-max)

A fixed round is unbiased; stopping on the observed Δ̂ keeps the rounds whose noise pushed |Δ̂| past
z·SE, so pooled is biased away from 0; the fresh batch is independent of the stopping decision,
so E[Δ̂ | k] = A_seg. Writes results/adaptive_bias/adaptive_bias.{md,csv} (--out: the folder). Scripted policy, no model:
seconds per setting.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import envs  # noqa: E402
from methods import verify_options  # noqa: E402
from infra import warmstart  # noqa: E402
from infra.policy import Sample  # noqa: E402
from rollout import Agent, rollout_groups  # noqa: E402

P_KEY, P_NOKEY = 0.9, 0.1
ESTIMATORS = {            # name: verify_options.estimate keyword arguments
    "fixed-2": dict(K=2),
    "fixed-16": dict(K=16),
    "pooled": dict(K=2, k_max=16, fresh=False),
    "fresh": dict(K=2, k_max=16, fresh=True),
}


class ScriptedPolicy:
    """A generation backend with a known action distribution: `take key` with probability q when it
    is admissible (drawn from the row's seed, so CRN's shared seeds share the choice), else `open
    door` where it is admissible, else `go forward`. `choose(prompt text, rng) -> action` replaces
    that rule with any other known one (tests use it on ALFWorld)."""

    def __init__(self, tok, q: float = 0.5, choose=None):
        self.tok, self.q, self.choose = tok, q, choose or self.key_rule

    def key_rule(self, prompt: str, rng: random.Random) -> str:
        acts = prompt.rsplit("actions:", 1)[-1]      # the current admissible list
        a = "open door" if "open door" in acts else "go forward"
        return "take key" if "take key" in acts and rng.random() < self.q else a

    def sync(self, model):
        pass

    def generate(self, prompts, max_new_tokens, temperature, seed=None, row_seeds=None):
        out = []
        for i, p in enumerate(prompts):
            rng = random.Random(row_seeds[i] if row_seeds is not None else hash((seed, i)))
            a = self.choose(self.tok.decode(p), rng)
            ids = self.tok(f"<action>{a}</action><|im_end|>", add_special_tokens=False)["input_ids"]
            out.append(Sample(ids, [0.0] * len(ids)))
        return out


def setting(q: float, pool_size: int = 48):
    """(agent, env pool, a trajectory that took the key, the key turn) for policy q; the pool must
    hold 2·K envs for K continuations per side."""
    spec = envs.get_spec("keydoor")
    tok = warmstart.build_tokenizer(spec.vocabulary() + warmstart.template_texts(spec))
    pool = [spec.make(split="train", seed=0, rooms=3, pivot=1, distractors=0, p_key=P_KEY, p_nokey=P_NOKEY)
            for _ in range(pool_size)]
    agent = Agent(ScriptedPolicy(tok, q), tok, spec)
    for s in range(200):
        tr = rollout_groups(agent, pool, [s % 7], 1, 1.0, seed=s)[0][0]
        turn = next((tn.t for tn in tr.turns if tn.action == "take key"), None)
        if turn is not None:
            return agent, pool, tr, turn
    raise RuntimeError(f"q={q}: no trajectory took the key in 200 tries")


def measure(q: float, crn: bool, name: str, n: int) -> dict:
    agent, pool, tr, turn = setting(q)
    kw = ESTIMATORS[name]
    deltas, spent = [], []
    for s in range(n):
        v = verify_options.estimate(agent, pool, tr, turn, turn, kw["K"], 1.0, seed=1000 + s, crn=crn,
                                    k_max=kw.get("k_max", 0), z=1.0, fresh=kw.get("fresh", False))
        deltas.append(v.delta)
        spent.append(v.k + v.k_stop)              # fresh also spent the stopping rounds' k_stop
    m = sum(deltas) / n
    se = math.sqrt(sum((d - m) ** 2 for d in deltas) / (n - 1) / n)
    true = (1 - q) * (P_KEY - P_NOKEY)
    return {"q": q, "crn": crn, "estimator": name, "n": n, "true": true, "mean": m, "mc_se": se,
            "bias": m - true, "bias_z": (m - true) / se if se > 0 else float("nan"),
            "continuations_per_side": sum(spent) / n}


def main():
    p = argparse.ArgumentParser(description="adaptive K's bias against the analytic segment value (scripted keydoor policy)")
    p.add_argument("--q", nargs="+", type=float, default=[0.2, 0.5, 0.8], help="the policy's key probability")
    p.add_argument("--n", type=int, default=400, help="estimates per (q, CRN, estimator)")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "adaptive_bias"))
    args = p.parse_args()
    if args.n < 2 or not all(0 <= q < 1 for q in args.q):
        raise SystemExit("adaptive_bias: --n must be >= 2 and every --q in [0, 1)")
    t0 = time.time()
    rows = [measure(q, crn, name, args.n) for q in args.q for crn in (False, True) for name in ESTIMATORS]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "adaptive_bias.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["# Adaptive K: the bias of Δ̂ against the analytic value", "",
             "Command: `" + " ".join(["python", "bench/adaptive_bias.py", *sys.argv[1:]]) + "`", "",
             f"keydoor rooms 3, p_key {P_KEY}, p_nokey {P_NOKEY}; scripted policy (key with probability q); segment = "
             f"the key turn, A_seg = (1 − q)(p_key − p_nokey); {args.n} estimates per row with independent seeds; adaptive: "
             f"rounds of 2 up to 16 per side, z = 1. bias z = (mean − A_seg) / MC SE. continuations / side: all spent "
             f"(fresh: the stopping rounds and the second batch). {time.time() - t0:.0f} s.", "",
             "| q | CRN | estimator | A_seg | mean Δ̂ | MC SE | bias | bias z | continuations / side |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['q']:.1f} | {'on' if r['crn'] else 'off'} | {r['estimator']} | {r['true']:.3f} | {r['mean']:.3f} | "
                     f"{r['mc_se']:.3f} | {r['bias']:+.3f} | {r['bias_z']:+.1f} | {r['continuations_per_side']:.1f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "adaptive_bias.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
