"""train.py — the training loop: rollouts → GRPO advantages → credit (ProVer or another method) → PPO-clip update.

    python train.py --env alfworld                     # laptop CPU: tiny policy, built-in games, ProVer
    python train.py --env alfworld --method grpo       # the baseline, same cost accounting
    python train.py --env keydoor --env-opt rooms=8    # the credit lab (known pivotal decisions)
    python train.py --env alfworld --model Qwen/Qwen3.5-2B --rollout vllm --judge openai   # GPU
    python train.py --help                             # every flag, with its meaning
    python train.py --workers 1 --iters 1 --eval-every 0   # one process, one update: breakpoint() works

One iteration (the numbered steps of `train` below):
    1. sample `tasks_per_iter` training tasks; roll out G episodes of each with the current policy
    2. GRPO group advantages A_i = R_i − mean_g R, broadcast to every turn of trajectory i
    3. the method's credit on top (ProVer: judge → verify → +λ·Δ̂ on the segment's turns; prover.py)
    4. one PPO-clip update on the action tokens (grpo.py), then sync the sampler's weights
    5. every `eval_every` updates: success on a held-out split at low temperature
    6. the update's metrics row (metrics.jsonl), credit record (records.jsonl), checkpoint

Run directory (`--out`, default runs/<env>-<method>-s<seed>): config.json, metrics.jsonl,
records.jsonl, curves.png, report.html, segments.md (ProVer, CriticSearch), errors.log,
checkpoint/. `--resume` continues from the checkpoint. What is not the loop lives in infra/:
the parts of a run (build.py), processes and signals (launch.py, dist.py), what is written after
each update (runlog.py, rundir.py), and the guard that confines a credit error to its group
(guard.py). The credit lab (keydoor) hooks in through one callback (lab/metrics.py: `make_hook`).
Leaves out: multi-node training (torchrun does it), asynchronous rollouts.
"""
from __future__ import annotations

import os
import sys

import config

if __name__ == "__main__":     # flags first: --help and a bad flag answer at once, before torch loads
    CFG = config.parse_args(sys.argv[1:])

import copy  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import grpo  # noqa: E402
import methods  # noqa: E402
from config import Config  # noqa: E402
from infra import build, dist, launch, rundir, runlog  # noqa: E402
from infra.guard import guarded_credit  # noqa: E402
from lab import metrics as lab_metrics  # noqa: E402
from rollout import Agent, rollout_groups, spread_tasks  # noqa: E402


@dataclass
class Run:
    """What a credit method may use (methods/__init__.py: credit(groups, adv, run))."""
    cfg: Config
    agent: object                     # rollout.Agent
    spec: object                      # envs.EnvSpec
    env_kwargs: dict
    pool: list                        # spare train-split envs for continuations (verify, SPO)
    judge: object | None              # ProVer's judge, or CriticSearch's critic (methods' registry)
    out: str
    step: int = 0                     # this update's index: infra/guard.py sets it (and clears the lists below)
    proposals: list = field(default_factory=list)   # this update's judged segments (the lab's hit rate)
    records: list = field(default_factory=list)     # ... and per judged group what ProVer saw and did

    def envs(self, n: int) -> list:
        """At least n spare envs (grown on demand)."""
        while len(self.pool) < n:
            self.pool.append(self.spec.make(split=self.spec.splits[0], seed=self.cfg.seed, **self.env_kwargs))
        return self.pool[:n]


@dataclass
class Trainer:
    """Everything the loop holds between updates."""
    cfg: Config
    workers: object                   # infra/dist.py Workers: this process's share of the tasks (1 process: all)
    model: object
    tok: object
    opt: object
    gen: object                       # the sampler (infra/policy.py HFGenerator or vLLM)
    run: Run
    ucfg: object                      # grpo.UpdateCfg
    ref: object                       # frozen KL reference, or None
    py_rng: random.Random
    train_envs: list
    eval_envs: list
    eval_split: str
    start: int
    lab: object = None                # lab_metrics.LabHook in the credit lab, else None
    out: object = None                # infra/runlog.py RunLog: metrics, records, console, checkpoints


