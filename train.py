"""train.py — the training loop: rollouts → credit (GRPO / ProVer / baselines) → PPO-clip update.

    python train.py --env alfworld                     # laptop CPU: tiny policy, built-in games, ProVer
    python train.py --env alfworld --method grpo       # the baseline, same cost accounting
    python train.py --env alfworld --model Qwen/Qwen3.5-2B --rollout vllm --judge openai   # GPU
    python train.py --help                             # every flag, with its meaning

One iteration (numbered as in the loop below and in DESIGN.md §3):
    1. sample `tasks_per_iter` training tasks; roll out G episodes of each with the current policy
    2. GRPO group advantages A_i = R_i − mean_g R, broadcast to every turn of trajectory i
    3. method-specific credit on top (ProVer: judge → verify → +λ·Δ̂ on the segment's turns)
    4. one PPO-clip update on the action tokens (token-mean), then sync the rollout engine
    5. evaluate every `eval_every` updates on a held-out split at low temperature
    6. log a metrics row (metrics.jsonl), redraw curves.png, checkpoint atomically

Run directory (`--out`): config.json, metrics.jsonl, curves.png, segments.md (ProVer,
CriticSearch), checkpoint/ (HF folder + optimizer + RNG + step). `--resume` continues from it.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ---------------------------------------------------------------------------------------------
# Config: one dataclass; each field's docstring is its --help text
# ---------------------------------------------------------------------------------------------
@dataclass
class Config:
    # --- what to run
    env: str = "alfworld"
    """benchmark: alfworld | webshop | searchqa (| pivot, the controlled test env)"""
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
    """number of policy updates (ALFWorld: ~30 min on 2 CPU cores with the tiny policy)"""
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
    checkpoint_every: int = 10
    """write the checkpoint every N updates (and at the end)"""
    # --- env
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
    """AdamW learning rate (tiny policy: 3e-4 churned and 1e-3 collapsed it here; use ~1e-6 for real LLMs)"""
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
    """loss aggregation: token-mean (every action token alike: verl-agent's) | traj-mean (every trajectory alike: the mean of each trajectory's token mean, so long failures do not outweigh short successes; ALFWorld, 3 seeds: +12.9/+13.6/+15.7 held-out points in 30 minutes vs +13.9/+11.4/+11.8, README Results)"""
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
    """grpo-matched: extra rollout tokens per update as a share of the rollout tokens (default: ProVer's measured overhead, see baselines.py)"""
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
    # --- tiny offline policy (policy.py)
    tiny_hidden: int = 64
    """tiny policy width (128 learned more per update on ALFWorld in one seed of two, at ~2.5x the cost per update and a 4-8 min warm start; see README Results)"""
    tiny_layers: int = 2
    """tiny policy depth"""
    bc_episodes: int = 400
    """behaviour cloning: noisy expert episodes"""
    bc_steps: int = 750
    """behaviour cloning: optimizer steps at most (the target below stops it earlier on purpose: the policy starts imperfect); 750 bounds the ALFWorld warm start to ~5 minutes on the 2-core machines of 2026-11-30/12-01 (~0.28 s a step plus ~7 s a check); one ~1.5x slower machine took 417 s"""
    bc_target: float = 0.35
    """behaviour cloning stops once success at --eval-temperature on 64 unseen training tasks reaches this (checked every 50 steps from step 250), so every seed starts RL from about the same level with room to improve (cloned to convergence the default ALFWorld policy reaches ~65% held-out, 39% with --bc-expert oracle); 0 = run all --bc-steps"""
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
    "env": ["alfworld", "webshop", "searchqa", "pivot"],
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


# Per-benchmark defaults: a flag the user does not pass takes its value from here when the
# benchmark needs something other than the Config default (which is tuned for ALFWorld). Why:
# WebShop pages are ~550 tokens, so its prompts carry no history and its warm start is shorter;
# R is WebShop's score (see --reward); an update takes ~6 s with two workers (250 ≈ 30 min). SearchQA episodes are ≤ 4 short turns (an update took
# ~2-3 s in one process); its warm start stops at 320 steps, in the middle of the tiny model
# learning to copy names (~16%). Neither uses --bc-target (their recipes were measured without it).
ENV_DEFAULTS: dict[str, dict] = {
    "webshop": {"history_len": 0, "bc_episodes": 200, "bc_steps": 300, "bc_target": 0.0, "reward": "score", "iters": 250},
    "searchqa": {"bc_steps": 320, "bc_target": 0.0, "iters": 600},
}


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    epilog = "per-benchmark defaults (used when the flag is not given): " + "; ".join(
        f"{e}: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items()) for e, d in ENV_DEFAULTS.items() if d)
    p = OneLineParser(description=__doc__.split("\n")[0], epilog=epilog,
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    docs = {k: v.replace("%", "%%") for k, v in field_docs(Config).items()}   # argparse %-formats help
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = argparse.SUPPRESS if suppress_defaults else f.default
        if f.type in ("bool", bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=docs.get(f.name))
        else:
            typ = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            p.add_argument(flag, type=typ, default=default, choices=CHOICES.get(f.name), help=docs.get(f.name))
    return p


def parse_args(argv=None) -> Config:
    cfg = Config(**vars(build_parser().parse_args(argv)))
    given = vars(build_parser(suppress_defaults=True).parse_args(argv))   # only the flags on the command line
    for k, v in ENV_DEFAULTS.get(cfg.env, {}).items():
        if k not in given:
            setattr(cfg, k, v)
    return cfg


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
    log: list = field(default_factory=list)

    def envs(self, n: int) -> list:
        """At least n spare envs (grown on demand)."""
        while len(self.pool) < n:
            self.pool.append(self.spec.make(split=self.spec.splits[0], seed=self.cfg.seed, **self.env_kwargs))
        return self.pool[:n]


def env_setup(cfg: Config, log):
    import envs
    spec = envs.get_spec(cfg.env)
    kw: dict = {}
    backend_line = "built-in"
    if cfg.env == "alfworld":
        import alfworld_tw
        resolved, backend_line = alfworld_tw.resolve_backend(cfg.env_backend, None)
        kw = {"preset": cfg.preset, "backend": resolved}
    elif cfg.env in ("webshop", "searchqa"):
        kw = {"backend": "builtin" if cfg.env_backend == "auto" else cfg.env_backend}
        backend_line = f"{cfg.env}: backend {kw['backend']}"
    if cfg.max_steps:
        kw["max_steps"] = cfg.max_steps
    log(backend_line)
    eval_split = cfg.eval_split or spec.splits[1]
    if eval_split not in spec.splits:
        raise ValueError(f"--eval-split {eval_split!r}: env {cfg.env} has splits {list(spec.splits)}")
    return spec, kw, backend_line, eval_split


def model_setup(cfg: Config, spec, env_kw, log):
    import policy
    if cfg.model:
        model, tok = policy.load_hf(cfg.model)
        return model, tok, cfg.model
    tiny = policy.TinyConfig(hidden=cfg.tiny_hidden, layers=cfg.tiny_layers, heads=max(2, cfg.tiny_hidden // 32),
                             kv_heads=max(1, cfg.tiny_hidden // 64), intermediate=3 * cfg.tiny_hidden)
    bc = policy.BCConfig(episodes=cfg.bc_episodes, steps=cfg.bc_steps, epsilon=cfg.bc_epsilon, slip=cfg.bc_slip,
                         target=cfg.bc_target, check_temperature=cfg.eval_temperature)
    bc_seed = cfg.seed if cfg.bc_seed < 0 else cfg.bc_seed
    # the RL step limit does not change the expert's demonstrations: keep it out of the cache key
    bc_env_kw = {k: v for k, v in env_kw.items() if k != "max_steps"}
    if cfg.env == "alfworld":
        bc_env_kw["expert"] = cfg.bc_expert
    model, tok, folder = policy.tiny_policy(spec, bc_env_kw, tiny, bc, bc_seed, cfg.cache_dir, cfg.history_len, log)
    return model, tok, folder


def model_extras(cfg: Config, model, device):
    """LoRA / gradient checkpointing / device placement for the policy being trained."""
    if cfg.grad_ckpt:
        model.gradient_checkpointing_enable()
    if cfg.lora_r and not hasattr(model, "peft_config"):
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ImportError("--lora-r needs peft: pip install peft") from None
        model = get_peft_model(model, LoraConfig(
            r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    return model.to(device)


def dist_setup(cfg: Config):
    """torchrun → (rank, world). Each rank owns whole groups; see grpo.update for the gradients."""
    import torch
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    import torch.distributed as dist
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and cfg.model and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), world


def barrier():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def gather(obj, world: int) -> list:
    """All ranks' objects (rank order); [obj] in a single process."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def generator_setup(cfg: Config, model, tok, model_dir: str):
    import policy
    if cfg.rollout == "hf":
        return policy.HFGenerator(model, tok)
    try:
        import vllm_rollout
    except ImportError as e:
        raise ImportError(str(e).splitlines()[0]) from None
    if cfg.lora_r:
        raise ValueError("--rollout vllm with --lora-r is not supported yet (the engine would need merged weights each sync)")
    import torch
    on_gpu = torch.cuda.is_available()
    max_len = min(cfg.vllm_max_len, getattr(model.config, "max_position_embeddings", cfg.vllm_max_len))
    g = vllm_rollout.VLLMGenerator(model_dir, policy.stop_ids(tok), seed=cfg.seed, max_model_len=max_len,
                                   gpu_memory_utilization=cfg.vllm_gpu_mem,
                                   kv_cache_bytes=None if on_gpu else cfg.vllm_kv_bytes)
    g.sync(model)
    return g


def judge_setup(cfg: Config, model, tok):
    if cfg.method not in ("prover", "criticsearch"):
        return None
    import judge
    kw: dict = {}
    if cfg.judge == "random":
        kw["seed"] = cfg.seed
    elif cfg.judge == "openai":
        kw.update(base_url=cfg.judge_url or None, model=cfg.judge_model or None, timeout=cfg.judge_timeout)
    elif cfg.judge == "hf":
        if cfg.judge_model:
            import policy
            jm, jt = policy.load_hf(cfg.judge_model)
            kw.update(model=jm, tokenizer=jt)
        else:
            kw.update(model=model, tokenizer=tok)
    return judge.make_judge(cfg.judge, **kw)


# ---------------------------------------------------------------------------------------------
# Checkpoints (atomic) and metrics
# ---------------------------------------------------------------------------------------------
def save_checkpoint(out: str, model, tok, opt, step: int, counter: Counter, rng_state: dict):
    import torch
    final, tmp, old = (os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old"))
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)                      # config + model.safetensors
    tok.save_pretrained(tmp)
    torch.save({"optimizer": opt.state_dict(), "rng": rng_state}, os.path.join(tmp, "trainer.pt"))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump({"step": step, "counter": dict(counter)}, f)
    # swap: a crash at any point leaves `checkpoint` or `checkpoint.old` complete
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(out: str, base_model: str = ""):
    """(model, tok, trainer state, step, counter). One clear error if it is missing or corrupt.
    A LoRA checkpoint holds only the adapters: they are applied to `base_model` (--model), or to
    the base recorded in the adapter's config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = os.path.join(out, "checkpoint")
    if not os.path.isdir(d) and os.path.isdir(d + ".old"):
        d = d + ".old"
    if not os.path.isdir(d):
        raise FileNotFoundError(f"--resume: no checkpoint in {out}")
    try:
        with open(os.path.join(d, "state.json")) as f:
            st = json.load(f)
        tok = AutoTokenizer.from_pretrained(d, padding_side="left")
        if os.path.exists(os.path.join(d, "adapter_config.json")):
            from peft import PeftModel
            base_model = base_model or json.load(open(os.path.join(d, "adapter_config.json")))["base_model_name_or_path"]
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32),
                                              d, is_trainable=True)
        else:
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        tr = torch.load(os.path.join(d, "trainer.pt"), weights_only=False)
    except Exception as e:  # any unreadable part means the checkpoint is unusable
        raise ValueError(f"--resume: corrupt checkpoint {d}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return model, tok, tr, st["step"], Counter(st["counter"])


def rng_state(py_rng: random.Random) -> dict:
    import numpy as np
    import torch
    return {"py": py_rng.getstate(), "torch": torch.get_rng_state(), "np": np.random.get_state()}


def plot_curves(out: str, rows: list[dict]):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    tok_cum, cum = [], 0
    for r in rows:
        cum += r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)
        tok_cum.append(cum)
    steps = [r["step"] for r in rows]
    for a, xs, xl in ((ax[0], steps, "policy updates"), (ax[1], tok_cum, "generated tokens (rollout + verify + judge)")):
        a.plot(xs, [r.get("train/success", float("nan")) for r in rows], alpha=0.4, label="train rollouts")
        ev = [(x, r["eval/success"]) for x, r in zip(xs, rows) if "eval/success" in r]
        if ev:
            a.plot(*zip(*ev), "o-", label="held-out eval")
        a.set_xlabel(xl)
        a.set_ylabel("success rate")
        a.set_ylim(-0.02, 1.02)
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle(os.path.basename(os.path.normpath(out)))
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png.tmp.png"), dpi=90)
    plt.close(fig)
    os.replace(os.path.join(out, "curves.png.tmp.png"), os.path.join(out, "curves.png"))


def read_metrics(path: str, upto: int | None = None) -> list[dict]:
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut by a crash
                    if upto is None or r.get("step", 0) <= upto:
                        rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------
def evaluate(agent, spec, env_kw, split: str, n: int, temperature: float, seed: int, eval_envs: list,
             rank: int = 0, world: int = 1) -> dict:
    """Held-out success at low temperature. With several workers each evaluates every world-th
    task and rank 0 merges them; episode seeds come from the task's global position, so the
    result does not depend on the number of workers. Every rank must call it."""
    from rollout import rollout_groups, spread_tasks
    tasks = spread_tasks(spec.num_tasks(split), n)   # every task type in proportion even when n < the split
    n = len(tasks)
    mine = list(range(rank, n, world))
    while len(eval_envs) < len(mine):
        eval_envs.append(spec.make(split=split, seed=seed, **env_kw))
    tok0 = agent.counter["tokens/eval"]
    groups = rollout_groups(agent, eval_envs, [tasks[i] for i in mine], 1, temperature, seed=seed + 7,
                            purpose="eval", keep_states=False, positions=mine) if mine else []
    local = {"eps": [(g[0].success, g[0].score, len(g[0].turns), g[0].task_type) for g in groups],
             "tokens": agent.counter["tokens/eval"] - tok0}
    parts = gather(local, world)
    eps = [e for p in parts for e in p["eps"]]
    m = {"eval/success": sum(e[0] for e in eps) / n, "eval/score": sum(e[1] for e in eps) / n,
         "eval/episode_len": sum(e[2] for e in eps) / n, "tokens/eval": sum(p["tokens"] for p in parts)}
    by = {}
    for e in eps:
        by.setdefault(e[3], []).append(e[0])
    for k, v in sorted(by.items()):
        m[f"eval/success/{k}"] = sum(v) / len(v)
    return m


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------
def credit_methods():
    methods = {"grpo": lambda groups, adv, run: {}}
    try:
        import prover
        methods["prover"] = prover.credit
    except ImportError:
        pass
    try:
        import baselines
        methods.update(baselines.METHODS)
    except ImportError:
        pass
    return methods


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


def setup(cfg: Config, log) -> Trainer:
    import torch
    import grpo
    from rollout import Agent
    rank, world = dist_setup(cfg)
    torch.set_num_threads(cfg.threads or ((os.cpu_count() or 1) // world if cfg.model else 1))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    methods = credit_methods()
    if cfg.method not in methods:
        raise ValueError(f"--method {cfg.method}: not available in this build (have {sorted(methods)})")
    if cfg.minibatches < 1:
        raise ValueError(f"--minibatches {cfg.minibatches}: must be >= 1 (optimizer steps per rollout batch)")
    if not 0.0 <= cfg.lr_final <= 1.0:
        raise ValueError(f"--lr-final {cfg.lr_final}: a fraction of --lr, must be in [0, 1]")
    for name in ("bc_epsilon", "bc_slip"):          # chances per demo step
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ValueError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: a probability, must be in [0, 1]")
    spec, env_kw, backend_line, eval_split = env_setup(cfg, log)
    device = cfg.device if cfg.device != "auto" else ("cuda" if cfg.model and torch.cuda.is_available() else "cpu")
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    start, counter, trainer_state = 0, Counter(), None
    if cfg.resume:
        model, tok, trainer_state, start, counter = load_checkpoint(cfg.out, cfg.model)
        model_dir = os.path.join(cfg.out, "checkpoint")
        log(f"resuming from {cfg.out}/checkpoint at step {start}")
    else:
        # every rank: a tiny warm start is built data-parallel (policy.bc_train), then loaded alike
        model, tok, model_dir = model_setup(cfg, spec, env_kw, log)
    model = model_extras(cfg, model, device)
    gen = generator_setup(cfg, model, tok, model_dir)
    agent = Agent(gen, tok, spec, compact=not (cfg.chat_prompt or cfg.model), history_len=cfg.history_len,
                  max_new_tokens=cfg.max_new_tokens, reward=cfg.reward, counter=counter)
    run = Run(cfg, agent, spec, env_kw, [], judge_setup(cfg, model, tok), cfg.out, start)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0)
    ucfg = grpo.UpdateCfg(clip_low=cfg.clip, clip_high=cfg.clip, kl_coef=cfg.kl_coef,
                          temperature=cfg.temperature, micro_tokens=cfg.micro_tokens, bf16=cfg.bf16,
                          minibatches=cfg.minibatches)
    ref = None
    if cfg.kl_coef > 0:
        import copy
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    py_rng = random.Random(cfg.seed)
    if trainer_state is not None:
        opt.load_state_dict(trainer_state["optimizer"])
        py_rng.setstate(trainer_state["rng"]["py"])
        torch.set_rng_state(trainer_state["rng"]["torch"])
    rows = []
    if rank == 0:
        rows = write_run_files(cfg, backend_line, eval_split, model_dir, env_kw, start)
    n_local = len(range(rank, cfg.tasks_per_iter, world))
    train_envs = [spec.make(split=spec.splits[0], seed=cfg.seed, **env_kw) for _ in range(n_local * cfg.group_size)]
    wall0 = float(rows[-1].get("time/wall_s", 0.0)) if start > 0 and rows else 0.0
    return Trainer(cfg, rank, world, model, tok, opt, gen, run, ucfg, ref, py_rng, train_envs, [], eval_split, rows,
                   start, wall0)


def write_run_files(cfg: Config, backend_line, eval_split, model_dir, env_kw, start) -> list[dict]:
    """config.json, an empty segments.md (ProVer/CriticSearch), metrics.jsonl cut at `start`."""
    resolved = dict(asdict(cfg), env_backend_resolved=backend_line, eval_split_resolved=eval_split,
                    model_dir=model_dir, env_kwargs=env_kw, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    with open(os.path.join(cfg.out, "config.json"), "w") as f:
        json.dump(resolved, f, indent=1)
    if cfg.method == "prover":  # (CriticSearch writes its own header on its first entry)
        import prover
        seg = os.path.join(cfg.out, "segments.md")
        if not os.path.exists(seg):
            with open(seg, "w") as f:
                f.write(prover.SEGMENTS_HEADER)
    mpath = os.path.join(cfg.out, "metrics.jsonl")
    rows = read_metrics(mpath, upto=start) if start > 0 else []   # a fresh run into an old --out starts over
    with open(mpath, "w") as f:  # drop rows past the checkpoint (a resumed run re-does them)
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


# launch time (the launcher's, for workers): time/wall_s counts the warm start, updates and
# evaluations, and a --resume adds its time to the run's earlier total
_T_START = float(os.environ.get("PROVER_T0", time.time()))


def append_row(tr: Trainer, row: dict):
    row["time/wall_s"] = round(tr.wall0 + time.time() - _T_START, 1)
    tr.rows.append(row)
    with open(os.path.join(tr.cfg.out, "metrics.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


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


def lr_at(cfg: Config, step: int) -> float:
    """Linear decay from --lr at update 1 to --lr × --lr-final at update --iters. A function of the
    step alone, so --resume continues the schedule where it stopped."""
    frac = (step - 1) / max(1, cfg.iters - 1)
    return cfg.lr * (1.0 - (1.0 - cfg.lr_final) * min(1.0, max(0.0, frac)))


def train_step(tr: Trainer, step: int, methods, log) -> dict | None:
    """One update (steps 1–4 and 6 of the loop); returns the metrics row on rank 0."""
    import grpo
    from rollout import rollout_groups
    cfg, agent = tr.cfg, tr.run.agent
    t0 = time.time()
    before = Counter(agent.counter)
    tr.run.step = step
    # 1. tasks (identical on every rank) and rollouts of this rank's groups
    tasks = [tr.py_rng.randrange(10**6) for _ in range(cfg.tasks_per_iter)]
    seed = tr.py_rng.getrandbits(31)
    mine = list(range(tr.rank, cfg.tasks_per_iter, tr.world))
    groups = rollout_groups(agent, tr.train_envs, [tasks[p] for p in mine], cfg.group_size, cfg.temperature,
                            seed=seed, positions=mine)
    # 2. GRPO advantages, per turn
    adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    # 3. method-specific credit (may add rows/groups, e.g. grpo-matched)
    t_credit = time.time()
    try:
        cstats = methods[cfg.method](groups, adv, tr.run) or {}
    except Exception as e:  # one bad group must not kill a long run: counted + logged
        agent.counter["credit/errors"] += 1
        log(f"step {step}: credit failed ({type(e).__name__}: {e}); using GRPO advantages")
        adv = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
        cstats = {"credit/error": f"{type(e).__name__}: {e}"[:200]}
    t_credit = time.time() - t_credit
    # 4. update (gradients summed over ranks) + sync the rollout engine
    lr = lr_at(cfg, step)
    for g in tr.opt.param_groups:
        g["lr"] = lr
    ustats = grpo.update(tr.model, tr.opt, grpo.rows_from(groups, adv, cfg.minibatches, cfg.loss_agg), tr.ucfg, tr.tok.pad_token_id, tr.ref)
    agent.counter["train/skipped_nonfinite"] += ustats["train/skipped_nonfinite"]
    tr.gen.sync(tr.model)
    # 6. metrics, reduced over ranks
    trajs = [t for g in groups for t in g]
    local = {"outcomes": [(t.success, t.score, len(t.turns), sum(not tn.valid for tn in t.turns),
                           sum(grpo.turn_penalty(tn, 0.0, 1.0) for tn in t.turns)) for t in trajs],
             "mixed": sum(len({t.R for t in g}) > 1 for g in groups),   # groups with a GRPO signal
             "counts": {k: agent.counter[k] - before[k] for k in agent.counter}, "credit": cstats}
    parts = gather(local, tr.world)
    if tr.rank != 0:
        return None
    outs = [o for p in parts for o in p["outcomes"]]
    d: Counter = Counter()
    for p in parts:
        d.update(p["counts"])
    n = len(outs)
    row = {"step": step, "train/success": sum(o[0] for o in outs) / n, "train/score": sum(o[1] for o in outs) / n,
           "train/episode_len": sum(o[2] for o in outs) / n,
           "train/invalid_format": sum(o[3] for o in outs) / max(1, sum(o[2] for o in outs)),
           "train/inadmissible": sum(o[4] for o in outs) / max(1, sum(o[2] for o in outs)),
           "train/mixed_groups": sum(p["mixed"] for p in parts),
           "tokens/rollout": d["tokens/rollout"], "tokens/verify": d["tokens/verify"], "tokens/judge": d["tokens/judge"],
           "env_steps/rollout": d["env_steps/rollout"],
           "env_steps/total": sum(v for k, v in d.items() if k.startswith("env_steps/") and k != "env_steps/eval"),
           "time/iter_s": time.time() - t0, "time/credit_s": t_credit, "train/lr": lr, **ustats}
    row.update(merge_method_stats([p["credit"] for p in parts]))
    return row


def train(cfg: Config) -> str:
    from tqdm import tqdm
    cfg.out = cfg.out or os.path.join("runs", f"{cfg.env}-{cfg.method}-s{cfg.seed}")
    os.makedirs(cfg.out, exist_ok=True)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    log = tqdm.write if rank0 else (lambda *a, **k: None)
    tr = setup(cfg, log)
    methods = credit_methods()
    agent = tr.run.agent
    log(f"run: {cfg.out} | env {cfg.env} | method {cfg.method} | G={cfg.group_size} x {cfg.tasks_per_iter} tasks"
        f"{f' over {tr.world} ranks' if tr.world > 1 else ''} | {cfg.iters} updates | eval on {tr.eval_split} every {cfg.eval_every}"
        f" | sampler {getattr(agent.gen, 'runner_name', cfg.rollout)}")
    if tr.start == 0 and cfg.eval_every:   # 5. (the warm start's held-out success; all workers)
        m = evaluate(agent, tr.run.spec, tr.run.env_kwargs, tr.eval_split, cfg.eval_episodes, cfg.eval_temperature,
                     cfg.seed, tr.eval_envs, tr.rank, tr.world)
        if rank0:
            append_row(tr, {"step": 0, **m, "tokens/rollout": 0, "tokens/verify": 0, "tokens/judge": 0})
        log(f"step 0 | eval {m['eval/success']:.3f} (warm start)")
    bar = tqdm(total=cfg.iters, initial=tr.start, desc="updates", disable=not rank0)
    step = tr.start
    try:
        for step in range(tr.start + 1, cfg.iters + 1):
            row = train_step(tr, step, methods, log)
            # 5. evaluation (every worker takes its share)
            if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.iters):
                m = evaluate(agent, tr.run.spec, tr.run.env_kwargs, tr.eval_split, cfg.eval_episodes,
                             cfg.eval_temperature, cfg.seed, tr.eval_envs, tr.rank, tr.world)
                if row is not None:
                    row.update(m)
            if row is None:           # ranks > 0: rank 0 logs and checkpoints
                continue
            row.setdefault("tokens/eval", 0)
            append_row(tr, row)
            bar.update(1)
            bar.set_postfix(train=f"{row['train/success']:.2f}", **({"eval": f"{row['eval/success']:.2f}"} if "eval/success" in row else {}))
            log(f"step {step} | train {row['train/success']:.3f} | "
                + (f"eval {row['eval/success']:.3f} | " if "eval/success" in row else "")
                + f"tok {row['tokens/rollout']}+{row['tokens/verify']}v+{row['tokens/judge']}j | {row['time/iter_s']:.1f}s")
            if step % cfg.checkpoint_every == 0 or step == cfg.iters:
                plot_curves(cfg.out, tr.rows)
                save_checkpoint(cfg.out, tr.model, tr.tok, tr.opt, step, agent.counter, rng_state(tr.py_rng))
    except KeyboardInterrupt:
        bar.close()
        if not rank0:
            raise SystemExit(130)
        ck = os.path.join(cfg.out, "checkpoint")
        s = json.load(open(os.path.join(ck, "state.json")))["step"] if os.path.exists(os.path.join(ck, "state.json")) else None
        print(f"\ninterrupted at update {step}; last complete checkpoint: "
              + (f"{ck} (step {s}); continue with --resume" if s is not None else "none yet"), file=sys.stderr)
        raise SystemExit(130)
    bar.close()
    if rank0 and tr.rows:
        plot_curves(cfg.out, tr.rows)
    barrier()
    return cfg.out


_STOPPING = False   # set by SIGTERM/SIGINT: errors after it are the stop's echo, not failures


def _stop_on_sigterm(signum, frame):
    # Schedulers (Slurm, Kubernetes, `timeout`) stop jobs with SIGTERM: take the same path as
    # Ctrl-C, which reports the last complete checkpoint and exits 130.
    global _STOPPING
    _STOPPING = True
    raise KeyboardInterrupt


# ---------------------------------------------------------------------------------------------
# Local workers: the laptop default uses every core
# ---------------------------------------------------------------------------------------------
def resolve_workers(cfg: Config) -> int:
    """--workers 0 → one worker per usable CPU core for the tiny policy on CPU. Why processes and
    not threads: the tiny model's matrices (64 wide) are too small for intra-op threads to help,
    and most of a step is Python (prompts, env logic, sampling), so a second core only pays off
    as a second process with its own share of the groups."""
    if cfg.workers < 0:
        raise ValueError(f"--workers {cfg.workers}: must be >= 0 (0 = auto)")
    if cfg.workers > cfg.tasks_per_iter:
        raise ValueError(f"--workers {cfg.workers}: more workers than --tasks-per-iter {cfg.tasks_per_iter} (each worker owns whole groups)")
    if cfg.workers:
        return cfg.workers
    if cfg.model or cfg.rollout != "hf" or cfg.device == "cuda":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, cfg.tasks_per_iter))


def launch_workers(n: int, argv: list[str]) -> int:
    """Start n copies of this script as ranks 0..n-1 of a gloo process group on 127.0.0.1 (the
    environment torchrun would give them; see dist_setup) and wait. Rank 0 prints, writes the run
    directory and checkpoints; all ranks roll out and evaluate their share. Ctrl-C/SIGTERM are passed
    on once, so the run stops as a single process would (last complete checkpoint, exit 130). If a
    worker fails, the others are stopped rather than left waiting for it in the next collective;
    the other ranks' stderr is shown only when rank 0 did not already report the error itself."""
    import signal
    import socket
    import subprocess
    import tempfile
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                PROVER_T0=str(_T_START))
    errs = [None] + [tempfile.TemporaryFile("w+") for _ in range(n - 1)]
    # own sessions: a terminal's Ctrl-C reaches only this process, which passes it on once
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], start_new_session=True,
                              stderr=errs[r], env=dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    user_stop, stopped_at, failed_at = False, None, None

    def stop_all(*_):
        nonlocal stopped_at
        stopped_at = stopped_at or time.time()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def on_signal(signum, frame):
        nonlocal user_stop
        user_stop = True
        stop_all()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    while any(p.poll() is None for p in procs):
        now = time.time()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if failed_at and not stopped_at and now > failed_at + 5:   # the rest have not failed by themselves
            stop_all()
        if stopped_at and now > stopped_at + 60:                   # one stuck in a broken collective
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    if user_stop:
        return 130
    failed = [r for r, c in enumerate(codes) if c not in (0, 130)]   # 130: stopped by us
    if not failed:
        return max(codes)
    if failed[0] != 0:   # rank 0 did not report it (it printed its own error if it failed): show the worker's
        errs[failed[0]].seek(0)
        sys.stderr.write(f"train.py: worker {failed[0]} failed (exit {codes[failed[0]]}):\n" + errs[failed[0]].read()[-4000:])
    return codes[failed[0]]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args(argv)
    import signal
    try:
        n = resolve_workers(cfg) if "WORLD_SIZE" not in os.environ else 1
    except ValueError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    if n > 1:
        raise SystemExit(launch_workers(n, argv))
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    rank = int(os.environ.get("RANK", "0"))
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
        if _STOPPING and rank != 0:   # a peer stopped first and broke a collective: stop quietly
            raise SystemExit(130)
        raise
    if rank == 0:
        print(f"done: {out}")


if __name__ == "__main__":
    main()
