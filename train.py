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
    6. log a metrics row (metrics.jsonl), checkpoint atomically (every update for the tiny policy,
       see --checkpoint-every); curves.png is redrawn after each evaluation and at the end

Run directory (`--out`, see rundir.py): config.json, metrics.jsonl, curves.png, segments.md
(ProVer, CriticSearch), errors.log, checkpoint/, .lock (one run at a time: a second run on a
directory in use refuses). `--resume` continues from the checkpoint.
Process management (local workers, torchrun, signals) lives in dist.py; the tiny policy's warm
start in warmstart.py.
"""
from __future__ import annotations

import argparse
import ast
import copy
import inspect
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import baselines  # noqa: E402  (the env variables above must be set before transformers loads)
import build  # noqa: E402
import dist  # noqa: E402
import envs  # noqa: E402
import grpo  # noqa: E402
import lab  # noqa: E402
import prover  # noqa: E402
import rundir  # noqa: E402
from rollout import Agent, rollout_groups, spread_tasks  # noqa: E402

# Credit assignment, by --method: fn(groups, adv, run) -> metrics dict; adv[g][i][t] is updated in
# place (and a method may append groups, e.g. grpo-matched's extra rollouts).
METHODS = {"grpo": lambda groups, adv, run: {}, "prover": prover.credit, **baselines.METHODS}
# Methods that explain their credit in segments.md, and the header that file opens with.
SEGMENT_HEADERS = {"prover": prover.SEGMENTS_HEADER, "criticsearch": baselines.CRITIC_HEADER}


# ---------------------------------------------------------------------------------------------
# Config: one dataclass; each field's docstring is its --help text
# ---------------------------------------------------------------------------------------------
@dataclass
class Config:
    # --- what to run
    env: str = "alfworld"
    """benchmark: alfworld | webshop | searchqa | keydoor (the credit lab: known pivotal decisions)"""
    method: str = "prover"
    """credit assignment: prover | grpo | grpo-matched | gigpo | spo-chain | spo-tree | criticsearch"""
    judge: str = "builtin"
    """ProVer/CriticSearch judge backend: builtin | random | hf | openai"""
    model: str = ""
    """HF model folder or hub id; empty = build the tiny offline policy (warm-started by behaviour cloning)"""
    rollout: str = "hf"
    """generation backend: hf (transformers) | vllm (colocated engine, weights synced after each update)"""
    # --- scale
    iters: int = 200
    """number of policy updates"""
    group_size: int = 8
    """G: rollouts per task (a GRPO group)"""
    tasks_per_iter: int = 8
    """tasks (groups) per update"""
    eval_every: int = 10
    """evaluate every N updates (0 = never)"""
    eval_episodes: int = 128
    """held-out episodes per evaluation (N tasks spread evenly over the eval split, all task types)"""
    eval_split: str = ""
    """held-out split (default: the env's first held-out split, e.g. valid_seen)"""
    eval_repeats: int = 1
    """play each evaluation task this many times with different sampling seeds (less noise per reading)"""
    eval_temperature: float = 0.4
    """sampling temperature at evaluation (verl-agent uses 0.4)"""
    temperature: float = 1.0
    """sampling temperature for training rollouts and continuations"""
    seed: int = 0
    """fixes task sampling, env generation, model init and sampling"""
    out: str = ""
    """run directory (default runs/<env>-<method>-s<seed>)"""
    resume: bool = False
    """continue from <out>/checkpoint instead of starting over"""
    strict: bool = False
    """re-raise an error in the credit step (tests); off: it is logged to errors.log and confined to its group"""
    checkpoint_every: int = 0
    """write the checkpoint every N updates and at the end (0 = auto: every update for the tiny policy, whose checkpoint takes milliseconds, so a stop loses no finished update; 10 for --model, whose checkpoints are large)"""
    # --- env
    env_opt: list = field(default_factory=list)
    """KEY=VALUE option of the env, repeatable, checked by the env (e.g. --env-opt rooms=8 --env-opt p_key=0.8 for keydoor)"""
    preset: str = "small"
    """ALFWorld household size: small (CPU default) | full (ALFWorld-like)"""
    env_backend: str = "auto"
    """auto | builtin | real: real benchmark data/engine (ALFWorld official games, WebShop repo, retrieval server)"""
    max_steps: int = 0
    """episode step limit (0 = the benchmark's: ALFWorld 50, WebShop 15, SearchQA 4)"""
    history_len: int = 4
    """past (observation, action) steps shown in the prompt"""
    chat_prompt: bool = False
    """use the benchmark's full verl-agent chat prompt (default for --model) instead of the compact one"""
    # --- optimisation (grpo.py)
    lr: float = 1e-4
    """AdamW learning rate (the tiny policy's default; use ~1e-6 for real LLMs)"""
    lr_final: float = 1.0
    """learning rate at update --iters as a fraction of --lr, reached by linear decay from update 1 (1 = constant)"""
    norm_std: bool = False
    """divide group advantages by the group std (off: A = R − mean R, as in the ProVer paper)"""
    clip: float = 0.2
    """PPO clip range ε"""
    kl_coef: float = 0.0
    """k3 KL to a frozen copy of the initial policy (0 = no reference model)"""
    reward: str = "success"
    """trajectory outcome R for advantages and value estimates: success (1 if won) | score (the benchmark's score in [0, 1]; WebShop's own env reward)"""
    invalid_penalty: float = 0.1
    """subtracted from the advantage of a turn whose output lacked <action> tags"""
    inadmissible_penalty: float = 0.0
    """subtracted from the advantage of a well-formed turn whose action was not in the env's admissible list (ALFWorld: "Nothing happens."); envs without a list are unaffected (WebShop's list has a search[...] placeholder: keep 0)"""
    max_new_tokens: int = 24
    """response length cap per turn"""
    micro_tokens: int = 8192
    """padded tokens per forward pass in the update (memory knob)"""
    loss_agg: str = "token-mean"
    """loss aggregation: token-mean (every action token alike: verl-agent's) | traj-mean (every trajectory alike: the mean of each trajectory's token mean, so long failures do not outweigh short successes)"""
    minibatches: int = 1
    """optimizer steps per rollout batch: its turns are split into this many mini-batches, one PPO-clip step each (verl's ppo_mini_batch_size; 1 = a single on-policy step)"""
    # --- ProVer (prover.py / verify.py)
    min_success: int = 1
    """eligible groups have at least this many successes"""
    max_success: int = 3
    """... and at most this many (of G = 8)"""
    verify_k: int = 8
    """K: continuations from each of s_pre and s_post"""
    lam: float = 1.0
    """λ: credit added is λ·Δ̂"""
    margin: float = 0.0
    """credit only if Δ̂ > margin (0 = the paper's Δ̂ > 0)"""
    # --- baselines (baselines.py)
    matched_extra: float = 0.4
    """grpo-matched: extra rollout tokens per update as a share of the rollout tokens (0.4 = 40% more; default: about ProVer's overhead, see baselines.py)"""
    matched_tokens: int = 0
    """grpo-matched: explicit extra generated tokens per update (overrides matched_extra when > 0)"""
    gigpo_gamma: float = 0.95
    """gigpo: discount γ of the step returns"""
    gigpo_omega: float = 1.0
    """gigpo: weight ω of the step advantage (A = A^E + ω·A^S)"""
    gigpo_mode: str = "mean_norm"
    """gigpo: mean_norm (no std, the repo default) | mean_std_norm (divide by std + 1e-6)"""
    gigpo_similarity: float = 0.0
    """gigpo: anchor states match exactly (0) or by difflib ratio >= this (e.g. 0.9)"""
    spo_interval: int = 5
    """spo-chain: a segment boundary every k turns"""
    spo_n: int = 4
    """spo-chain: Monte-Carlo continuations per boundary"""
    spo_tree_depths: str = "3,6"
    """spo-tree: turn depths where every running branch branches (comma-separated)"""
    spo_tree_branch: int = 2
    """spo-tree: children per branching node (the branch itself + b-1 new continuations)"""
    critic_alpha: float = 0.25
    """criticsearch: weight α of the normalised turn labels (A = A^GRPO + α·Â)"""
    # --- judge backends (judge.py)
    judge_url: str = ""
    """openai judge: base URL of an OpenAI-compatible endpoint (else $OPENAI_BASE_URL)"""
    judge_model: str = ""
    """openai judge: model name (else $JUDGE_MODEL); hf judge: model folder (default: the policy itself)"""
    judge_timeout: float = 60.0
    """openai judge: seconds per request"""
    # --- tiny offline policy (warmstart.py)
    tiny_hidden: int = 64
    """tiny policy width (attention heads = width / 32)"""
    tiny_layers: int = 2
    """tiny policy depth"""
    bc_episodes: int = 400
    """behaviour cloning: noisy expert episodes"""
    bc_steps: int = 750
    """behaviour cloning: optimizer steps at most (the target below stops it earlier on purpose: the policy starts imperfect)"""
    bc_target: float = 0.35
    """behaviour cloning stops once success at --eval-temperature on 64 unseen training tasks reaches this (checked every 50 steps from step 250), so every seed starts RL from about the same level with room to improve; 0 = run all --bc-steps"""
    bc_seed: int = -1
    """seed of the warm start (-1 = --seed); fix it to compare RL seeds from one warm-started policy"""
    bc_epsilon: float = 0.3
    """behaviour cloning: chance of a random admissible action in the demos"""
    bc_slip: float = 0.0
    """behaviour cloning: chance of a slip in the demos — an action admissible earlier in the episode but not now ("Nothing happens."), followed by the expert's recovery (0 = demos hold admissible actions only)"""
    bc_expert: str = "search"
    """ALFWorld demos' expert: search (uses only what the prompt shows: takes the object if it is here, else opens this receptacle or goes to the next one in the admissible list that could hold it) | oracle (walks straight to where the hidden object is)"""
    cache_dir: str = "~/.cache/prover"
    """where warm-started tiny policies are cached (keyed by env + config)"""
    threads: int = 0
    """torch CPU threads (0 = auto: 1 for the tiny policy, whose ops are too small to split, all cores for --model)"""
    workers: int = 0
    """local data-parallel worker processes (0 = auto: one per CPU core, at most --tasks-per-iter, for the tiny policy on CPU; 1 for --model, --rollout vllm and CUDA, where torchrun is the tool). Each worker rolls out and evaluates its share of the tasks; gradients are summed, so an update is the one a single process would take"""
    # --- scale-out / real models
    device: str = "auto"
    """auto (cuda for --model when available, else cpu) | cpu | cuda"""
    bf16: bool = False
    """bf16 autocast in the update (real models on GPU)"""
    grad_ckpt: bool = False
    """gradient checkpointing (real models: trade compute for activation memory)"""
    lora_r: int = 0
    """LoRA rank via peft (0 = full fine-tuning); adapters on all attention and MLP projections"""
    lora_alpha: int = 32
    """LoRA alpha"""
    vllm_kv_bytes: int = 256 * 2**20
    """vLLM KV-cache bytes on CPU (on GPU vLLM sizes it from --vllm-gpu-mem)"""
    vllm_gpu_mem: float = 0.5
    """vLLM: fraction of GPU memory for weights + KV cache (colocated with the trainer)"""
    vllm_max_len: int = 4096
    """vLLM: max prompt + response tokens"""



CHOICES = {
    "env": ["alfworld", "webshop", "searchqa", "keydoor"],
    "method": ["prover", "grpo", "grpo-matched", "gigpo", "spo-chain", "spo-tree", "criticsearch"],
    "judge": ["builtin", "random", "hf", "openai"],
    "rollout": ["hf", "vllm"],
    "loss_agg": ["token-mean", "traj-mean"],
    "preset": ["small", "full"],
    "env_backend": ["auto", "builtin", "real"],
    "device": ["auto", "cpu", "cuda"],
    "reward": ["success", "score"],
    "bc_expert": ["search", "oracle"],
}

# Per-benchmark defaults: a flag the user does not pass takes its value from here when the
# benchmark needs something other than the Config default (which is tuned for ALFWorld). Why:
# WebShop pages are long, so its prompts carry no history, its warm start is shorter and R is its
# score; SearchQA episodes are ≤ 4 short turns, so it affords more updates; keydoor's corridor is
# learned in few BC steps and a run is meant to be cheap (many seeds). Their recipes do not use
# --bc-target (they stop at a fixed number of BC steps).
ENV_DEFAULTS: dict[str, dict] = {
    "webshop": {"history_len": 0, "bc_episodes": 200, "bc_steps": 300, "bc_target": 0.0, "reward": "score", "iters": 250},
    "searchqa": {"bc_steps": 320, "bc_target": 0.0, "iters": 600},
    "keydoor": {"bc_episodes": 100, "bc_steps": 150, "bc_target": 0.0, "iters": 40, "history_len": 2,
                "eval_every": 10, "max_new_tokens": 12},
}


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (the help text), read from the source."""
    tree = ast.parse(inspect.getsource(cls))
    body, docs = tree.body[0].body, {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = b.value.value
    return docs


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit (argparse prints usage too)
        self.exit(2, f"train.py: error: {message}\n")


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    epilog = "per-benchmark defaults (used when the flag is not given): " + "; ".join(
        f"{e}: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items()) for e, d in ENV_DEFAULTS.items() if d)
    p = OneLineParser(description=__doc__.split("\n")[0], epilog=epilog,
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    docs = {k: v.replace("%", "%%") for k, v in field_docs(Config).items()}   # argparse %-formats help
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = argparse.SUPPRESS if suppress_defaults else (f.default if f.default_factory is field().default_factory else [])
        typ = f.type if isinstance(f.type, str) else f.type.__name__
        if typ == "bool":
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=docs.get(f.name))
        elif typ == "list":     # repeatable KEY=VALUE (--env-opt)
            p.add_argument(flag, action="append", metavar="KEY=VALUE", default=default, help=docs.get(f.name))
        else:
            p.add_argument(flag, type={"int": int, "float": float, "str": str}[typ], default=default,
                           choices=CHOICES.get(f.name), help=docs.get(f.name))
    return p


def parse_args(argv=None) -> Config:
    cfg = Config(**vars(build_parser().parse_args(argv)))
    given = vars(build_parser(suppress_defaults=True).parse_args(argv))   # only the flags on the command line
    for k, v in ENV_DEFAULTS.get(cfg.env, {}).items():
        if k not in given:
            setattr(cfg, k, v)
    return cfg


# (field, rule holds?, the rule in words): checked before anything is built
RULES = [
    ("iters", lambda v: v >= 0, ">= 0"), ("group_size", lambda v: v >= 2, ">= 2 (a group needs two rollouts to compare)"),
    ("tasks_per_iter", lambda v: v >= 1, ">= 1"), ("eval_every", lambda v: v >= 0, ">= 0 (0 = never)"),
    ("eval_episodes", lambda v: v >= 1, ">= 1"), ("eval_repeats", lambda v: v >= 1, ">= 1"),
    ("eval_temperature", lambda v: v > 0, "> 0"), ("temperature", lambda v: v > 0, "> 0"),
    ("checkpoint_every", lambda v: v >= 0, ">= 0 (0 = auto)"), ("max_steps", lambda v: v >= 0, ">= 0 (0 = the benchmark's)"),
    ("history_len", lambda v: v >= 0, ">= 0"), ("lr", lambda v: v > 0, "> 0"),
    ("lr_final", lambda v: 0.0 <= v <= 1.0, "a fraction of --lr, must be in [0, 1]"),
    ("clip", lambda v: v > 0, "> 0"), ("kl_coef", lambda v: v >= 0, ">= 0"),
    ("max_new_tokens", lambda v: v >= 1, ">= 1"), ("micro_tokens", lambda v: v >= 1, ">= 1"),
    ("minibatches", lambda v: v >= 1, "must be >= 1 (optimizer steps per rollout batch)"),
    ("min_success", lambda v: v >= 1, ">= 1"), ("verify_k", lambda v: v >= 1, ">= 1 (continuations per side)"),
    ("lam", lambda v: v >= 0, ">= 0"), ("spo_interval", lambda v: v >= 1, ">= 1"), ("spo_n", lambda v: v >= 1, ">= 1"),
    ("spo_tree_branch", lambda v: v >= 2, ">= 2"), ("critic_alpha", lambda v: v >= 0, ">= 0"),
    ("tiny_hidden", lambda v: v >= 32 and v % 32 == 0, "a multiple of 32"), ("tiny_layers", lambda v: v >= 1, ">= 1"),
    ("bc_episodes", lambda v: v >= 1, ">= 1"), ("bc_steps", lambda v: v >= 1, ">= 1"),
    ("bc_target", lambda v: 0.0 <= v <= 1.0, "a success rate, must be in [0, 1]"),
    ("bc_epsilon", lambda v: 0.0 <= v <= 1.0, "a probability, must be in [0, 1]"),
    ("bc_slip", lambda v: 0.0 <= v <= 1.0, "a probability, must be in [0, 1]"),
    ("threads", lambda v: v >= 0, ">= 0 (0 = auto)"), ("judge_timeout", lambda v: v > 0, "> 0"),
]


def validate(cfg: Config) -> dict:
    """Every rule on the config, before anything is built; returns the parsed --env-opt values.
    Raises ValueError with one line naming the flag and the rule."""
    for name, ok, rule in RULES:
        if not ok(getattr(cfg, name)):
            raise ValueError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: {rule}")
    if cfg.max_success < cfg.min_success:
        raise ValueError(f"--max-success {cfg.max_success}: must be >= --min-success {cfg.min_success}")
    if cfg.model and os.path.isfile(os.path.expanduser(cfg.model)):
        raise ValueError(f"--model {cfg.model}: is a file; give a model folder (config.json + weights) or a hub id")
    if cfg.model and os.path.isdir(os.path.expanduser(cfg.model)) and not os.path.exists(os.path.join(os.path.expanduser(cfg.model), "config.json")):
        raise ValueError(f"--model {cfg.model}: folder has no config.json (not a Hugging Face model folder)")
    spec = envs.get_spec(cfg.env)
    opts = envs.parse_env_opts(spec, cfg.env_opt)
    return opts


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


def setup(cfg: Config, log) -> Trainer:
    import torch
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and bool(cfg.model) and torch.cuda.is_available())
    rank, world = dist.init(use_cuda)
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
    ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    py_rng = random.Random(cfg.seed)
    if trainer_state is not None:
        opt.load_state_dict(trainer_state["optimizer"])
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
    tasks = spread_tasks(spec.num_tasks(tr.eval_split), cfg.eval_episodes)   # every task type in proportion
    mine = list(range(tr.rank, len(tasks), tr.world))
    R = cfg.eval_repeats
    while len(tr.eval_envs) < len(mine) * R:
        tr.eval_envs.append(spec.make(split=tr.eval_split, seed=cfg.seed, **tr.run.env_kwargs))
    tok0 = agent.counter["tokens/eval"]
    groups = rollout_groups(agent, tr.eval_envs, [tasks[i] for i in mine], R, cfg.eval_temperature, seed=cfg.seed + 7,
                            purpose="eval", keep_states=False, positions=mine) if mine else []
    local = {"eps": [(t.success, t.score, len(t.turns), t.task_type) for g in groups for t in g],
             "tokens": agent.counter["tokens/eval"] - tok0}
    parts = dist.gather(local, tr.world)
    eps = [e for p in parts for e in p["eps"]]
    n = len(eps)
    m = {"eval/success": sum(e[0] for e in eps) / n, "eval/score": sum(e[1] for e in eps) / n,
         "eval/episode_len": sum(e[2] for e in eps) / n, "tokens/eval": sum(p["tokens"] for p in parts)}
    by: dict = {}
    for e in eps:
        by.setdefault(e[3], []).append(e[0])
    m.update({f"eval/success/{k}": sum(v) / len(v) for k, v in sorted(by.items())})
    return m


def rollout(tr: Trainer, step: int) -> list:
    """1. This update's tasks (identical on every rank) and the rollouts of this rank's groups."""
    cfg = tr.cfg
    tasks = [tr.py_rng.randrange(10**6) for _ in range(cfg.tasks_per_iter)]
    seed = tr.py_rng.getrandbits(31)
    mine = list(range(tr.rank, cfg.tasks_per_iter, tr.world))
    return rollout_groups(tr.run.agent, tr.train_envs, [tasks[p] for p in mine], cfg.group_size, cfg.temperature,
                          seed=seed, positions=mine)


def credit(tr: Trainer, groups: list, adv: list, step: int, log) -> dict:
    """3. The method's credit on top of GRPO's advantages (in place). An error is confined to its
    group: the batch is retried group by group and a failing group keeps its GRPO advantages; the
    traceback goes to errors.log and the console says so (--strict re-raises instead)."""
    fn, run = METHODS[tr.cfg.method], tr.run
    run.step, run.proposals = step, []
    saved = copy.deepcopy(adv)
    try:
        return fn(groups, adv, run) or {}
    except Exception as e:
        if tr.cfg.strict:
            raise
        rundir.log_error(run.out, step, f"credit ({tr.cfg.method}), whole batch", e)
        log(f"step {step}: credit failed ({type(e).__name__}: {str(e)[:120]}); retrying group by group (errors.log)")
    adv[:] = saved
    n_groups, parts, errors = len(groups), [], 0
    for g in range(n_groups):
        sub_groups, sub_adv = [groups[g]], [adv[g]]
        try:
            parts.append(fn(sub_groups, sub_adv, run) or {})
        except Exception as e:
            errors += 1
            adv[g] = saved[g]
            rundir.log_error(run.out, step, f"credit ({tr.cfg.method}), group {g}", e)
            continue
        adv[g] = sub_adv[0]
        groups.extend(sub_groups[1:])          # rows a method added (grpo-matched)
        adv.extend(sub_adv[1:])
    run.agent.counter["credit/errors"] += errors
    log(f"step {step}: credit: {errors} of {n_groups} groups failed and kept their GRPO advantages")
    return {**merge_method_stats(parts), "credit/failed_groups": errors}


def update(tr: Trainer, groups: list, adv: list, step: int) -> dict:
    """4. The PPO-clip update (gradients summed over ranks), then push the weights to the sampler."""
    lr = lr_at(tr.cfg, step)
    for g in tr.opt.param_groups:
        g["lr"] = lr
    rows = grpo.rows_from(groups, adv, tr.cfg.minibatches, tr.cfg.loss_agg)
    ustats = grpo.update(tr.model, tr.opt, rows, tr.ucfg, tr.tok.pad_token_id, tr.ref)
    tr.run.agent.counter["train/skipped_nonfinite"] += ustats["train/skipped_nonfinite"]
    tr.gen.sync(tr.model)
    return {**ustats, "train/lr": lr}


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


def log_row(tr: Trainer, row: dict, log, bar) -> None:
    row["time/wall_s"] = round(tr.wall0 + time.time() - _T_START, 1)
    row.setdefault("tokens/eval", 0)
    tr.rows.append(row)
    rundir.append_row(tr.cfg.out, row)
    # curves.png after each evaluation (the end's redraw is train()'s): a bounded cost, ~0.3 s per
    # evaluation, which itself takes far longer; every update would add ~30% to a tiny-policy run
    if "eval/success" in row and row["step"] < tr.cfg.iters:
        rundir.plot_curves(tr.cfg.out, tr.rows)
    if row["step"] == 0:
        log(f"step 0 | eval {row['eval/success']:.3f} (warm start)")
        return
    bar.update(1)
    bar.set_postfix(train=f"{row['train/success']:.2f}", **({"eval": f"{row['eval/success']:.2f}"} if "eval/success" in row else {}))
    log(f"step {row['step']} | train {row['train/success']:.3f} | "
        + (f"eval {row['eval/success']:.3f} | " if "eval/success" in row else "")
        + f"tok {row['tokens/rollout']}+{row['tokens/verify']}v+{row['tokens/judge']}j | {row['time/iter_s']:.1f}s")


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
    log(f"run: {cfg.out} | env {cfg.env} | method {cfg.method} | G={cfg.group_size} x {cfg.tasks_per_iter} tasks"
        f"{f' over {tr.world} ranks' if tr.world > 1 else ''} | {cfg.iters} updates | eval on {tr.eval_split} every {cfg.eval_every}"
        f" | sampler {getattr(agent.gen, 'runner_name', cfg.rollout)}"
        f" | checkpoint every {checkpoint_interval(cfg)}"
        " | console 'tok R+Vv+Jj': generated tokens of rollouts + verification + judge")
    bar = tqdm(total=cfg.iters, initial=tr.start, desc="updates", disable=not rank0)
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
            cstats = credit(tr, groups, adv, step, log)                                    # 3. the method's credit
            t_credit = time.time() - t1
            lab_stats = lab.step_metrics(tr.probe, tr.model, groups, adv_grpo, adv, tr.run.proposals, cfg.method)
            ustats = update(tr, groups, adv, step)                                         # 4. PPO-clip update
            counts = Counter({k: agent.counter[k] - before[k] for k in agent.counter})
            row = metrics_row(tr, step, groups, counts, cstats, ustats, lab_stats,         # 6. metrics
                              {"time/iter_s": time.time() - t0, "time/credit_s": t_credit})
            if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.iters):
                m = evaluate(tr)                                                           # 5. held-out eval
                if row is not None:
                    row.update(m)
            if row is None:                                   # ranks > 0: rank 0 logs and checkpoints
                continue
            log_row(tr, row, log, bar)                                                     # 6. log, plot, save
            # the row first, then its checkpoint: a kill in between leaves a row past the
            # checkpoint, which --resume drops and re-does (rundir.start_files)
            if step % checkpoint_interval(cfg) == 0 or step == cfg.iters:
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
