"""bench/warmstart_speed.py — wall time of the tiny policy's warm start, one process vs data parallel.

    python bench/warmstart_speed.py                      # ALFWorld default, seed 1, 1 and 2 workers
    python bench/warmstart_speed.py --seed 0 --workers 1,2 --extra "--tiny-hidden 128"

The warm start (tokenizer + random-init Qwen3 + behaviour cloning until the held-out success check
reaches --bc-target, see warmstart.py) is what a user waits for before the first GRPO update, and the
issue allows it 5 minutes on 2 cores. With local workers it is data parallel (each rank clones on
half of every batch and plays half of the success checks), which should take the same number of
steps to the same policy in less time. This runs `train.py --iters 0 --eval-every 0` (the warm
start and nothing else) with an empty cache for each worker count, reads the cache's `done.json`
(seconds, BC steps, the checks) and the process wall time, prints a table and writes
results/speed/warmstart.json. Run it alone on the machine: it is a timing.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(workers: int, seed: int, extra: list[str], env: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="prover-warmstart-") as tmp:
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--env", env, "--seed", str(seed), "--iters", "0",
               "--eval-every", "0", "--workers", str(workers), "--cache-dir", os.path.join(tmp, "cache"),
               "--out", os.path.join(tmp, "run"), *extra]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                           env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1"))
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"bench/warmstart_speed.py: `{shlex.join(cmd)}` failed (rc {r.returncode}): {(r.stderr.strip().splitlines() or [''])[-1]}")
        done = glob.glob(os.path.join(tmp, "cache", "*", "done.json"))
        if len(done) != 1:
            sys.exit(f"bench/warmstart_speed.py: expected one warm start in the cache, found {len(done)}")
        d = json.load(open(done[0]))
    last = d["checks"][-1] if d["checks"] else {}
    return {"workers": workers, "warm_start_s": round(d["seconds"], 1), "process_s": round(wall, 1),
            "bc_steps": d["steps"], "demo_steps": d["demos"], "stop_success": last.get("success"),
            "final_loss": round(d["final_loss"], 4)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="alfworld")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts to time")
    p.add_argument("--extra", default="", help="further train.py flags, e.g. \"--tiny-hidden 128\"")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "speed", "warmstart.json"))
    a = p.parse_args()
    try:
        counts = [int(w) for w in a.workers.split(",")]
    except ValueError:
        sys.exit(f"bench/warmstart_speed.py: --workers {a.workers!r}: expected comma-separated integers")
    rows = [one(w, a.seed, shlex.split(a.extra), a.env) for w in counts]
    print(f"warm start of `train.py --env {a.env} --seed {a.seed}{' ' + a.extra if a.extra else ''}` ({os.cpu_count()} CPUs)")
    print("| workers | warm start s | process s | BC steps | success at stop | final loss |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['warm_start_s']} | {r['process_s']} | {r['bc_steps']} | {r['stop_success']} | {r['final_loss']} |")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"env": a.env, "seed": a.seed, "extra": a.extra, "cpus": os.cpu_count(), "runs": rows}, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
