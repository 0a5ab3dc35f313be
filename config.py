"""config.py — the one config of a run: a dataclass whose field docstrings are the --help texts.

    cfg = parse_args(["--env", "keydoor", "--env-opt", "rooms=8"])   # flags → Config (+ per-env defaults)
    validate(cfg)                                                     # every rule, before anything is built

Each field's docstring (the string under it) is its help text, read from the source by
`field_docs`, so the flag reference cannot drift from the code; the `# --- title` lines group the
fields (the run, GRPO, ProVer; then baselines, lab, backends, scale), as `--help` shows them. The
choices of a flag that names a kind come from that kind's one registry (`CHOICES`). An env gives
its own default where the ALFWorld-tuned one does not fit (`envs.EnvSpec.defaults`), and a method
may preset flags (`methods.Method.flags`); an explicit flag always wins. `RULES` are checked by
`validate` in well under a second: one line naming the flag and the rule, exit 2 (infra/launch.py).
What it leaves out: config files (the saved config.json is the record of a run).
"""
from __future__ import annotations

import argparse
import ast
import inspect
import os
from dataclasses import dataclass, field, fields

import envs
import judge
import rollout
from methods import METHODS
from sims import household


# ---------------------------------------------------------------------------------------------
# Config: one dataclass; each field's docstring is its --help text
# ---------------------------------------------------------------------------------------------
@dataclass
class Config:
    # --- the run
    env: str = "alfworld"
    """benchmark (envs.ENVS; keydoor: the credit lab, known pivotal decisions); its own defaults for other flags are listed at the end"""
    method: str = "prover"
    """credit assignment (methods/__init__.py, one line each below)"""
    judge: str = "builtin"
    """ProVer/CriticSearch judge backend (judge.JUDGES); truth: the credit lab's perfect selection, the success's key turn from the env's labels (--env keydoor, ProVer's methods only)"""
    model: str = ""
    """HF model folder or hub id; empty = build the tiny offline policy (warm-started by behaviour cloning)"""
    iters: int = 200
    """number of policy updates"""
    group_size: int = 8
    """G: rollouts per task (a GRPO group)"""
    tasks_per_iter: int = 8
    """tasks (groups) per update"""
    eval_every: int = 10
    """evaluate every N updates (0 = never)"""
    eval_episodes: int = 128
    """held-out tasks per evaluation (N spread evenly over the eval split, all task types; 0 = every
    task of a finite split, as the paper evaluates)"""
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
    log: str = ""
    """optional loggers, comma-separated: tensorboard (<out>/tensorboard/) and/or wandb (offline unless $WANDB_MODE is set: <out>/wandb/); the same keys as metrics.jsonl; neither package is a requirement: a missing one is an error at start-up"""
    env_opt: list = field(default_factory=list)
    """KEY=VALUE option of the env, repeatable, checked by the env (e.g. --env-opt rooms=8 --env-opt p_key=0.8 for keydoor)"""
    max_steps: int = 0
    """episode step limit (0 = the benchmark's: ALFWorld 50, WebShop 15, SearchQA 4)"""
    history_len: int = 4
    """past (observation, action) steps shown in the prompt"""
    # --- GRPO (grpo.py)
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
    loss_agg: str = "token-mean"
    """loss aggregation: token-mean (every action token alike: verl-agent's) | traj-mean (every trajectory alike: the mean of each trajectory's token mean, so long failures do not outweigh short successes)"""
    minibatches: int = 1
    """optimizer steps per rollout batch: its turns are split into this many mini-batches, one PPO-clip step each (verl's ppo_mini_batch_size; 1 = a single on-policy step)"""
    # --- ProVer (prover.py, verify.py; the options beyond the paper: methods/prover_options.py)
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
    credit_test: str = "positive"
    """when a verified segment gets credit, and how much: positive (the paper: Δ̂ > margin, bonus λ·Δ̂) | se (also Δ̂ > z·SE, bonus λ·Δ̂) | shrink (also Δ̂ > z·SE, bonus λ·max(Δ̂ − z·SE, 0)); z = --credit-z"""
    credit_z: float = 1.0
    """z of --credit-test se / shrink and of --verify-k-max's stopping rule Δ̂ ≠ 0 and |Δ̂| ≥ z·SE"""
    credit_scope: str = "segment"
    """who gets the bonus: segment (the paper: the judged success's turns ℓ..r) | matched (also every rollout of the group that took the segment's actions from the same prompt-visible states: observation, admissible list and the prompt's last --history-len steps)"""
    verify_crn: bool = False
    """common random numbers in verification: continuation k from s_pre and from s_post share sampling seeds and env randomness; Δ̂ = mean of the paired differences, with the paired SE"""
    verify_k_max: int = 0
    """adaptive K: continuations in rounds of --verify-k per side until Δ̂ ≠ 0 and |Δ̂| ≥ z·SE, or this many per side (0 = off: one round, the paper's)"""
    verify_estimate: str = "fresh"
    """with --verify-k-max: fresh (Δ̂ and SE from a second, independent batch of as many continuations as the stopping rounds used: unbiased, about twice the cost) | pooled (Δ̂ over the stopping rounds themselves: cheaper, biased towards large |Δ̂| because the rounds that stop are those whose noise cleared z·SE)"""
    trust_judge: float = 0.0
    """credit every judged segment λ·C with C = this value, without verification (trust the judge: the ablation that shows what verification buys; 0 = off, verify as the paper does)"""
    judge_max: int = 0
    """judge at most this many eligible groups per update, drawn at random (seeded by --seed and the update); 0 = every eligible group (the paper). The judge's and the verification's tokens scale with the groups judged: this trades credit for cost"""
    negative_credit: bool = False
    """also verify the failures' different actions at the segment's start state (same prompt view) against the shared V̂(s_pre); one verifiably worse (the --credit-test on V̂(s_pre) − V̂(s_after)) gets λ·(V̂(s_after) − V̂(s_pre)) < 0 on its turns"""
    focus: float = 1.0
    """β: the credited success's turns outside the segment keep β × their GRPO advantage (1 = the paper: unchanged)"""
    judge_success: str = "shortest"
    """which success the judge examines: shortest (the paper) | judge (it sees every success's preview and names one; an invalid choice falls back to the shortest)"""
    # --- baselines (methods/)
    matched_extra: float = 0.4
    """grpo-matched: extra rollout tokens per update as a share of the rollout tokens (0.4 = 40% more; default: about ProVer's overhead, see methods/grpo_matched.py)"""
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
    vine_k: int = 4
    """vine: continuations per state behind each V̂ (the SE of Â shrinks as 1/√K)"""
    vine_turns: int = 0
    """vine: turns credited per trajectory, drawn uniformly and weighted T/m (0 = every turn)"""
    critic_alpha: float = 0.25
    """criticsearch: weight α of the normalised turn labels (A = A^GRPO + α·Â)"""
    # --- lab (the credit lab: --env keydoor; lab/)
    oracle_eps: float = 1e-4
    """ladder arms (oracle-add, oracle, prover-exact): oracle.py's pruning threshold on a node's reach probability (0 = exact enumeration; the error bound is logged as oracle/bound_max)"""
    # --- backends: env, sampler, judge, the tiny policy's warm start (infra/)
    rollout: str = "hf"
    """generation backend: hf (transformers) | vllm (colocated engine, weights synced after each update)"""
    chat_prompt: bool = False
    """use the benchmark's full verl-agent chat prompt (default for --model) instead of the compact one"""
    preset: str = "small"
    """ALFWorld household size: small (CPU default) | full (ALFWorld-like)"""
    env_backend: str = "auto"
    """auto | builtin | real: real benchmark data/engine (ALFWorld official games, WebShop repo, retrieval server)"""
    judge_url: str = ""
    """openai judge: base URL of an OpenAI-compatible endpoint (else $OPENAI_BASE_URL)"""
    judge_model: str = ""
    """openai judge: model name (else $JUDGE_MODEL); hf judge: model folder (default: the policy itself)"""
    judge_timeout: float = 60.0
    """openai judge: seconds per request"""
    tiny_hidden: int = 64
    """tiny policy width (attention heads = width / 32)"""
    tiny_layers: int = 2
    """tiny policy depth"""
    bc_episodes: int = 400
    """behaviour cloning: noisy expert episodes (0 = no warm start: RL starts from the untrained tiny policy, and the env needs no expert)"""
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
    vllm_kv_bytes: int = 256 * 2**20
    """vLLM KV-cache bytes on CPU (on GPU vLLM sizes it from --vllm-gpu-mem)"""
    vllm_gpu_mem: float = 0.5
    """vLLM: fraction of GPU memory for weights + KV cache (colocated with the trainer)"""
    vllm_max_len: int = 4096
    """vLLM: max prompt + response tokens"""
    # --- scale: processes, devices, memory (infra/dist.py, infra/build.py)
    micro_tokens: int = 8192
    """padded tokens per forward pass in the update (memory knob)"""
    threads: int = 0
    """torch CPU threads (0 = auto: 1 for the tiny policy, whose ops are too small to split, all cores for --model)"""
    workers: int = 0
    """local data-parallel worker processes (0 = auto: one per CPU core, at most --tasks-per-iter, for the tiny policy on CPU; 1 for --model, --rollout vllm and CUDA, where torchrun is the tool). Each worker rolls out and evaluates its share of the tasks; gradients are summed, so an update is the one a single process would take"""
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
    fsdp: bool = False
    """shard the policy's weights, gradients and Adam state over the ranks (torch FSDP2, per decoder layer; under torchrun or --workers); gradients are summed as without it, so an update equals the single-process one. Checkpoints become sharded (torch.distributed.checkpoint, resumable on any number of ranks) plus a full HF export. Not with --lora-r"""



