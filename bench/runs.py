"""The studies' training runs: launch them, skip finished ones, keep their summaries and warm starts.

    rc, secs = run_train(run_dir, ["--env", "keydoor", ...])     # train.py, output in run_dir/stdout.log
    save_summary(summary_path(out, study, name), protocol, summary)  # tracked by git, unlike run dirs
    summary = load_summary(path, protocol)                           # None, or SystemExit on a protocol clash
    run_jobs(jobs, warm, warm_start, launch, n, desc)                # warm starts first, then n side by side

Used by bench/compare.py, bench/credit_lab.py, bench/credit_phase.py and bench/credit_ladder.py.
A study is resumable: a run whose checkpoint reached --iters is not run again (`finished`), and a
finished run's summary is kept under <out>/summaries/<study>/ so a fresh clone rebuilds the report
without the run directories. `summarize_run` reads one run's metrics.jsonl; `unpaired_seeds` finds
seeds whose runs started from different warm starts (rebuilt on another machine), which a paired
comparison must leave out. Leaves out: scheduling across machines.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def finished(d: str, iters: int) -> bool:
    p = os.path.join(d, "checkpoint", "state.json")
    return os.path.exists(p) and json.load(open(p))["step"] >= iters


def summary_path(out: str, study: str, name: str) -> str:
    """Where a finished run's summary is kept (tracked by git, unlike the run directory)."""
    return os.path.join(out, "summaries", study, name + ".json")