def setup(cfg: Config, log) -> Trainer:
    """The env, the policy (--model or the tiny warm start), sampler, judge, optimizer and run files."""
    import torch
    cfg.out = cfg.out or config.default_out(cfg)
    os.makedirs(cfg.out, exist_ok=True)
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and bool(cfg.model) and torch.cuda.is_available())
    workers = dist.Workers(*dist.init(use_cuda, fsdp=cfg.fsdp))
    torch.set_num_threads(cfg.threads or ((os.cpu_count() or 1) // workers.world if cfg.model else 1))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    spec, env_kw, backend_line, eval_split = build.env_setup(cfg, log)
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if use_cuda else "cpu"
    start, counter, trainer_state = 0, Counter(), None
    if cfg.resume:
        model, tok, trainer_state, start, counter = rundir.load_checkpoint(cfg.out, cfg.model)
        model_dir = os.path.join(cfg.out, "checkpoint")
        log(f"resuming from {cfg.out}/checkpoint at step {start}")
    else:   # every worker: a tiny warm start is built data-parallel (warmstart.bc_train), then loaded alike
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
        rundir.restore_optimizer(model, opt, trainer_state)   # --fsdp: sharded state, any number of workers
        py_rng.setstate(trainer_state["rng"]["py"])
        torch.set_rng_state(trainer_state["rng"]["torch"])
    resolved = dict(asdict(cfg), env_backend_resolved=backend_line, eval_split_resolved=eval_split,
                    model_dir=model_dir, env_kwargs=env_kw, world_size=workers.world)
    out = runlog.RunLog(cfg, workers, start, resolved, methods.segments_header(cfg.method), log)
    n_local = len(workers.mine(cfg.tasks_per_iter))
    train_envs = [spec.make(split=spec.splits[0], seed=cfg.seed, **env_kw) for _ in range(n_local * cfg.group_size)]
    hook = lab_metrics.make_hook(agent, spec, env_kw, cfg.seed, cfg.temperature, cfg.method)
    return Trainer(cfg, workers, model, tok, opt, gen, run, ucfg, ref, py_rng, train_envs, [], eval_split, start, hook, out)


def rollout(tr: Trainer) -> list:
    """1. This update's tasks (identical on every worker) and the rollouts of this worker's groups."""
    cfg = tr.cfg
    tasks = [tr.py_rng.randrange(10**6) for _ in range(cfg.tasks_per_iter)]
    seed = tr.py_rng.getrandbits(31)
    mine = tr.workers.mine(cfg.tasks_per_iter)
    return rollout_groups(tr.run.agent, tr.train_envs, [tasks[p] for p in mine], cfg.group_size, cfg.temperature,
                          seed=seed, positions=mine)


def update(tr: Trainer, groups: list, adv: list, step: int) -> dict:
    """4. The PPO-clip update (gradients summed over the workers), then push the weights to the sampler."""
    lr = lr_at(tr.cfg, step)
    for g in tr.opt.param_groups:
        g["lr"] = lr
    rows = grpo.rows_from(groups, adv, tr.cfg.minibatches, tr.cfg.loss_agg)
    ustats = grpo.update(tr.model, tr.opt, rows, tr.ucfg, tr.tok.pad_token_id, tr.ref)
    tr.run.agent.counter["train/skipped_nonfinite"] += ustats["train/skipped_nonfinite"]
    tr.gen.sync(tr.model)
    return {**ustats, **runlog.adv_stats(adv), "train/lr": lr}


def lr_at(cfg: Config, step: int) -> float:
    """Linear decay from --lr at update 1 to --lr × --lr-final at update --iters. A function of the
    step alone, so --resume continues the schedule where it stopped."""
    frac = (step - 1) / max(1, cfg.iters - 1)
    return cfg.lr * (1.0 - (1.0 - cfg.lr_final) * min(1.0, max(0.0, frac)))


def evaluate(tr: Trainer) -> dict:
    """5. Held-out success at --eval-temperature: `eval_episodes` tasks spread over the split, each
    played `eval_repeats` times. Each worker plays its share of the tasks; episode seeds come from
    the task's position, so the result does not depend on the number of workers."""
    cfg, agent, spec = tr.cfg, tr.run.agent, tr.run.spec
    tasks = spread_tasks(spec.num_tasks(tr.eval_split), cfg.eval_episodes or spec.num_tasks(tr.eval_split))
    mine, R = tr.workers.mine(len(tasks)), cfg.eval_repeats
    while len(tr.eval_envs) < len(mine) * R:
        tr.eval_envs.append(spec.make(split=tr.eval_split, seed=cfg.seed, **tr.run.env_kwargs))
    tok0 = agent.counter["tokens/eval"]
    groups = rollout_groups(agent, tr.eval_envs, [tasks[i] for i in mine], R, cfg.eval_temperature, seed=cfg.seed + 7,
                            purpose="eval", keep_states=False, positions=mine) if mine else []
    exp_r = tr.lab.expected_reward if tr.lab else (lambda t: None)    # the lab: E[R | decisions] too
    local = {"eps": [(t.success, t.score, len(t.turns), t.task_type, exp_r(t)) for g in groups for t in g],
             "tokens": agent.counter["tokens/eval"] - tok0}
    parts = tr.workers.gather(local)
    eps = [e for p in parts for e in p["eps"]]
    n = len(eps)
    m = {"eval/success": sum(e[0] for e in eps) / n, "eval/score": sum(e[1] for e in eps) / n,
         "eval/episode_len": sum(e[2] for e in eps) / n, "eval/episodes": n, "tokens/eval": sum(p["tokens"] for p in parts)}
    by: dict = {}
    for e in eps:
        by.setdefault(e[3], []).append(e[0])
    m.update({f"eval/success/{k}": sum(v) / len(v) for k, v in sorted(by.items())})
    if eps and eps[0][4] is not None:
        # without the door's draw: eval/success has a ceiling shared by every arm once the key is taken
        m["eval/expected_success"] = sum(e[4] for e in eps) / n
    return m


def checkpoint_interval(cfg: Config) -> int:
    """--checkpoint-every with 0 (auto) resolved: every update for the tiny policy (~10 ms against
    ~1 s an update, so a stop loses no finished update); every 10 for a real model (GBs)."""
    return cfg.checkpoint_every or (10 if cfg.model else 1)


def train(cfg: Config) -> str:
    """The loop (the module docstring's numbered steps); returns the run directory."""
    log = runlog.console()
    tr = setup(cfg, log)
    agent, credit_fn = tr.run.agent, methods.credit_fn(cfg.method)
    log(f"run: {cfg.out} | env {cfg.env} | method {cfg.method} | G={cfg.group_size} x {cfg.tasks_per_iter} tasks"
        f"{f' over {tr.workers.world} ranks' if tr.workers.world > 1 else ''} | {cfg.iters} updates"
        f" | eval on {tr.eval_split} every {cfg.eval_every} | sampler {getattr(agent.gen, 'runner_name', cfg.rollout)}"
        f" | checkpoint every {checkpoint_interval(cfg)} | console 'tok R+Vv+Jj': generated tokens of rollouts"
        " + verification + judge")
    if line := config.defaults_line(cfg):                    # the env's (and method's) own defaults, in effect
        log(line)
    if tr.start == 0 and cfg.eval_every:
        tr.out.first(evaluate(tr))                                                         # 5. the warm start's
    step = tr.start
    try:
        for step in range(tr.start + 1, cfg.iters + 1):
            t0, before = time.time(), Counter(agent.counter)
            groups = rollout(tr)                                                           # 1. rollouts
            adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty,
                                             cfg.inadmissible_penalty)                     # 2. GRPO advantages
            adv_grpo, t1 = copy.deepcopy(adv), time.time()
            cstats = guarded_credit(credit_fn, tr.run, groups, adv, step, log, cfg.strict, adv_grpo)   # 3. credit
            cstats["credit/share"] = runlog.credit_share(groups, adv_grpo, adv)
            t_credit = time.time() - t1
            lab_stats = tr.lab.after_credit(tr.model, groups, adv_grpo, adv, tr.run.proposals) if tr.lab else {}
            ustats = update(tr, groups, adv, step)                                         # 4. PPO-clip update
            counts = Counter({k: agent.counter[k] - before[k] for k in agent.counter})
            secs = {"time/iter_s": time.time() - t0, "time/credit_s": t_credit}
            evals = evaluate(tr) if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.iters) else {}  # 5.
            tr.out.update(tr, step, groups, adv_grpo, adv, counts, cstats, ustats, lab_stats, secs, evals,  # 6. write
                          save=step % checkpoint_interval(cfg) == 0 or step == cfg.iters)
    except KeyboardInterrupt:
        tr.out.interrupted(step)
        raise SystemExit(130)
    tr.out.finish()
    return cfg.out


def main(argv=None, cfg=None):
    """`python train.py ARGV`: the flags parsed once (above, when run as a script), then infra/launch.py
    (tiny policy on CPU: a worker per core, each on its share of the groups; `--workers 1`: one process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    launch.main(cfg or config.parse_args(argv), argv, train, os.path.abspath(__file__))


if __name__ == "__main__":
    main(cfg=CFG)
