"""build.py — the parts of a run, built from train.py's Config: env, policy, sampler, judge.

    spec, env_kw, backend_line, eval_split = env_setup(cfg, log)   # the env's backend resolved once
    model, tok, model_dir = model_setup(cfg, spec, env_kw, log)    # --model, or the tiny warm start
    model = model_extras(cfg, model, device)                       # LoRA, gradient checkpointing, device
    gen = generator_setup(cfg, model, tok, model_dir)              # HF sampling loop or vLLM
    judge = judge_setup(cfg, model, tok)                           # ProVer / CriticSearch only

Each takes the config (any object with train.Config's fields) and returns plain objects; nothing
here runs a training step. Optional backends (vLLM, peft) are imported inside their branch and a
missing one is one clear error.
"""
from __future__ import annotations

import random

import envs
import judge
import policy
import warmstart


def env_setup(cfg, log):
    """(spec, make keywords, backend line, eval split): the backend is resolved once, by the env."""
    spec = envs.get_spec(cfg.env)
    kw, backend_line = spec.backend(cfg.env_backend)
    kw.update({k: getattr(cfg, f) for f, k in spec.config_kwargs.items()})
    kw.update(envs.parse_env_opts(spec, cfg.env_opt))
    if cfg.max_steps:
        kw["max_steps"] = cfg.max_steps
    spec.make(split=spec.splits[0], seed=cfg.seed, **kw)   # the env's own cross-option checks, now
    log(backend_line)
    eval_split = cfg.eval_split or spec.splits[1]
    if eval_split not in spec.splits:
        raise ValueError(f"--eval-split {eval_split!r}: env {cfg.env} has splits {list(spec.splits)}")
    return spec, kw, backend_line, eval_split


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


def generator_setup(cfg, model, tok, model_dir: str):
    if cfg.rollout == "hf":
        return policy.HFGenerator(model, tok)
    try:
        import vllm_rollout          # optional: vLLM is a separate install
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
    if cfg.method not in ("prover", "criticsearch"):
        return None
    kw: dict = {}
    if cfg.judge == "random":
        kw["seed"] = cfg.seed
    elif cfg.judge == "openai":
        kw.update(base_url=cfg.judge_url or None, model=cfg.judge_model or None, timeout=cfg.judge_timeout)
    elif cfg.judge == "hf":
        if cfg.judge_model:
            jm, jt = policy.load_hf(cfg.judge_model)
            kw.update(model=jm, tokenizer=jt)
        else:
            kw.update(model=model, tokenizer=tok)
    return judge.make_judge(cfg.judge, **kw)



def rng_state(py_rng: random.Random) -> dict:
    import numpy as np
    import torch
    return {"py": py_rng.getstate(), "torch": torch.get_rng_state(), "np": np.random.get_state()}
