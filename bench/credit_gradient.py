"""bench/credit_gradient.py — the credit ladder at the gradient: each method's batch policy gradient
against the exact-credit gradient, at a fixed policy (COCOA's measure, free of the optimizer).

    python bench/credit_gradient.py                                  # rooms 4, the rooms-16 seed-0 warm start
    python bench/credit_gradient.py --rooms 4 8 --repeats 16 --ref-batches 32
    python bench/credit_gradient.py --rooms 16 --policy results/checkpoints/keydoor-r16-grpo-s0-u15
    python bench/credit_gradient.py --config rooms=4,p_key=0.6,p_nokey=0.4 --policy WARM_START   # a ladder regime
    python bench/credit_gradient.py --methods grpo prover-plus prover-plus:lam=3 prover-plus:verify_crn=true   # option arms

Resumable: rows are written to the csv after every method, and a later call reuses every row whose
(config, policy, method, batches, g* batches, tasks, G) it repeats (the batches are seeded by their
index, so a reused row is the row this call would compute).

Procedure, per configuration (keydoor `rooms`, or `--config`: comma-separated keydoor options, as
bench/credit_phase.py's cells) and policy (a model folder, `--policy`):
    1. the reference g* = mean over `--ref-batches` independent batches of the exact-credit
       gradient  ĝ_oracle = (1/N) Σ_turns A*(s_t, a_t) ∇ log π(a_t | s_t)   (N = action tokens,
       token-mean as the trainer's loss at ratio 1); A* from oracle.py for this policy
    2. for each method, `--repeats` independent batches (`--tasks` tasks × G = `--group` rollouts,
       the trainer's sampling): the method's advantages (methods.credit_fn, exactly what a training
       update would use), then its gradient ĝ_m the same way
    3. per method: cosine(ĝ_m, g*) averaged over batches; bias = 1 − cosine(mean_b ĝ_m, g*) (what
       averaging batches cannot remove); SNR = |mean ĝ_m|² / mean |ĝ_m − mean ĝ_m|² (signal per
       batch over its noise); tokens = generated tokens per batch (rollouts + verification + judge)

The gradient is that of Σ A·log π only (no clipping, no KL: at ratio 1 PPO-clip's gradient is
this one). Leaves out: mid-training checkpoints unless given with --policy (each folder is one
policy); the methods' costs beyond generated tokens. Writes results/credit_gradient/credit_gradient.{md,csv}.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from infra import build  # noqa: E402
import config  # noqa: E402
import grpo  # noqa: E402
import methods  # noqa: E402
import train  # noqa: E402
from lab import ladder  # noqa: E402
from rollout import rollout_groups  # noqa: E402

ORACLE_REV = ladder.REVISION["oracle"]
# What "tokens" counts: the generated tokens of rollouts, verification and the judge's answers — the
# same counters the trainer's ladder sums (bench/credit_lab.py's tokens_per_update). Revision 1
# summed every tokens/* counter, which took in tokens/judge_prompt (what an LLM judge reads, summed
# over its calls): rows of revision 1 overstate the judged methods' tokens and are marked in the md.
GENERATED = ("tokens/rollout", "tokens/verify", "tokens/judge")
TOKENS_REV = 2
DEFAULT_POLICY = os.path.join(ROOT, "results", "warmstarts", "tiny-keydoor-b3062f60c292")
METHODS = ["grpo", "oracle-rb", "prover", "prover-exact", "prover-plus", "prover-plus-exact", "oracle-add", "oracle",
           "grpo-matched", "gigpo", "spo-chain"]
COLUMNS = ["config", "policy", "method", "tokens", "cosine", "cosine_sd", "bias", "snr", "batches", "ref_batches", "tasks", "group",
           "oracle_rev", "tokens_rev"]


def load_rows(path: str) -> list[dict]:
    """Finished rows of earlier sittings (the csv), so a study can be built up over several: a row is
    reused when its (config, policy, method, batches, ref_batches, tasks, group) match this call's.
    Reuse is exact because every batch's tasks and sampling seeds are fixed by its index (g* too)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    num = {"tokens", "cosine", "cosine_sd", "bias", "snr"}
    for r in rows:                   # rows from before the column: g* and the oracle rows used revision 1
        r["oracle_rev"] = r.get("oracle_rev") or "1"
        r["tokens_rev"] = r.get("tokens_rev") or "1"    # rows from before the column counted the judge's prompt
    return [{k: (float(v) if k in num else int(v) if k in ("batches", "ref_batches", "tasks", "group", "oracle_rev", "tokens_rev") else v)
             for k, v in r.items()} for r in rows if r.get("ref_batches")]       # rows of the old format: dropped


