"""bench/same_outputs.py — do short fixed-seed runs give byte-identical outputs?

    python bench/same_outputs.py record results/same_outputs/before   # before a refactor
    python bench/same_outputs.py record /tmp/after                    # after it
    python bench/same_outputs.py record /tmp/after keydoor-prover-crn # only the runs named
    python bench/same_outputs.py compare results/same_outputs/before /tmp/after

A refactor that moves code must not change what a run computes. The runs below cover the
paper's method on ALFWorld and with λ = 3 on the credit lab, every option beyond the paper on the
credit lab (prover-plus included), and a baseline on WebShop; each builds its own warm start in a
fresh cache folder (so the warm-start code is exercised too) and runs 2 updates with one process (`--workers 1`). `compare` checks, per run,
that metrics.jsonl (keys in order; the time/* keys left out: wall-clock times differ), records.jsonl and
segments.md are identical, and that the final checkpoint's weights are bitwise equal (a hash
of every tensor's bytes). Bit-identity holds on one machine: another CPU's BLAS kernels may
round differently, so record and compare on the same machine. `compare --ignore KEY ...` leaves
out metric keys a deliberate change moved (say which, and why, where you report it).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--iters", "2", "--workers", "1", "--eval-every", "1", "--eval-episodes", "8", "--tasks-per-iter", "4",
         "--bc-episodes", "40", "--bc-steps", "60", "--bc-target", "0", "--seed", "3"]
RUNS = {
    "alfworld-prover": ["--env", "alfworld", "--method", "prover", "--max-steps", "12"],
    "keydoor-prover-plus": ["--env", "keydoor", "--method", "prover-plus", "--negative-credit",
                            "--credit-scope", "matched", "--verify-k", "2"],
    "webshop-gigpo": ["--env", "webshop", "--method", "gigpo"],
    # the paper's path with λ = 3 (the bonus λ·Δ̂ differs from Δ̂), and every ProVer option at least once
    "keydoor-prover-lam3": ["--env", "keydoor", "--method", "prover", "--lam", "3", "--verify-k", "2"],
    "keydoor-prover-crn": ["--env", "keydoor", "--method", "prover", "--judge", "random", "--credit-test", "shrink",
                           "--focus", "0.5", "--verify-crn", "--verify-k-max", "6", "--verify-k", "2",
                           "--judge-max", "2", "--lam", "2", "--max-success", "7"],
    "keydoor-prover-pooled": ["--env", "keydoor", "--method", "prover", "--credit-test", "se", "--verify-k-max", "4",
                              "--verify-k", "2", "--verify-estimate", "pooled", "--negative-credit",
                              "--judge-success", "judge", "--max-success", "7"],
    "keydoor-prover-trust": ["--env", "keydoor", "--method", "prover", "--trust-judge", "0.5", "--credit-scope",
                             "matched", "--margin", "0.1", "--credit-test", "shrink", "--focus", "0.5", "--lam", "2",
                             "--verify-k", "2"],
}
FILES = ("metrics.jsonl", "records.jsonl", "segments.md")


def weights_hash(run_dir: str) -> str:
    """sha256 over the final checkpoint's tensors (names, dtypes and bytes, sorted by name)."""
    from safetensors.torch import load_file
    ck = os.path.join(run_dir, "checkpoint")
    h = hashlib.sha256()
    for f in sorted(x for x in os.listdir(ck) if x.endswith(".safetensors")):
        sd = load_file(os.path.join(ck, f))
        for k in sorted(sd):
            t = sd[k].contiguous()
            h.update(k.encode() + str(t.dtype).encode() + t.view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def record(out: str, names: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    for name in names or RUNS:
        args = RUNS[name]
        run_dir = os.path.join(out, name)
        cache = tempfile.mkdtemp(prefix="same-outputs-cache-")
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), *args, *SMALL, "--out", run_dir, "--cache-dir", cache]
        print(" ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONHASHSEED="0"))
        with open(os.path.join(run_dir, "weights.sha256"), "w") as f:
            f.write(weights_hash(run_dir) + "\n")


def _read(path: str, name: str, ignore: tuple = ()) -> object:
    p = os.path.join(path, name)
    if not os.path.exists(p):
        return None
    drop = lambda k: k.startswith("time/") or k in ignore       # noqa: E731  (wall-clock times differ run to run)
    if name == "metrics.jsonl":       # keys compared in order
        return [[(k, v) for k, v in json.loads(line).items() if not drop(k)] for line in open(p)]
    if name == "records.jsonl" and ignore:     # a record carries the update's metrics row under "stats"
        recs = [json.loads(line) for line in open(p)]
        for r in recs:
            r["stats"] = [(k, v) for k, v in (r.get("stats") or {}).items() if not drop(k)]
        return recs
    return open(p, "rb").read()


def compare(a: str, b: str, ignore: tuple = ()) -> int:
    bad = 0
    for name in RUNS:
        for f in (*FILES, "weights.sha256"):
            x, y = _read(os.path.join(a, name), f, ignore), _read(os.path.join(b, name), f, ignore)
            same = x == y
            bad += not same
            print(f"{name:22s} {f:16s} {'identical' if same else 'DIFFERENT'}"
                  + ("" if x is not None else " (absent in both)" if y is None else ""))
    print("all identical" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("names", nargs="*", help="runs to record (default: all): " + ", ".join(RUNS))
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--ignore", nargs="*", default=[], help="metric keys a deliberate change moved (named in the log)")
    args = ap.parse_args()
    if args.cmd == "record":
        if set(args.names) - set(RUNS):
            ap.error(f"unknown run(s) {sorted(set(args.names) - set(RUNS))}: choose from {', '.join(RUNS)}")
        record(args.out, args.names)
    else:
        raise SystemExit(compare(args.a, args.b, tuple(args.ignore)))


if __name__ == "__main__":
    main()