def registry_names(path: str, name: str) -> list[str]:
    """The keys of the dict `name` in the project file `path`, read from its source: for a
    registry whose module imports torch (grpo.py), which `--help` must not need."""
    tree = ast.parse(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), path)).read())
    node = next(n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                and getattr(n.targets[0] if isinstance(n, ast.Assign) else n.target, "id", "") == name)
    return [k.value for k in node.value.keys]


# A flag that names a kind takes its choices from that kind's registry, the one list of its names
# (argparse reads the dict's keys when it parses, so a name added there is a choice at once):
# env envs.ENVS, method methods.METHODS, judge judge.JUDGES, loss grpo.LOSS_AGGS, reward
# rollout.REWARDS. The others are a flag's own values.
CHOICES = {
    "env": envs.ENVS,
    "method": METHODS,
    "judge": judge.JUDGES,
    "loss_agg": registry_names("grpo.py", "LOSS_AGGS"),
    "reward": rollout.REWARDS,
    "preset": household.PRESETS,
    "bc_expert": household.EXPERTS,
    "credit_test": ["positive", "se", "shrink"],
    "verify_estimate": ["fresh", "pooled"],
    "credit_scope": ["segment", "matched"],
    "judge_success": ["shortest", "judge"],
    "rollout": ["hf", "vllm"],
    "env_backend": ["auto", "builtin", "real"],
    "device": ["auto", "cpu", "cuda"],
}


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (the help text), read from the source."""
    tree = ast.parse(inspect.getsource(cls))
    body, docs = tree.body[0].body, {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = b.value.value
    return docs


def field_groups(cls) -> dict[str, list[str]]:
    """{group title: its fields in order}, from the `# --- title` lines of the dataclass's source."""
    src = inspect.getsource(cls)
    heads = [(k + 1, line.strip()[len("# --- "):]) for k, line in enumerate(src.splitlines())
             if line.strip().startswith("# --- ")]
    groups: dict[str, list[str]] = {}
    for node in ast.parse(src).body[0].body:
        if isinstance(node, ast.AnnAssign):
            groups.setdefault([t for n, t in heads if n < node.lineno][-1], []).append(node.target.id)
    return groups


