"""train.py — the training loop: rollouts → credit (GRPO / ProVer / baselines) → PPO-clip update.

    python train.py --env alfworld                     # laptop CPU: tiny policy, built-in games, ProVer
    python train.py --env alfworld --method grpo       # the baseline, same cost accounting
    python train.py --env keydoor --env-opt rooms=8    # the credit lab (known pivotal decisions)
    python train.py --env alfworld --model Qwen/Qwen3.5-2B --rollout vllm --judge openai   # GPU
    python train.py --help                             # every flag, with its meaning

One iteration (numbered as in `train()` below and in DESIGN.md §3):
    1. sample `tasks_per_iter` training tasks; roll out G episodes of each with the current policy
    2. GRPO group advantages A_i = R_i − mean_g R, broadcast to every turn of trajectory i
    3. method-specific credit on top (ProVer: judge → verify → +λ·Δ̂ on the segment's turns)
    4. one PPO-clip update on the action tokens, then sync the rollout engine
    5. evaluate every `eval_every` updates on a held-out split at low temperature
    6. log the update's credit record (records.jsonl, records.py), a metrics row (metrics.jsonl,
       and --log's TensorBoard / wandb), checkpoint atomically (every update for the tiny policy,
       see --checkpoint-every); curves.png and report.html (report.py) are redrawn after each
       evaluation and at the end

Run directory (`--out`, see rundir.py): config.json, metrics.jsonl, records.jsonl, curves.png,
report.html, segments.md (ProVer, CriticSearch), errors.log, checkpoint/, .lock (one run at a time:
a second run on a directory in use refuses). `--resume` continues from the checkpoint.
Process management (local workers, torchrun, signals) lives in dist.py; the tiny policy's warm
start in warmstart.py.
"""
from __future__ import annotations

import copy
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from methods import baselines  # noqa: E402  (the env variables above must be set before transformers loads)
from infra import build  # noqa: E402
from config import CHOICES, ENV_DEFAULTS, Config, parse_args, validate  # noqa: E402,F401  (train.Config etc. for scripts)
from infra import dist  # noqa: E402
import grpo  # noqa: E402
from lab import metrics as lab  # noqa: E402
from lab import ladder  # noqa: E402
from lab import oracle  # noqa: E402
import prover  # noqa: E402
from infra import records  # noqa: E402
from infra import report  # noqa: E402
from infra import rundir  # noqa: E402
from rollout import Agent, rollout_groups, spread_tasks  # noqa: E402

# Credit assignment, by --method: fn(groups, adv, run) -> metrics dict; adv[g][i][t] is updated in
# place (and a method may append groups, e.g. grpo-matched's extra rollouts).
METHODS = {"grpo": lambda groups, adv, run: {}, "prover": prover.credit, "prover-plus": prover.credit_plus, **baselines.METHODS,
           **ladder.METHODS}   # ladder.py: the credit lab's exact-credit arms (keydoor only)
# Methods that explain their credit in segments.md, and the header that file opens with.
SEGMENT_HEADERS = {"prover": prover.SEGMENTS_HEADER, "prover-plus": prover.SEGMENTS_HEADER, "criticsearch": baselines.CRITIC_HEADER}


# ---------------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What the credit methods (prover.py, baselines.py) may use."""
    cfg: Config
    agent: object                     # rollout.Agent
    spec: object                      # envs.EnvSpec
    env_kwargs: dict
    pool: list                        # spare train-split envs for continuations (verify, SPO)
    judge: object | None
    out: str
    step: int = 0
    proposals: list = field(default_factory=list)   # this update's judged segments (prover.py; lab.py reads them)
    records: list = field(default_factory=list)     # ... and per judged group what ProVer saw and did (records.py)

    def envs(self, n: int) -> list:
        """At least n spare envs (grown on demand)."""
        while len(self.pool) < n:
            self.pool.append(self.spec.make(split=self.spec.splits[0], seed=self.cfg.seed, **self.env_kwargs))
        return self.pool[:n]


@dataclass
class Trainer:
    """Everything the loop holds between updates."""
    cfg: Config
    rank: int
    world: int
    model: object
    tok: object
    opt: object
    gen: object
    run: Run
    ucfg: object
    ref: object
    py_rng: random.Random
    train_envs: list
    eval_envs: list
    eval_split: str
    rows: list                        # metrics rows so far (rank 0)
    start: int
    wall0: float = 0.0                # run time before this process (--resume): time/wall_s accumulates
    probe: object = None              # lab.Probe in the credit lab (fixed pivot-room prompts), else None
    loggers: object = None            # records.Loggers for --log (rank 0), else None