def row_key(r: dict) -> tuple:
    """A row is reused only under the same settings and the same revisions of the exact credit behind
    g* (ladder.REVISION["oracle"]: 2 keeps the update's format penalty, 1 did not) and of the token
    count (TOKENS_REV)."""
    return (r["config"], r["policy"], r["method"], r["batches"], r["ref_batches"], r["tasks"], r["group"], r["oracle_rev"],
            r["tokens_rev"])


def flat_grad(model, groups, adv, pad_id: int, temperature: float, micro_tokens: int = 8192) -> torch.Tensor:
    """∇ (1/N) Σ_tokens A·log π at the current weights, flattened. N counts every action token; rows
    with A = 0 add nothing and are skipped; the rest run in micro-batches of ≤ micro_tokens padded
    tokens, sorted by length (the trainer's way: one padded batch of a long benchmark's turns costs
    several times more)."""
    rows = grpo.rows_from(groups, adv)
    n = sum(len(r.action_ids) for r in rows)
    rows = sorted((r for r in rows if r.adv != 0.0), key=lambda r: len(r.prompt_ids) + len(r.action_ids))
    model.zero_grad(set_to_none=True)
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and (j + 1 - i) * (len(rows[j].prompt_ids) + len(rows[j].action_ids)) <= micro_tokens:
            j += 1
        ids, attn, mask, _, a = grpo.collate(rows[i:j], pad_id)
        lp = grpo.token_logprobs(model, ids, attn, mask, temperature)      # (B, T-1)
        ((lp * a * mask).sum() / max(1, n)).backward()
        i = j
    g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return g.detach().clone()


def sample(tr, method: str, b: int, run) -> tuple[list, list]:
    """Batch b's rollouts and GRPO advantages (tasks and sampling seeded by b alone, so every arm's
    batch b plays the same rollouts), with `run` set up for `method`'s credit at step b."""
    cfg = tr.cfg
    tasks = [hash((b, k, 0xBA7C)) % 10**6 for k in range(cfg.tasks_per_iter)]
    groups = rollout_groups(run.agent, tr.train_envs, tasks, cfg.group_size, cfg.temperature, seed=hash((b, 0x5EED)) & 0x7FFFFFFF)
    adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    base, settings = arm_settings(method)
    run.cfg = dataclasses.replace(cfg, method=base, **settings)
    run.step, run.proposals, run.records = b, [], []
    return groups, adv


def generated(run) -> int:
    return sum(run.agent.counter[k] for k in GENERATED)


def batch(tr, method: str, b: int, run) -> tuple[torch.Tensor, int]:
    """One batch of `method`: rollouts, GRPO advantages, the method's credit, the gradient."""
    before = generated(run)
    groups, adv = sample(tr, method, b, run)
    methods.credit_fn(run.cfg.method)(groups, adv, run)
    tokens = generated(run) - before
    return flat_grad(tr.model, groups, adv, tr.tok.pad_token_id, tr.cfg.temperature), tokens


def credit_phase_module():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import credit_phase
    return credit_phase


def arm_settings(arm: str) -> tuple[str, dict]:
    """An arm as bench/credit_phase.py names it, METHOD[:KEY=VALUE,...] → (method, {config field: typed
    value}): the batch's config gets those settings (e.g. prover-plus:lam=3 or prover-plus:verify_crn=true),
    so an option's gradient is measured on the same batches as the methods'."""
    method, flags = credit_phase_module().parse_arm(arm)
    if not flags:
        return method, {}
    given = vars(config.build_parser(suppress_defaults=True).parse_args(flags))
    return method, given