def flags_text(d: dict) -> str:
    """{"iters": 40, "history_len": 2} → '--iters 40, --history-len 2'."""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items())


def env_defaults(env: str) -> dict:
    """The env's own defaults for train.py's flags (envs.EnvSpec.defaults)."""
    return envs.get_spec(env).defaults


def preset_flags(cfg: Config) -> dict:
    """The env's defaults and the method's preset flags that this run took."""
    return {k: v for k, v in {**env_defaults(cfg.env), **METHODS[cfg.method].flags}.items() if getattr(cfg, k) == v}


def defaults_line(cfg: Config) -> str:
    """The line a run starts with when its env or method set flags: which, and to what."""
    took = preset_flags(cfg)
    whose = f"--env {cfg.env}" + (f" and --method {cfg.method}" if METHODS[cfg.method].flags else "")
    return f"defaults of {whose} (a flag given wins): {flags_text(took)}" if took else ""


def default_out(cfg: Config) -> str:
    """The run directory when --out is not given."""
    return os.path.join("runs", f"{cfg.env}-{cfg.method}-s{cfg.seed}")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit (argparse prints usage too)
        self.exit(2, f"train.py: error: {message}\n")


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    epilog = "per-benchmark defaults (used when the flag is not given): " + "; ".join(
        f"{e}: {flags_text(env_defaults(e))}" for e in envs.ENVS if env_defaults(e))
    p = OneLineParser(prog="train.py", epilog=epilog,
                      description="train.py — the training loop: rollouts → credit (GRPO / ProVer / baselines) → PPO-clip update",
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    docs = field_docs(Config)
    docs["method"] += ": " + "; ".join(f"{k}: {m.doc}" + (" [--env keydoor only]" if m.lab else "")
                                       + (f" [{flags_text(m.flags)}]" if m.flags else "") for k, m in METHODS.items())
    docs = {k: v.replace("%", "%%") for k, v in docs.items()}   # argparse %-formats help
    types = {f.name: f for f in fields(Config)}
    for title, names in field_groups(Config).items():
        g = p.add_argument_group(title)
        for name in names:
            f = types[name]
            flag = "--" + name.replace("_", "-")
            default = argparse.SUPPRESS if suppress_defaults else (f.default if f.default_factory is field().default_factory else [])
            typ = f.type if isinstance(f.type, str) else f.type.__name__
            if typ == "bool":
                g.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=docs.get(name))
            elif typ == "list":     # repeatable KEY=VALUE (--env-opt)
                g.add_argument(flag, action="append", metavar="KEY=VALUE", default=default, help=docs.get(name))
            else:
                g.add_argument(flag, type={"int": int, "float": float, "str": str}[typ], default=default,
                               choices=CHOICES.get(name), help=docs.get(name))
    return p