def save_summary(path: str, protocol: dict, summary: dict) -> None:
    """Write {"protocol", "summary"} atomically (a sitting cut mid-write leaves the old file or none)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump({"protocol": protocol, "summary": summary}, f, indent=1)  # key order kept: the csv columns follow it
    os.replace(path + ".tmp", path)


def load_summary(path: str, protocol: dict) -> dict | None:
    """The summary kept at `path`, or None when there is none. A summary made under another protocol
    is refused with one line (SystemExit) rather than reused or silently run again."""
    if not os.path.exists(path):
        return None
    rec = json.load(open(path))
    diff = [f"{k}={rec['protocol'].get(k)!r} (this study: {v!r})" for k, v in protocol.items() if rec["protocol"].get(k) != v]
    if diff:
        raise SystemExit(f"{os.path.basename(os.path.dirname(path))}: the summary {path} was made with {diff[0]}; use another --out or remove it")
    return rec["summary"]


def run_train(d: str, flags: list[str], **env_vars) -> tuple[int, float]:
    """`train.py <flags> --out d`, its output appended to d/stdout.log; returns (rc, seconds)."""
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    with open(os.path.join(d, "stdout.log"), "a") as log:
        rc = subprocess.call([sys.executable, os.path.join(ROOT, "train.py"), *flags, "--out", d], cwd=ROOT,
                             stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", **env_vars))
    return rc, time.time() - t0


def run_jobs(jobs: list, warm: list, warm_start, launch, n: int, desc: str, name=str) -> None:
    """The studies' one run loop: every warm start of `warm` first (each once, `n` side by side),
    then `launch(job) -> message` for every job, `n` side by side, one progress line per finished
    job (bench/credit_lab.py, bench/credit_phase.py)."""
    from tqdm import tqdm
    with ThreadPoolExecutor(n) as ex:
        list(ex.map(lambda w: warm_start(*w), warm))
    bar = tqdm(total=len(jobs), desc=desc)
    with ThreadPoolExecutor(n) as ex:
        for j, msg in zip(jobs, ex.map(launch, jobs)):
            bar.update(1)
            bar.write(f"{name(j)}: {msg}")
    bar.close()


def warm_dir(args) -> str:
    """Where this study's warm starts are cached and loaded (`train.py --cache-dir`): beside its
    results, so they are committed with the summaries and the next machine loads the same weights."""
    return os.path.abspath(os.path.join(args.out, "warmstarts"))


def weights_id(folder: str) -> str | None:
    """The first 12 hex of the sha1 of `folder`'s model.safetensors (a warm start's identity), or None
    when it has none."""
    import hashlib
    w = os.path.join(folder, "model.safetensors")
    return hashlib.sha1(open(w, "rb").read()).hexdigest()[:12] if os.path.exists(w) else None


def warm_start_id(d: str) -> str | None:
    """`weights_id` of the warm start the run in `d` loaded (the folder its stdout.log names), or None
    when the log does not name one (e.g. a hand-made run)."""
    import re
    log = os.path.join(d, "stdout.log")
    if not os.path.exists(log):
        return None
    m = re.findall(r"cached warm start at (\S+)", open(log, errors="replace").read())
    return weights_id(m[-1]) if m else None


def summarize_run(d: str) -> dict | None:
    p = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(p):
        return None
    rows = [json.loads(l) for l in open(p) if l.strip()]
    ev = [r for r in rows if "eval/success" in r]
    tr = [r for r in rows if r.get("step", 0) > 0]
    if not ev or not tr:
        return None
    last = ev[-1:]                                       # the evaluation at the last update
    wall = sum(json.loads(l)["seconds"] for l in open(os.path.join(d, "wall.json"))) if os.path.exists(os.path.join(d, "wall.json")) else float("nan")
    gen = [r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0) for r in tr]
    return {"updates": tr[-1]["step"], "init_success": ev[0]["eval/success"],
            "final_success": sum(r["eval/success"] for r in last) / len(last),
            "final_score": sum(r.get("eval/score", r["eval/success"]) for r in last) / len(last),
            "tokens_per_update": sum(gen) / len(tr), "rollout_tokens_per_update": sum(r.get("tokens/rollout", 0) for r in tr) / len(tr),
            "verify_tokens_per_update": sum(r.get("tokens/verify", 0) for r in tr) / len(tr),
            "judge_tokens_per_update": sum(r.get("tokens/judge", 0) for r in tr) / len(tr),
            "policy_tokens_per_update": sum(r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) for r in tr) / len(tr),
            "env_steps_per_update": sum(r.get("env_steps/total", 0) for r in tr) / len(tr),
            # the judge's acceptance rate, pooled over the run: verified proposals with Δ̂ > 0
            "accept_rate": pooled_rate(tr, "prover/accept_rate", ("prover/valid", "prover/repaired")),
            "iter_seconds": sum(r.get("time/iter_s", 0) for r in tr) / len(tr), "wall_seconds": wall,
            "curve": [(r["step"], r["eval/success"]) for r in ev],
            "tok_curve": cum_tokens(rows), "warm_start": warm_start_id(d)}


def pooled_rate(rows, rate_key: str, count_keys: tuple) -> float:
    """A per-update rate pooled over a run, each update weighted by its count (the sum of
    count_keys): the share over all of the run's items, not the mean of per-update shares. NaN when
    the run has none (a method without a judge)."""
    num = den = 0.0
    for r in rows:
        if rate_key in r:
            w = sum(r.get(k, 0) for k in count_keys)
            num, den = num + w * r[rate_key], den + w
    return num / den if den else float("nan")


def cum_tokens(rows):
    out, cum = [], 0
    for r in rows:
        cum += r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)
        if "eval/success" in r:
            out.append((cum, r["eval/success"]))
    return out


def same_start(a: dict, b: dict) -> bool:
    """Did two runs' summaries start from the same warm start? The same weights hash where both
    recorded one; otherwise (summaries made before the hash was kept) the same update-0 reading, which
    paired runs share to the last digit (same warm start, same evaluation sampling seed)."""
    if a.get("warm_start") and b.get("warm_start"):
        return a["warm_start"] == b["warm_start"]
    return abs(a["init_success"] - b["init_success"]) <= 1e-9


def unpaired_seeds(res: dict, env: str) -> dict:
    """{seed: {method: held-out success at update 0}} for the seeds of `env` whose methods did not
    start from the same warm start, whose difference would carry the warm starts' gap; such a seed
    is left out of every Δ. The same start is the same weights hash where every run of the seed
    recorded one; otherwise (summaries made before the hash was kept) the same update-0 reading:
    paired runs share the warm start and the evaluation's sampling seed, so theirs agree to the last
    digit, and a warm start rebuilt on another machine reads differently."""
    inits: dict = {}
    ids: dict = {}
    for (e, m, s), r in res.items():
        if e == env:
            inits.setdefault(s, {})[m] = r["init_success"]
            ids.setdefault(s, {})[m] = r.get("warm_start")
    bad = {}
    for s, d in sorted(inits.items()):
        known = [i for i in ids[s].values() if i]
        differ = len(set(known)) > 1 if len(known) == len(ids[s]) else max(d.values()) - min(d.values()) > 1e-9
        if differ:
            bad[s] = d
    return bad