def cell_argv(conf: str) -> list[str]:
    """A configuration is a bench/credit_phase.py cell: keydoor options go to --env-opt, train.py
    settings (e.g. reward=score, which the apples need) to their flags — so a ladder regime's cell is
    given here verbatim. One clear line for a key that is neither."""
    opts, flags = credit_phase_module().parse_cell(conf)
    return [*[x for o in opts for x in ("--env-opt", o)], *flags]


def fixed_policy(argv: list[str], prefix: str):
    """train.setup for a fixed policy folder (`--model` in argv) on the CPU with one thread (with
    --model, --threads 0 would take every core, and two benches side by side would fight over them),
    the tiny policy's own prompt (a --model run defaults to the chat prompt), and ProVer's judge for
    the judged arms; the run's files (segments.md etc.) go to a scratch folder."""
    import tempfile
    cfg = config.parse_args([*argv, "--device", "cpu", "--threads", "1"])
    config.validate(cfg)
    cfg.out = tempfile.mkdtemp(prefix=prefix)
    cfg.chat_prompt = False
    tr = train.setup(cfg, lambda *a, **k: None)
    tr.run.agent.compact = True
    tr.run.judge = build.judge_setup(dataclasses.replace(cfg, method="prover"), tr.model, tr.tok)
    return tr


def cos(a, b) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm() + 1e-30))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--rooms", type=int, nargs="+", default=[4])
    ap.add_argument("--config", nargs="+", default=[],
                    help="configurations as bench/credit_phase.py cells: comma-separated keydoor options and train.py "
                         "settings (e.g. rooms=4,p_key=0.6,p_nokey=0.4 or rooms=4,apples=1,reward=score); replaces --rooms when given")
    ap.add_argument("--policy", nargs="+", default=[DEFAULT_POLICY], help="model folders (warm starts, checkpoints)")
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--repeats", type=int, default=8, help="batches per method")
    ap.add_argument("--ref-batches", type=int, default=16, help="batches of exact credit behind g*")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "credit_gradient", "credit_gradient"))
    args = ap.parse_args(argv)
    bad = [m for m in args.methods if arm_settings(m)[0] not in methods.METHODS]
    if bad:
        raise SystemExit(f"credit_gradient: unknown method {bad[0]} (train.py has: {', '.join(methods.METHODS)})")
    credit_phase_module().check_arms(args.methods, "credit_gradient")
    for p in args.policy:
        if not os.path.exists(os.path.join(p, "config.json")):
            raise SystemExit(f"credit_gradient: --policy {p}: no model folder (config.json)")
    torch.set_num_threads(1)
    out_rows, t0 = load_rows(args.out + ".csv"), time.time()
    done = {row_key(r) for r in out_rows}
    from tqdm import tqdm
    configs = args.config or [f"rooms={r}" for r in args.rooms]
    for conf in configs:                         # checked before any policy is loaded
        try:
            config.validate(config.parse_args(["--env", "keydoor", *cell_argv(conf)]))
        except (ValueError, SystemExit) as e:
            raise SystemExit(f"credit_gradient: --config {conf}: {e}")
    for conf in configs:
        for pol in args.policy:
            tr = fixed_policy(["--env", "keydoor", *cell_argv(conf), "--model", pol, "--tasks-per-iter", str(args.tasks),
                               "--group-size", str(args.group)], "credit_gradient-")
            name = os.path.relpath(pol, ROOT)
            todo = [m for m in args.methods if row_key({"config": conf, "policy": name, "method": m,
                                                        "batches": args.repeats, "ref_batches": args.ref_batches,
                                                        "tasks": args.tasks, "group": args.group,
                                                        "oracle_rev": ORACLE_REV, "tokens_rev": TOKENS_REV}) not in done]
            if not todo:
                print(f"{conf} {name}: every method done (reused from {args.out}.csv)")
                continue
            ref = [batch(tr, "oracle", 10_000 + b, tr.run)[0] for b in tqdm(range(args.ref_batches), desc=f"{conf} g*", mininterval=5)]
            g_star = torch.stack(ref).mean(0)
            for m in todo:
                gs, toks = [], []
                for b in tqdm(range(args.repeats), desc=f"{conf} {m}", mininterval=5):
                    g, n = batch(tr, m, b, tr.run)
                    gs.append(g)
                    toks.append(n)
                G = torch.stack(gs)
                mean = G.mean(0)
                noise = ((G - mean) ** 2).sum(1).mean()
                cs = [cos(g, g_star) for g in gs]
                mc = sum(cs) / len(cs)
                row = {"config": conf, "policy": name, "method": m, "tokens": sum(toks) / len(toks),
                       "cosine": mc, "cosine_sd": math.sqrt(sum((c - mc) ** 2 for c in cs) / max(1, len(cs) - 1)),
                       "bias": 1 - cos(mean, g_star), "snr": float(mean.norm() ** 2 / noise) if noise > 0 else float("inf"),
                       "batches": len(gs), "ref_batches": args.ref_batches, "tasks": args.tasks, "group": args.group,
                       "oracle_rev": ORACLE_REV, "tokens_rev": TOKENS_REV}
                # a row of an older token count with the same settings is superseded (its batches are
                # these batches: only the tokens column differed)
                out_rows[:] = [r for r in out_rows if row_key(r)[:-1] != row_key(row)[:-1]]
                out_rows.append(row)
                print(out_rows[-1])
                write(args, out_rows, time.time() - t0)       # after every row: a stopped sitting loses one method
    write(args, out_rows, time.time() - t0)
    print(f"wrote {args.out}.md and {args.out}.csv")