def parse_args(argv=None) -> Config:
    """Flags → Config. A flag not given takes the method's preset (methods.Method.flags), else the
    env's default (envs.EnvSpec.defaults), else the Config default: an explicit flag always wins."""
    cfg = Config(**vars(build_parser().parse_args(argv)))
    given = vars(build_parser(suppress_defaults=True).parse_args(argv))   # only the flags on the command line
    for k, v in {**env_defaults(cfg.env), **METHODS[cfg.method].flags}.items():
        if k not in given:
            setattr(cfg, k, v)
    return cfg


# (field, rule holds?, the rule in words): checked before anything is built
RULES = [
    ("iters", lambda v: v >= 0, ">= 0"), ("group_size", lambda v: v >= 2, ">= 2 (a group needs two rollouts to compare)"),
    ("tasks_per_iter", lambda v: v >= 1, ">= 1"), ("eval_every", lambda v: v >= 0, ">= 0 (0 = never)"),
    ("eval_episodes", lambda v: v >= 0, ">= 0 (0 = the whole split)"), ("eval_repeats", lambda v: v >= 1, ">= 1"),
    ("eval_temperature", lambda v: v > 0, "> 0"), ("temperature", lambda v: v > 0, "> 0"),
    ("checkpoint_every", lambda v: v >= 0, ">= 0 (0 = auto)"), ("max_steps", lambda v: v >= 0, ">= 0 (0 = the benchmark's)"),
    ("history_len", lambda v: v >= 0, ">= 0"), ("lr", lambda v: v > 0, "> 0"),
    ("lr_final", lambda v: 0.0 <= v <= 1.0, "a fraction of --lr, must be in [0, 1]"),
    ("clip", lambda v: v > 0, "> 0"), ("kl_coef", lambda v: v >= 0, ">= 0"),
    ("max_new_tokens", lambda v: v >= 1, ">= 1"), ("micro_tokens", lambda v: v >= 1, ">= 1"),
    ("minibatches", lambda v: v >= 1, "must be >= 1 (optimizer steps per rollout batch)"),
    ("min_success", lambda v: v >= 1, ">= 1"), ("verify_k", lambda v: v >= 1, ">= 1 (continuations per side)"),
    ("lam", lambda v: v >= 0, ">= 0"), ("spo_interval", lambda v: v >= 1, ">= 1"), ("spo_n", lambda v: v >= 1, ">= 1"),
    ("vine_k", lambda v: v >= 1, ">= 1"), ("vine_turns", lambda v: v >= 0, ">= 0 (0 = every turn)"),
    ("spo_tree_branch", lambda v: v >= 2, ">= 2"), ("critic_alpha", lambda v: v >= 0, ">= 0"),
    ("tiny_hidden", lambda v: v >= 32 and v % 32 == 0, "a multiple of 32"), ("tiny_layers", lambda v: v >= 1, ">= 1"),
    ("bc_episodes", lambda v: v >= 0, ">= 0 (0 = no warm start)"), ("bc_steps", lambda v: v >= 1, ">= 1"),
    ("bc_target", lambda v: 0.0 <= v <= 1.0, "a success rate, must be in [0, 1]"),
    ("bc_epsilon", lambda v: 0.0 <= v <= 1.0, "a probability, must be in [0, 1]"),
    ("bc_slip", lambda v: 0.0 <= v <= 1.0, "a probability, must be in [0, 1]"),
    ("threads", lambda v: v >= 0, ">= 0 (0 = auto)"), ("judge_timeout", lambda v: v > 0, "> 0"),
    ("credit_z", lambda v: v >= 0, ">= 0 (SEs below Δ̂)"), ("verify_k_max", lambda v: v >= 0, ">= 0 (0 = off)"),
    ("focus", lambda v: 0.0 <= v <= 1.0, "β, must be in [0, 1] (1 = the paper)"),
    ("judge_max", lambda v: v >= 0, ">= 0 (0 = every eligible group)"),
    ("trust_judge", lambda v: v >= 0, ">= 0 (0 = off: verify)"),
]


