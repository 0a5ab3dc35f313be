"""build.py — the parts of a run, built from train.py's Config: env, policy, sampler, judge.

    spec, env_kw, backend_line, eval_split = env_setup(cfg, log)   # the env's backend resolved once
    model, tok, model_dir = model_setup(cfg, spec, env_kw, log)    # --model, or the tiny warm start
    model = model_extras(cfg, model, device)                       # LoRA, gradient checkpointing, device, --fsdp
    gen = generator_setup(cfg, model, tok, model_dir)              # HF sampling loop or vLLM
    judge = judge_setup(cfg, model, tok)                           # ProVer's judge / CriticSearch's critic
    ref = reference_setup(cfg, model)                              # the KL reference (--kl-coef > 0)

Each takes the config (any object with train.Config's fields) and returns plain objects; nothing
here runs a training step. Optional backends (vLLM, peft) are imported inside their branch and a
missing one is one clear error.
"""
from __future__ import annotations

import copy
import random

from infra import dist
import envs
import judge
from methods import METHODS, criticsearch, spo
from infra import policy
from infra import warmstart


def env_setup(cfg, log):
    """(spec, make keywords, backend line, eval split): the backend is resolved once, by the env."""
    spec = envs.get_spec(cfg.env)
    kw, backend_line = spec.backend(cfg.env_backend)
    kw.update({k: getattr(cfg, f) for f, k in spec.config_kwargs.items()})
    kw.update(envs.parse_env_opts(spec, cfg.env_opt))
    if cfg.max_steps:
        kw["max_steps"] = cfg.max_steps
    env = spec.make(split=spec.splits[0], seed=cfg.seed, **kw)   # the env's own cross-option checks, now
    check_env(cfg, env)
    log(backend_line)
    eval_split = cfg.eval_split or spec.splits[1]
    if eval_split not in spec.splits:
        raise ValueError(f"--eval-split {eval_split!r}: env {cfg.env} has splits {list(spec.splits)}")
    if cfg.eval_episodes == 0 and not spec.num_tasks(eval_split):
        raise ValueError(f"--eval-episodes 0 (the whole split): {cfg.env}'s split {eval_split!r} is generated, "
                         "not finite; give a number of tasks")
    return spec, kw, backend_line, eval_split


def check_env(cfg, env) -> None:
    """What a run needs of the env beyond the Env protocol, said before anything is built."""
    if not (cfg.model or cfg.resume) and cfg.bc_episodes and not callable(getattr(env, "expert_action", None)):
        raise ValueError(f"env {cfg.env} has no expert_action(): the tiny policy's warm start clones the env's expert; "
                         "add one, give --model, or start from an untrained policy with --bc-episodes 0")
    # SPO cuts a trajectory at turn boundaries; one past the step limit never falls inside an
    # episode, and the method would be GRPO under another name
    if cfg.method not in ("spo-chain", "spo-tree"):
        return
    chain = cfg.method == "spo-chain"
    first = cfg.spo_interval if chain else min(spo.parse_depths(cfg.spo_tree_depths), default=env.max_steps)
    if first >= env.max_steps:
        flag = f"--spo-interval {cfg.spo_interval}" if chain else f"--spo-tree-depths {cfg.spo_tree_depths}"
        raise ValueError(f"{flag}: {cfg.method}'s first cut must fall inside an episode of at most {env.max_steps} "
                         f"steps (env {cfg.env}); give a smaller one (an env sets its own in EnvSpec.defaults)")