def write(args, out_rows: list[dict], seconds: float) -> None:
    """The csv and the md table, rows ordered by config, policy and the ladder's method order."""
    order = {m: i for i, m in enumerate(METHODS)}
    def rooms_of(c: str) -> int:
        return next((int(x.split("=")[1]) for x in c.split(",") if x.startswith("rooms=")), 8)
    out_rows.sort(key=lambda r: (rooms_of(r["config"]), r["config"], r["policy"], order.get(r["method"], len(order))))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in out_rows:
            w.writerow({k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in r.items()})
    lines = ["# The credit ladder at the gradient", "",
             f"Last sitting: `python bench/credit_gradient.py {' '.join(sys.argv[1:])}`; the rows of earlier sittings are kept "
             "(and reused when a call repeats their settings); each row says its batches and g*'s batches (4 tasks × G = 8 "
             "unless `tasks`/`group` in the csv say otherwise).", "",
             f"g* = mean exact-credit (A*) gradient over `ref_batches` batches; each method `batches` batches of "
             f"`tasks` tasks × G; this sitting {seconds / 60:.1f} min on {os.cpu_count()} CPU cores. "
             "cosine: mean over batches of cos(ĝ_m, g*) (± its SD over batches); bias: 1 − cos(mean ĝ_m, g*); "
             "SNR: |mean ĝ_m|² / mean |ĝ_m − mean ĝ_m|². The oracle row's cosine is against a reference built from "
             "its own kind of batches (independent ones), so it is the ceiling at this batch size. A* rev: the revision "
             "of the exact credit behind g* and the oracle arms (ladder.REVISION; 1 = before the arm kept the update's "
             "format penalty, which changes only the turns without action tags). tokens / batch: generated tokens "
             "(rollouts, verification, the judge's answers); a † marks a row of token-count revision 1, which also "
             "counted the judge's prompt tokens (read, not generated), so it overstates a judged method's cost.", "",
             "| config | policy | method | tokens / batch | cosine | bias | SNR | batches | g* batches | A* rev |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out_rows:
        tok = f"{r['tokens']:.0f}" + ("†" if r["tokens_rev"] < TOKENS_REV else "")
        lines.append(f"| {r['config']} | {r['policy']} | {r['method']} | {tok} | {r['cosine']:.3f} ± {r['cosine_sd']:.3f} | "
                     f"{r['bias']:.3f} | {r['snr']:.3f} | {r['batches']} | {r['ref_batches']} | {r['oracle_rev']} |")
    open(args.out + ".md", "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