def validate(cfg: Config) -> dict:
    """Every rule on the config, before anything is built; returns the parsed --env-opt values.
    Raises ValueError with one line naming the flag and the rule."""
    for name, ok, rule in RULES:
        if not ok(getattr(cfg, name)):
            raise ValueError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: {rule}")
    if cfg.verify_k_max and cfg.verify_k_max < cfg.verify_k:
        raise ValueError(f"--verify-k-max {cfg.verify_k_max}: must be 0 (off) or >= --verify-k {cfg.verify_k} (one round)")
    if cfg.max_success < cfg.min_success:
        raise ValueError(f"--max-success {cfg.max_success}: must be >= --min-success {cfg.min_success}")
    if cfg.model and os.path.isfile(os.path.expanduser(cfg.model)):
        raise ValueError(f"--model {cfg.model}: is a file; give a model folder (config.json + weights) or a hub id")
    if cfg.model and os.path.isdir(os.path.expanduser(cfg.model)) and not os.path.exists(os.path.join(os.path.expanduser(cfg.model), "config.json")):
        raise ValueError(f"--model {cfg.model}: folder has no config.json (not a Hugging Face model folder)")
    from infra import records                   # --log: known names, packages installed (records.parse_loggers)
    records.parse_loggers(cfg.log)
    if cfg.fsdp and cfg.lora_r:
        # LoRA trains ~1% of the weights: its gradients and Adam state are small, and sharding
        # a frozen base under peft's wrapper would need its own checkpoint format for adapters
        raise ValueError(f"--fsdp with --lora-r {cfg.lora_r}: not supported; LoRA's trainable state is small, "
                         "use plain data parallel (torchrun or --workers, without --fsdp) with --lora-r")
    if cfg.fsdp and METHODS[cfg.method].judge and cfg.judge == "hf" and not cfg.judge_model \
            and cfg.rollout != "hf":
        # the policy-as-judge generates with the unsharded copy, which only --rollout hf keeps
        raise ValueError("--fsdp with --judge hf (the policy as judge) needs --rollout hf, or a separate --judge-model")
    spec, method = envs.get_spec(cfg.env), METHODS[cfg.method]
    lab_envs = lambda: " or ".join(f"--env {e}" for e in envs.ENVS if envs.get_spec(e).lab)   # noqa: E731
    if method.lab:
        if not spec.lab:
            raise ValueError(f"--method {cfg.method}: needs the env's truth, which only {lab_envs()} has (the credit lab)")
        if cfg.rollout != "hf":
            raise ValueError(f"--method {cfg.method}: the exact credit scores the policy in this process; needs --rollout hf")
        if cfg.method in ("prover-exact", "prover-plus-exact") and cfg.negative_credit:
            # the exact arms replace the segment's Δ̂ only; the alternatives' estimate compares Monte Carlo
            # continuations with the segment's, which the exact verifier does not run
            raise ValueError(f"--method {cfg.method} with --negative-credit: not supported (the exact arms value the "
                             "judged segment only); use --method prover-plus --negative-credit")
    if cfg.trust_judge > 0 and cfg.negative_credit:
        raise ValueError("--trust-judge with --negative-credit: the alternatives are verified against the segment's "
                         "continuations, which --trust-judge does not run; use one of them")
    if getattr(judge.JUDGES[cfg.judge], "lab", False):
        if not spec.lab:
            raise ValueError(f"--judge {cfg.judge}: needs the env's truth labels, which only {lab_envs()} has (the credit lab)")
        if method.judge != "judge":
            raise ValueError(f"--judge {cfg.judge}: proposes segments for ProVer's methods; --method {cfg.method} has no segment judge")
    if method.judge == "critic":
        from methods import criticsearch
        if cfg.judge not in criticsearch.CRITICS:
            raise ValueError(f"--judge {cfg.judge}: CriticSearch's critic has no such backend (it has: {', '.join(criticsearch.CRITICS)})")
    if not cfg.oracle_eps >= 0:
        raise ValueError(f"--oracle-eps {cfg.oracle_eps}: must be >= 0")
    opts = envs.parse_env_opts(spec, cfg.env_opt)
    if cfg.env == "keydoor" and opts.get("apples", 0.0) > 0 and cfg.reward != "score":
        # the apples are in the score only; under --reward success they would change nothing
        raise ValueError(f"--env-opt apples={opts['apples']}: the apples reward only the score; add --reward score")
    return opts
