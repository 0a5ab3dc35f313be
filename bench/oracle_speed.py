"""bench/oracle_speed.py — how long the exact DP (oracle.py) takes with each way of scoring the policy.

    python bench/oracle_speed.py                        # rooms 4 and 8, the committed rooms-16 warm start
    python bench/oracle_speed.py --rooms 4 8 12 --repeats 3

Per corridor length: V^π at the start state of one test task, solved from scratch (a fresh Oracle,
so nothing is cached) with `oracle.ModelPolicy(share_prompt=False)` (one row prompt + response per
candidate action) and with `share_prompt=True` (each view's prompt once, its K/V copied to every
candidate). Reports the wall seconds of each (the minimum over --repeats: the least disturbed run),
the seconds inside the policy's scoring, the views scored, the candidate rows, and |ΔV| between the
two (they compute the same probabilities; it should be float rounding). One thread, so two cores can
hold it and another job. Writes results/speed/oracle_speed.json (--out: the folder).

Leaves out: the pruning threshold's effect (eps fixed at the trainer's default) and batches of many
roots (a training update solves from every turn of its batch; the shared work is the same kind).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import envs  # noqa: E402
from sims import keydoor  # noqa: E402
from lab import oracle  # noqa: E402
import rollout  # noqa: E402

WARM = os.path.join(ROOT, "results", "warmstarts", "tiny-keydoor-b3062f60c292")


class Timed:
    """Wraps a policy and adds up the seconds spent inside it."""

    def __init__(self, policy):
        self.policy, self.seconds = policy, 0.0

    def __call__(self, views):
        t = time.perf_counter()
        out = self.policy(views)
        self.seconds += time.perf_counter() - t
        return out


def measure(model, agent, rooms: int, share: bool, repeats: int) -> dict:
    kw = {"rooms": rooms, "p_key": 0.6, "p_nokey": 0.4}
    env = keydoor.make(split="test", seed=0, **kw)
    s0 = rollout.start_state(env, 0)
    best = None
    for _ in range(repeats):
        pol = oracle.ModelPolicy(model, agent, 1.0, share_prompt=share)
        timed = Timed(pol)
        orc = oracle.Oracle(kw, timed, history_len=agent.history_len)
        t = time.perf_counter()
        v = orc.values([s0])[0]
        r = {"seconds": time.perf_counter() - t, "policy_seconds": timed.seconds, "views": orc.stats["scored"],
             "rows": pol.rows, "value": v}
        best = r if best is None or r["seconds"] < best["seconds"] else best
    return best


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description="time the exact DP with plain and shared-prompt scoring")
    p.add_argument("--rooms", nargs="+", type=int, default=[4, 8])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmstart", default=WARM, help="model folder of the policy")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "speed"))
    args = p.parse_args(argv)
    if not os.path.isdir(args.warmstart):
        raise SystemExit(f"oracle_speed: --warmstart {args.warmstart}: no such model folder")
    for r in args.rooms:
        try:
            keydoor.check_params(rooms=r, pivot=0, p_key=0.6, p_nokey=0.4, distractors=1, trap=0.0, expert_key=0.5)
        except ValueError as e:
            raise SystemExit(f"oracle_speed: --rooms {r}: {e}")
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from infra.policy import HFGenerator
    tok = AutoTokenizer.from_pretrained(args.warmstart, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.warmstart, dtype=torch.float32)
    agent = rollout.Agent(HFGenerator(model, tok), tok, envs.get_spec("keydoor"), history_len=2, max_new_tokens=12)
    rows = []
    for r in args.rooms:
        plain = measure(model, agent, r, False, args.repeats)
        shared = measure(model, agent, r, True, args.repeats)
        row = {"rooms": r, "plain": plain, "shared": shared, "speedup": plain["seconds"] / shared["seconds"],
               "policy_speedup": plain["policy_seconds"] / shared["policy_seconds"],
               "abs_value_diff": abs(plain["value"] - shared["value"])}
        rows.append(row)
        print(f"rooms {r}: {plain['views']} views, {plain['rows']} candidate rows; DP {plain['seconds']:.2f} s plain → "
              f"{shared['seconds']:.2f} s shared ({row['speedup']:.2f}×; scoring {plain['policy_seconds']:.2f} → "
              f"{shared['policy_seconds']:.2f} s, {row['policy_speedup']:.2f}×); |ΔV| {row['abs_value_diff']:.1e}")
    out = {"warmstart": os.path.relpath(args.warmstart, ROOT), "threads": 1, "repeats": args.repeats,
           "date": time.strftime("%Y-%m-%d"), "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "oracle_speed.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {os.path.join(args.out, 'oracle_speed.json')}")
    return out


if __name__ == "__main__":
    main()