def model_setup(cfg, spec, env_kw, log):
    if cfg.model:
        model, tok = policy.load_hf(cfg.model)
        return model, tok, cfg.model
    tiny = warmstart.TinyConfig(hidden=cfg.tiny_hidden, layers=cfg.tiny_layers, heads=max(2, cfg.tiny_hidden // 32),
                                kv_heads=max(1, cfg.tiny_hidden // 64), intermediate=3 * cfg.tiny_hidden)
    bc = warmstart.BCConfig(episodes=cfg.bc_episodes, steps=cfg.bc_steps, epsilon=cfg.bc_epsilon, slip=cfg.bc_slip,
                            target=cfg.bc_target, check_temperature=cfg.eval_temperature)
    bc_seed = cfg.seed if cfg.bc_seed < 0 else cfg.bc_seed
    # the RL step limit does not change the expert's demonstrations: keep it out of the cache key
    bc_env_kw = {k: v for k, v in env_kw.items() if k != "max_steps"}
    bc_env_kw.update({k: getattr(cfg, f) for f, k in spec.demo_kwargs.items()})
    return warmstart.tiny_policy(spec, bc_env_kw, tiny, bc, bc_seed, cfg.cache_dir, cfg.history_len, log)


def model_extras(cfg, model, device):
    """LoRA / gradient checkpointing / device placement / FSDP sharding for the policy being trained."""
    if cfg.grad_ckpt:
        # under FSDP the non-reentrant form: it recomputes a layer through its module call, so
        # FSDP's gather hooks run again for the recomputation (the reentrant form's autograd
        # Function hides the recomputed forward from them)
        model.gradient_checkpointing_enable(**({"gradient_checkpointing_kwargs": {"use_reentrant": False}}
                                               if getattr(cfg, "fsdp", False) else {}))
    if cfg.lora_r and not hasattr(model, "peft_config"):
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ImportError("--lora-r needs peft: pip install peft") from None
        model = get_peft_model(model, LoraConfig(
            r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    model = model.to(device)
    return shard_policy(cfg, model) if getattr(cfg, "fsdp", False) else model


# What a sharded policy keeps beside itself (in its __dict__, so neither parameters() nor
# state_dict() see them): the unsharded sampler copy and the sharded KL reference.
FSDP_EXTRAS = "prover_fsdp_extras"


def shard_policy(cfg, model):
    """--fsdp: shard the policy (dist.shard), after taking the copies that need its whole weights
    now, before they are split:
    * the HF sampler's full copy (`--rollout hf`): generation runs on it, never on the shards
      (dist.copy_full_weights says why), and it is refreshed after every update (FullCopySampler).
      With --rollout vllm the engine holds its own full weights and no copy is made.
    * the KL reference (`--kl-coef` > 0): sharded like the policy (not kept on the CPU: its
      forward runs on every micro-batch, and sharded it costs 4 bytes × N / W per rank)."""
    frozen = lambda: copy.deepcopy(model).eval().requires_grad_(False)       # noqa: E731
    extras = {"sampler": frozen() if cfg.rollout == "hf" else None,
              "ref": dist.shard(frozen(), cfg.bf16, reshard_root=True) if cfg.kl_coef > 0 else None}
    model = dist.shard(model, cfg.bf16)
    model.__dict__[FSDP_EXTRAS] = extras
    return model


def sampling_model(model):
    """The model to generate with: a sharded policy's full copy, else the policy itself."""
    return (model.__dict__.get(FSDP_EXTRAS) or {}).get("sampler") or model


def reference_setup(cfg, model):
    """The frozen KL reference (None when --kl-coef is 0): a copy of the policy as it is now; under
    --fsdp the sharded copy `shard_policy` made."""
    if cfg.kl_coef <= 0:
        return None
    if dist.is_sharded(model):
        return model.__dict__[FSDP_EXTRAS]["ref"]
    return copy.deepcopy(model).eval().requires_grad_(False)


class FullCopySampler(policy.HFGenerator):
    """policy.HFGenerator on a sharded policy's unsharded copy: `sync` gathers the new weights into
    the copy in place (so a judge sharing the copy sees them too). Every rank calls `sync` after
    each update (an all-gather per parameter); `generate` is local, no collective."""

    def sync(self, model) -> None:
        if dist.is_sharded(model):
            dist.copy_full_weights(model, self.model)
        else:
            self.model = model


def generator_setup(cfg, model, tok, model_dir: str):
    if cfg.rollout == "hf":
        if dist.is_sharded(model):
            return FullCopySampler(sampling_model(model), tok)
        return policy.HFGenerator(model, tok)
    try:
        from infra import vllm_rollout          # optional: vLLM is a separate install
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


def judge_setup(cfg, model, tok):
    """The method's judge (ProVer's, judge.py) or critic (CriticSearch's), or None (methods' registry)."""
    kind = METHODS[cfg.method].judge
    if not kind:
        return None
    kw: dict = {}
    if cfg.judge == "random":
        kw["seed"] = cfg.seed
    elif cfg.judge == "builtin" and kind == "judge":
        # its tokens in the policy tokenizer's ids: one unit for policy and judge tokens
        kw["count_tokens"] = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
    elif cfg.judge == "openai":
        kw.update(base_url=cfg.judge_url or None, model=cfg.judge_model or None, timeout=cfg.judge_timeout)
    elif cfg.judge == "hf":
        if cfg.judge_model:
            jm, jt = policy.load_hf(cfg.judge_model)
            kw.update(model=jm, tokenizer=jt)
        else:    # the policy itself (under --fsdp its full sampler copy, kept current by the sync)
            kw.update(model=sampling_model(model), tokenizer=tok)
    if kind == "critic":
        return criticsearch.make_critic(cfg.judge, **kw)
    return judge.make_judge(cfg.judge, **kw)


def rng_state(py_rng: random.Random) -> dict:
    import numpy as np
    import torch
    return {"py": py_rng.getstate(), "torch": torch.get_rng_state(), "np": np.random.get_state()}