def setup(cfg: Config, log) -> Trainer:
    import torch
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and bool(cfg.model) and torch.cuda.is_available())
    rank, world = dist.init(use_cuda, fsdp=cfg.fsdp)
    torch.set_num_threads(cfg.threads or ((os.cpu_count() or 1) // world if cfg.model else 1))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    spec, env_kw, backend_line, eval_split = build.env_setup(cfg, log)
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if use_cuda else "cpu"
    start, counter, trainer_state = 0, Counter(), None
    if cfg.resume:
        model, tok, trainer_state, start, counter = rundir.load_checkpoint(cfg.out, cfg.model)
        model_dir = os.path.join(cfg.out, "checkpoint")
        log(f"resuming from {cfg.out}/checkpoint at step {start}")
    else:   # every rank: a tiny warm start is built data-parallel (warmstart.bc_train), then loaded alike
        model, tok, model_dir = build.model_setup(cfg, spec, env_kw, log)
    model = build.model_extras(cfg, model, device)
    gen = build.generator_setup(cfg, model, tok, model_dir)
    agent = Agent(gen, tok, spec, compact=not (cfg.chat_prompt or cfg.model), history_len=cfg.history_len,
                  max_new_tokens=cfg.max_new_tokens, reward=cfg.reward, counter=counter)
    run = Run(cfg, agent, spec, env_kw, [], build.judge_setup(cfg, model, tok), cfg.out, start)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0)
    ucfg = grpo.UpdateCfg(clip_low=cfg.clip, clip_high=cfg.clip, kl_coef=cfg.kl_coef, temperature=cfg.temperature,
                          micro_tokens=cfg.micro_tokens, bf16=cfg.bf16, minibatches=cfg.minibatches)
    ref = build.reference_setup(cfg, model)      # frozen copy for the KL (None at --kl-coef 0; --fsdp: sharded too)
    py_rng = random.Random(cfg.seed)
    if trainer_state is not None:
        rundir.restore_optimizer(model, opt, trainer_state)   # --fsdp: sharded state, any number of ranks
        py_rng.setstate(trainer_state["rng"]["py"])
        torch.set_rng_state(trainer_state["rng"]["torch"])
    rows = []
    if rank == 0:
        resolved = dict(asdict(cfg), env_backend_resolved=backend_line, eval_split_resolved=eval_split,
                        model_dir=model_dir, env_kwargs=env_kw, world_size=world)
        rows = rundir.start_files(cfg.out, resolved, start, SEGMENT_HEADERS.get(cfg.method))
    n_local = len(range(rank, cfg.tasks_per_iter, world))
    train_envs = [spec.make(split=spec.splits[0], seed=cfg.seed, **env_kw) for _ in range(n_local * cfg.group_size)]
    wall0 = float(rows[-1].get("time/wall_s", 0.0)) if start > 0 and rows else 0.0
    probe = lab.make_probe(agent, spec, env_kw, cfg.seed, cfg.temperature)
    return Trainer(cfg, rank, world, model, tok, opt, gen, run, ucfg, ref, py_rng, train_envs, [], eval_split, rows,
                   start, wall0, probe)


# ---------------------------------------------------------------------------------------------
# The steps of one iteration
# ---------------------------------------------------------------------------------------------
def evaluate(tr: Trainer) -> dict:
    """5. Held-out success at --eval-temperature: `eval_episodes` tasks spread over the split, each
    played `eval_repeats` times with its own sampling seeds. With several workers each plays every
    world-th task and the results are gathered; episode seeds come from the task's global position,
    so the result does not depend on the number of workers. Every rank must call it."""
    cfg, agent, spec = tr.cfg, tr.run.agent, tr.run.spec
    n_split = spec.num_tasks(tr.eval_split)
    tasks = spread_tasks(n_split, cfg.eval_episodes or n_split)   # every task type in proportion (0: all)
    mine = list(range(tr.rank, len(tasks), tr.world))
    R = cfg.eval_repeats
    while len(tr.eval_envs) < len(mine) * R:
        tr.eval_envs.append(spec.make(split=tr.eval_split, seed=cfg.seed, **tr.run.env_kwargs))
    tok0 = agent.counter["tokens/eval"]
    groups = rollout_groups(agent, tr.eval_envs, [tasks[i] for i in mine], R, cfg.eval_temperature, seed=cfg.seed + 7,
                            purpose="eval", keep_states=False, positions=mine) if mine else []
    # the credit lab: E[R | decisions] per episode too (the door's draw removed; see oracle.py)
    exp_r = (lambda t: oracle.expected_reward(t, tr.run.env_kwargs)) if spec.name == "keydoor" else (lambda t: None)
    local = {"eps": [(t.success, t.score, len(t.turns), t.task_type, exp_r(t)) for g in groups for t in g],
             "tokens": agent.counter["tokens/eval"] - tok0}
    parts = dist.gather(local, tr.world)
    eps = [e for p in parts for e in p["eps"]]
    n = len(eps)
    m = {"eval/success": sum(e[0] for e in eps) / n, "eval/score": sum(e[1] for e in eps) / n,
         "eval/episode_len": sum(e[2] for e in eps) / n, "eval/episodes": n, "tokens/eval": sum(p["tokens"] for p in parts)}
    by: dict = {}
    for e in eps:
        by.setdefault(e[3], []).append(e[0])
    m.update({f"eval/success/{k}": sum(v) / len(v) for k, v in sorted(by.items())})
    if eps and eps[0][4] is not None:
        # held-out success without the door's draw: the draw is fixed per task, so eval/success
        # has a ceiling shared by every arm once the key is taken; this has not
        m["eval/expected_success"] = sum(e[4] for e in eps) / n
    return m


def rollout(tr: Trainer, step: int) -> list:
    """1. This update's tasks (identical on every rank) and the rollouts of this rank's groups."""
    cfg = tr.cfg
    tasks = [tr.py_rng.randrange(10**6) for _ in range(cfg.tasks_per_iter)]
    seed = tr.py_rng.getrandbits(31)
    mine = list(range(tr.rank, cfg.tasks_per_iter, tr.world))
    return rollout_groups(tr.run.agent, tr.train_envs, [tasks[p] for p in mine], cfg.group_size, cfg.temperature,
                          seed=seed, positions=mine)


def credit(tr: Trainer, groups: list, adv: list, step: int, log, saved: list | None = None) -> dict:
    """3. The method's credit on top of GRPO's advantages (in place). An error is confined to its
    group: the batch is retried group by group and a failing group keeps its GRPO advantages; the
    traceback goes to errors.log and the console says so (--strict re-raises instead)."""
    fn, run = METHODS[tr.cfg.method], tr.run
    run.step, run.proposals, run.records = step, [], []
    saved = copy.deepcopy(adv) if saved is None else saved   # the GRPO advantages, untouched copy
    counter = run.agent.counter
    before = {k: v for k, v in counter.items() if k.startswith("tokens/")}
    try:
        return fn(groups, adv, run) or {}
    except Exception as e:
        if tr.cfg.strict:
            raise
        rundir.log_error(run.out, step, f"credit ({tr.cfg.method}), whole batch", e)
        log(f"step {step}: credit failed ({type(e).__name__}: {str(e)[:120]}); retrying group by group (errors.log)")
    # the failed attempt's tokens are void work: out of tokens/* (which the retry counts again, group
    # by group) into credit/retry_tokens, so the update's budget is what its credit actually used
    wasted = 0
    for k in [k for k in counter if k.startswith("tokens/")]:
        extra = counter[k] - before.get(k, 0)
        counter[k] -= extra
        wasted += extra
    counter["credit/retry_tokens"] += wasted
    adv[:] = copy.deepcopy(saved)             # a fresh copy: `saved` must stay the GRPO advantages
    run.proposals, run.records = [], []        # the failed attempt's entries are void
    n_groups, parts, errors = len(groups), [], 0
    for g in range(n_groups):
        sub_groups, sub_adv = [groups[g]], [adv[g]]
        n_p, n_r = len(run.proposals), len(run.records)
        try:
            parts.append(fn(sub_groups, sub_adv, run) or {})
        except Exception as e:
            errors += 1
            adv[g] = copy.deepcopy(saved[g])
            del run.proposals[n_p:], run.records[n_r:]      # this group kept GRPO: nothing was credited
            rundir.log_error(run.out, step, f"credit ({tr.cfg.method}), group {g}", e)
            continue
        # the method saw a one-group batch: its entries say group 0, which is group g of the batch
        run.proposals[n_p:] = [(g, *p[1:]) for p in run.proposals[n_p:]]
        for r in run.records[n_r:]:
            r["g"] = g
        adv[g] = sub_adv[0]
        groups.extend(sub_groups[1:])          # rows a method added (grpo-matched)
        adv.extend(sub_adv[1:])
    run.agent.counter["credit/errors"] += errors
    log(f"step {step}: credit: {errors} of {n_groups} groups failed and kept their GRPO advantages")
    return {**merge_method_stats(parts), "credit/failed_groups": errors, "credit/retry_tokens": wasted}


def update(tr: Trainer, groups: list, adv: list, step: int) -> dict:
    """4. The PPO-clip update (gradients summed over ranks), then push the weights to the sampler."""
    lr = lr_at(tr.cfg, step)
    for g in tr.opt.param_groups:
        g["lr"] = lr
    rows = grpo.rows_from(groups, adv, tr.cfg.minibatches, tr.cfg.loss_agg)
    ustats = grpo.update(tr.model, tr.opt, rows, tr.ucfg, tr.tok.pad_token_id, tr.ref)
    tr.run.agent.counter["train/skipped_nonfinite"] += ustats["train/skipped_nonfinite"]
    tr.gen.sync(tr.model)
    return {**ustats, **adv_stats(adv), "train/lr": lr}


def adv_stats(adv: list) -> dict:
    """The advantages this update trained on, per turn (adv[g][i][t]): their mean |A|, extremes and
    share below 0 — what AdamW sees of the credit's scale (the lab compares them across methods)."""
    xs = [a for group in adv for traj in group for a in traj]
    if not xs:
        return {}
    return {"adv/abs_mean": sum(map(abs, xs)) / len(xs), "adv/max": max(xs), "adv/min": min(xs),
            "adv/neg_share": sum(a < 0 for a in xs) / len(xs)}


def lr_at(cfg: Config, step: int) -> float:
    """Linear decay from --lr at update 1 to --lr × --lr-final at update --iters. A function of the
    step alone, so --resume continues the schedule where it stopped."""
    frac = (step - 1) / max(1, cfg.iters - 1)
    return cfg.lr * (1.0 - (1.0 - cfg.lr_final) * min(1.0, max(0.0, frac)))


@dataclass
class Episode:
    """What a metrics row needs of one training trajectory (gathered from every rank)."""
    success: float
    score: float
    turns: int
    invalid: int                      # turns without <action> tags
    inadmissible: int                 # well-formed turns whose action was not admissible


def metrics_row(tr: Trainer, step: int, groups: list, counts: Counter, cstats: dict, ustats: dict,
                lab_stats: dict, secs: dict) -> dict | None:
    """6. The update's metrics, gathered over ranks; the row on rank 0 (None elsewhere)."""
    eps = [Episode(t.success, t.score, len(t.turns), sum(not tn.valid for tn in t.turns),
                   int(sum(grpo.turn_penalty(tn, 0.0, 1.0) for tn in t.turns))) for g in groups for t in g]
    local = {"eps": eps, "mixed": sum(len({t.R for t in g}) > 1 for g in groups),   # groups with a GRPO signal
             "counts": counts, "credit": cstats, "lab": lab_stats}
    parts = dist.gather(local, tr.world)
    if tr.rank != 0:
        return None
    eps = [e for p in parts for e in p["eps"]]
    d: Counter = Counter()
    for p in parts:
        d.update(p["counts"])
    n, turns = len(eps), max(1, sum(e.turns for e in eps))
    row = {"step": step, "train/success": sum(e.success for e in eps) / n, "train/score": sum(e.score for e in eps) / n,
           "train/episode_len": sum(e.turns for e in eps) / n,
           "train/invalid_format": sum(e.invalid for e in eps) / turns,
           "train/inadmissible": sum(e.inadmissible for e in eps) / turns,
           "train/mixed_groups": sum(p["mixed"] for p in parts),
           "tokens/rollout": d["tokens/rollout"], "tokens/verify": d["tokens/verify"], "tokens/judge": d["tokens/judge"],
           "env_steps/rollout": d["env_steps/rollout"],
           "env_steps/total": sum(v for k, v in d.items() if k.startswith("env_steps/") and k != "env_steps/eval"),
           **secs, **ustats}
    row.update(merge_method_stats([p["credit"] for p in parts]))
    row.update(lab.merge([p["lab"] for p in parts]))
    return row


def credit_share(groups, adv_grpo, adv) -> float:
    """Σ_tokens |A − A^GRPO| / Σ_tokens |A^GRPO| over every group of the batch (groups or rollouts a
    method appended, grpo-matched's, left out): how far the method moved the update from GRPO's own push,
    from all groups (records.jsonl keeps only a few, credited ones first, which biases a share
    computed from it upwards). With several ranks it is the mean of the ranks' shares."""
    moved = push = 0.0
    for g in range(min(len(adv_grpo), len(groups))):
        for i, tr in enumerate(groups[g][:len(adv_grpo[g])]):   # rollouts a method added to a group: not GRPO's
            for t, tn in enumerate(tr.turns):
                n = len(tn.action_ids)
                moved += abs(adv[g][i][t] - adv_grpo[g][i][t]) * n
                push += abs(adv_grpo[g][i][t]) * n
    return moved / push if push > 0 else 0.0


def merge_method_stats(parts: list[dict]) -> dict:
    """Method metrics from all ranks: counts add up; means and rates (keys with mean/rate/len)
    are averaged over the ranks that report them; strings are kept from the first rank."""
    out: dict = {}
    for k in dict.fromkeys(k for p in parts for k in p):
        vals = [p[k] for p in parts if k in p]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[k] = vals[0]
        elif any(s in k for s in ("mean", "rate", "len", "share")):
            out[k] = sum(vals) / len(vals)
        else:
            out[k] = sum(vals)
    return out


# launch time (the launcher's, for workers): time/wall_s counts the warm start, updates and
# evaluations, and a --resume adds its time to the run's earlier total
_T_START = float(os.environ.get("PROVER_T0", time.time()))


def update_record(tr: Trainer, step: int, groups: list, adv_grpo: list, adv: list, row: dict | None) -> dict | None:
    """6. The update's credit record (records.py): each rank offers its best MAX_GROUPS groups, rank
    0 keeps the best of all and returns the record (None elsewhere). Every rank must call it."""
    cfg = tr.cfg
    local = records.group_entries(groups, adv_grpo, adv, tr.run.records, cfg.min_success, cfg.max_success)
    parts = dist.gather(local, tr.world)
    return records.make_record(step, cfg.method, parts, row) if tr.rank == 0 else None


def write_report(tr: Trainer, log) -> None:
    """report.html (report.py). A failure is logged to errors.log and the run goes on (--strict
    re-raises): the page is a view, never a reason to lose a run."""
    try:
        report.write(tr.cfg.out)
    except Exception as e:
        if tr.cfg.strict:
            raise
        rundir.log_error(tr.cfg.out, tr.rows[-1]["step"] if tr.rows else 0, "report.html", e)
        log(f"report.html failed ({type(e).__name__}: {str(e)[:120]}); see errors.log")


def log_row(tr: Trainer, row: dict, log, bar) -> None:
    row["time/wall_s"] = round(tr.wall0 + time.time() - _T_START, 1)
    row.setdefault("tokens/eval", 0)
    tr.rows.append(row)
    rundir.append_row(tr.cfg.out, row)
    if tr.loggers is not None:                 # --log: TensorBoard / wandb get the same keys
        tr.loggers.log(row)
    # curves.png and report.html after each evaluation (the end's redraw is train()'s): a bounded
    # cost, ~0.3 s + ~0.1 s per evaluation, which itself takes far longer; every update would add
    # ~30% to a tiny-policy run
    if "eval/success" in row and row["step"] < tr.cfg.iters:
        rundir.plot_curves(tr.cfg.out, tr.rows)
        write_report(tr, log)
    if row["step"] == 0:
        log(f"step 0 | eval {row['eval/success']:.3f} (warm start)")
        return
    bar.update(1)
    bar.set_postfix(train=f"{row['train/success']:.2f}", **({"eval": f"{row['eval/success']:.2f}"} if "eval/success" in row else {}))
    log(f"step {row['step']} | train {row['train/success']:.3f} | "
        + (f"eval {row['eval/success']:.3f} | " if "eval/success" in row else "")
        + f"tok {row['tokens/rollout']}+{row['tokens/verify']}v+{row['tokens/judge']}j | {row['time/iter_s']:.1f}s")
    failing = judge_failures(row)
    if failing:
        log(f"step {row['step']} | judge failing: {failing}")


# drop reasons that mean the judge's endpoint, not the proposal, failed (chat.py's error strings)
ENDPOINT_FAILURES = ("http", "endpoint timeout", "connection error", "timeout", "bad_response")


def judge_failures(row: dict) -> str:
    """'2 of 3 proposals dropped (connection error: 2)' when the judge's endpoint failed this
    update, else '' — so a judge that is down is said on the console, not only counted."""
    bad = {k.split("/", 2)[2]: v for k, v in row.items()
           if k.startswith("prover/dropped/") and k.split("/", 2)[2].startswith(ENDPOINT_FAILURES) and v}
    if not bad:
        return ""
    return (f"{sum(bad.values())} of {row.get('prover/proposals', 0)} proposals dropped ("
            + ", ".join(f"{k}: {v}" for k, v in sorted(bad.items())) + ")")


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------
def default_out(cfg: Config) -> str:
    return os.path.join("runs", f"{cfg.env}-{cfg.method}-s{cfg.seed}")


def checkpoint_interval(cfg: Config) -> int:
    """--checkpoint-every with 0 (auto) resolved. Why every update for the tiny policy: its
    checkpoint takes ~10 ms against ~1 s an update, so a stop (Ctrl-C, kill, preemption) loses no
    finished update; a real model's checkpoint (GBs) is written every 10."""
    return cfg.checkpoint_every or (10 if cfg.model else 1)


def train(cfg: Config) -> str:
    from tqdm import tqdm
    cfg.out = cfg.out or default_out(cfg)
    os.makedirs(cfg.out, exist_ok=True)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    log = tqdm.write if rank0 else (lambda *a, **k: None)
    tr = setup(cfg, log)
    agent = tr.run.agent
    if rank0 and cfg.log:
        tr.loggers = records.Loggers(cfg.log, cfg.out, asdict(cfg), tr.start)
    log(f"run: {cfg.out} | env {cfg.env} | method {cfg.method} | G={cfg.group_size} x {cfg.tasks_per_iter} tasks"
        f"{f' over {tr.world} ranks' if tr.world > 1 else ''} | {cfg.iters} updates | eval on {tr.eval_split} every {cfg.eval_every}"
        f" | sampler {getattr(agent.gen, 'runner_name', cfg.rollout)}"
        f" | checkpoint every {checkpoint_interval(cfg)}"
        " | console 'tok R+Vv+Jj': generated tokens of rollouts + verification + judge")
    # no terminal (a log file, CI, nohup): the bar's redraws would be hundreds of lines; the plain
    # "step N | ..." line log_row prints once per update is the progress there
    bar = tqdm(total=cfg.iters, initial=tr.start, desc="updates", disable=not rank0 or not sys.stderr.isatty())
    if tr.start == 0 and cfg.eval_every:                        # 5. the warm start's held-out success
        m = evaluate(tr)
        if rank0:
            log_row(tr, {"step": 0, **m, "tokens/rollout": 0, "tokens/verify": 0, "tokens/judge": 0}, log, bar)
    step = tr.start
    try:
        for step in range(tr.start + 1, cfg.iters + 1):
            t0, before = time.time(), Counter(agent.counter)
            groups = rollout(tr, step)                                                     # 1. rollouts
            adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty,
                                             cfg.inadmissible_penalty)                     # 2. GRPO advantages
            adv_grpo, t1 = copy.deepcopy(adv), time.time()
            cstats = credit(tr, groups, adv, step, log, adv_grpo)                          # 3. the method's credit
            cstats["credit/share"] = credit_share(groups, adv_grpo, adv)
            t_credit = time.time() - t1
            lab_stats = lab.step_metrics(tr.probe, tr.model, groups, adv_grpo, adv, tr.run.proposals, cfg.method)
            ustats = update(tr, groups, adv, step)                                         # 4. PPO-clip update
            counts = Counter({k: agent.counter[k] - before[k] for k in agent.counter})
            row = metrics_row(tr, step, groups, counts, cstats, ustats, lab_stats,         # 6. metrics
                              {"time/iter_s": time.time() - t0, "time/credit_s": t_credit})
            rec = update_record(tr, step, groups, adv_grpo, adv, row)                      # 6. credit record
            if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.iters):
                m = evaluate(tr)                                                           # 5. held-out eval
                if row is not None:
                    row.update(m)
            save = step % checkpoint_interval(cfg) == 0 or step == cfg.iters
            if row is None:                                   # ranks > 0: rank 0 logs and checkpoints
                if save and dist.is_sharded(tr.model):        # --fsdp: every rank writes its own shards
                    rundir.save_checkpoint(cfg.out, tr.model, tr.tok, tr.opt, step, agent.counter, build.rng_state(tr.py_rng))
                continue
            # record, row, checkpoint in this order: a kill leaves lines past the checkpoint at
            # worst, which --resume drops and re-does (rundir.start_files)
            rundir.append_jsonl(cfg.out, "records.jsonl", records.dumps(rec))
            log_row(tr, row, log, bar)                                                     # 6. log, plot, save
            # the row first, then its checkpoint: a kill in between leaves a row past the
            # checkpoint, which --resume drops and re-does (rundir.start_files)
            if save:
                rundir.save_checkpoint(cfg.out, tr.model, tr.tok, tr.opt, step, agent.counter, build.rng_state(tr.py_rng))
    except KeyboardInterrupt:
        bar.close()
        if not rank0:
            raise SystemExit(130)
        s = rundir.checkpoint_step(cfg.out)
        print(f"\ninterrupted at update {step}; last complete checkpoint: "
              + (f"{cfg.out}/checkpoint (step {s}); continue with --resume" if s is not None else "none yet"), file=sys.stderr)
        raise SystemExit(130)
    bar.close()
    if rank0 and tr.rows:
        rundir.plot_curves(cfg.out, tr.rows)
        write_report(tr, log)
    if tr.loggers is not None:
        tr.loggers.close()
    dist.barrier()
    return cfg.out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args(argv)
    try:
        validate(cfg)
        tiny_cpu = not cfg.model and cfg.rollout == "hf" and cfg.device != "cuda"
        n = dist.auto_workers(cfg.workers, cfg.tasks_per_iter, tiny_cpu) if "WORLD_SIZE" not in os.environ else 1
    except ValueError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    rank = int(os.environ.get("RANK", "0"))
    lock = None
    if dist.under_launcher():
        dist.die_with_launcher()      # a worker of ours: stop if the launcher dies, however it dies
    elif rank == 0:                   # the launcher, a single process, or torchrun's rank 0
        # One run per directory, checked before anything is built (a --resume beside a live run
        # would interleave rows and checkpoints). The workers inherit the lock (keep_fds below).
        cfg.out = cfg.out or default_out(cfg)
        os.makedirs(cfg.out, exist_ok=True)
        try:
            lock = rundir.lock_run(cfg.out)
        except rundir.RunDirBusy as e:
            print(f"train.py: error: {e}", file=sys.stderr)
            raise SystemExit(2)
    try:
        if n > 1:
            raise SystemExit(dist.launch(n, os.path.abspath(__file__), argv, _T_START,
                                         keep_fds=(lock,) if lock is not None else ()))
        dist.stop_on_signal()
        try:
            out = train(cfg)
        except (ValueError, FileNotFoundError, ImportError, ConnectionError) as e:
            print(f"train.py: error: {e}", file=sys.stderr)
            raise SystemExit(2)
        except KeyboardInterrupt:         # before the loop (warm start, first evaluation): nothing to save yet
            if rank == 0:
                print("\ninterrupted during set-up (warm start or first evaluation); no new checkpoint", file=sys.stderr)
            raise SystemExit(130)
        except Exception:
            if dist.STOPPING and rank != 0:   # a peer stopped first and broke a collective: stop quietly
                raise SystemExit(130)
            if dist.under_launcher():
                # A peer killed by a signal breaks the next collective here, often before the
                # launcher has seen it die. The launcher then stops us (SIGTERM: KeyboardInterrupt
                # in this wait) and reports the death in one line; this traceback would be an echo
                # hiding the cause. A real error here is shown after the wait (2 s < the
                # launcher's 5 s grace for a worker that failed by itself).
                try:
                    time.sleep(2.0)
                except KeyboardInterrupt:
                    s = rundir.checkpoint_step(cfg.out) if rank == 0 else None
                    if s is not None:     # what the launcher's line cannot say: where to go on from
                        print(f"last complete checkpoint: {cfg.out}/checkpoint (step {s}); continue with --resume",
                              file=sys.stderr)
                    raise SystemExit(130) from None
            raise
        if rank == 0:
            print(f"done: {out}")
    finally:
        if lock is not None:
            rundir.unlock_run(cfg.out, lock)


if __name__ == "__main__":
    main()
