"""bench/fsdp_step.py — one full-parameter bf16 GRPO update of a Qwen3-1.7B-shaped policy under FSDP2.

    python bench/fsdp_step.py                        # one CUDA GPU: writes results/speed/fsdp_step.json
    torchrun --nproc-per-node N bench/fsdp_step.py   # N GPUs: the same update sharded N ways
    python bench/fsdp_step.py --cpu-smoke            # tiny model, CPU, gloo, one rank (the test suite runs it)

No weights are downloaded: the model is built locally with Qwen3-1.7B's config (28 layers, hidden
2048, 16 query / 8 KV heads of 128, MLP 6144, vocabulary 151,936, tied embeddings: 1.7B parameters)
and random init; speed and memory do not depend on the weights.

What runs is train.py's own code under `--fsdp --bf16`, not a stand-in:
  * `dist.shard` (FSDP2 per decoder layer, then the root; MixedPrecisionPolicy bf16 compute, fp32
    gradient reduction into fp32 master shards; summed gradients), AdamW on the shards;
  * `update/<variant>`: `grpo.update` on `--rows` synthetic turn-rows per rank (`--prompt` + `--action`
    tokens, on-policy old log-probs so ρ = 1), one untimed warm-up step first. Variants: full, and
    full with gradient checkpointing (`--grad-ckpt`'s non-reentrant form);
  * `sync_s`: the HF sampler's refresh after an update (`dist.copy_full_weights` into an unsharded
    copy, what build.FullCopySampler.sync does) and `export_s`: the full-weights gather to rank 0's
    CPU that the checkpoint's HF export does.
Memory: `peak_gib` is torch.cuda.max_memory_allocated during the update variant (the sampler copy
is built after the updates and reported separately as `sampler_copy_gib`); `shard_state_gib` is
what FSDP keeps per rank between updates (fp32 weights + gradients + Adam moments, / world).
MFU as in bench/gpu_step.py (same FLOP count; peak `--peak-tflops`, 989 for H100/H200 dense bf16).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

QWEN3_1_7B = dict(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=6144, vocab=151936)
SMOKE = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=700,
             rows=4, prompt=24, action=6, steps=1)


def gib(n_bytes: float) -> float:
    return round(n_bytes / 2**30, 3)


def peak_mem(device: str) -> float | None:
    """Device peak (GiB) since the last reset; on CPU the process's peak RSS (GiB, never reset)."""
    import torch
    if device.startswith("cuda"):
        return gib(torch.cuda.max_memory_allocated())
    return gib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def time_variant(variant: str, a, device: str, rank: int, world: int) -> dict:
    import torch
    from infra import dist
    import grpo
    from gpu_step import build, model_flops, sync, synthetic_rows, timed_updates
    model = build(a, device)                                   # fp32, random init, on the device
    n_all = sum(p.numel() for p in model.parameters())
    n_body = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    if variant == "full+ckpt":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    dist.shard(model, bf16=True)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6, weight_decay=0.0)
    ucfg = grpo.UpdateCfg(bf16=True, micro_tokens=a.micro_tokens)
    rows = synthetic_rows(model, a, device, seed=1 + rank)     # each rank its own rows (its groups)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times, stats = timed_updates(model, opt, rows, ucfg, device, a.steps)
    s = min(times)
    tokens = a.rows * (a.prompt + a.action) * world
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    res = {"variant": variant, "params": n_all, "step_s": s, "step_s_all": times,
           "tokens_per_s": tokens / s, "tflops_per_rank": model_flops(a, n_body) / s / 1e12,
           "grad_norm": stats.get("train/grad_norm"), "finite": stats.get("train/skipped_nonfinite") == 0,
           "peak_gib": peak_mem(device), "shard_state_gib": gib(local * 16)}   # 4 + 4 + 8 bytes / param
    res["mfu"] = res["tflops_per_rank"] / a.peak_tflops
    if variant == "full":                                      # the per-update extras of --fsdp
        full = build(a, device).eval().requires_grad_(False)   # the sampler's unsharded copy
        res["sampler_copy_gib"] = gib(sum(p.numel() * p.element_size() for p in full.parameters()))
        sync(device)
        t = time.perf_counter()
        dist.copy_full_weights(model, full)
        sync(device)
        res["sync_s"] = time.perf_counter() - t
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        t = time.perf_counter()
        get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        res["export_s"] = time.perf_counter() - t
        del full
    del model, opt
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU (gloo): checks the code path, no figures")
    p.add_argument("--device", default="cuda")
    for k, v in QWEN3_1_7B.items():
        p.add_argument(f"--{k.replace('_', '-')}", type=int, default=v)
    p.add_argument("--rows", type=int, default=64, help="turn-rows per rank")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--action", type=int, default=32)
    p.add_argument("--micro-tokens", type=int, default=16384, help="padded tokens per forward pass")
    p.add_argument("--steps", type=int, default=3, help="timed updates per variant (the best is reported)")
    p.add_argument("--variants", default="full,full+ckpt")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--out", default=os.path.join(ROOT, "results", "speed", "fsdp_step.json"))
    a = p.parse_args(argv)
    if a.cpu_smoke:
        a.device = "cpu"
        for k, v in SMOKE.items():
            setattr(a, k, v)
    import torch
    use_cuda = a.device.startswith("cuda")
    if use_cuda and not torch.cuda.is_available():
        print("bench/fsdp_step.py: no CUDA GPU visible (use --cpu-smoke for a CPU check of the code path)", file=sys.stderr)
        return 1
    torch.set_num_threads(1 if a.cpu_smoke else torch.get_num_threads())
    from infra import dist
    rank, world = dist.init(use_cuda, fsdp=True)
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if use_cuda else "cpu"
    res = {"device": torch.cuda.get_device_name() if use_cuda else "cpu", "world": world, "torch": torch.__version__,
           "cpu_smoke": a.cpu_smoke,
           "config": {k: v for k, v in vars(a).items() if k != "out"},
           "update": [time_variant(v, a, device, rank, world) for v in a.variants.split(",") if v]}
    if rank == 0:
        lines = [f"# FSDP2 bf16 GRPO update on {world} × {res['device']} (torch {res['torch']})", "",
                 f"{a.rows} rows/rank × ({a.prompt} prompt + {a.action} action) tokens; Qwen3 shape "
                 f"{a.layers}×{a.hidden}, vocabulary {a.vocab}; bf16 compute, fp32 master shards", "",
                 "| variant | params | step s | tokens/s | TFLOP/s/rank | MFU | peak GiB | shard state GiB |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in res["update"]:
            lines.append(f"| {r['variant']} | {r['params'] / 1e6:.0f}M | {r['step_s']:.3f} | {r['tokens_per_s']:,.0f} | "
                         f"{r['tflops_per_rank']:.1f} | {r['mfu']:.1%} | {r['peak_gib']} | {r['shard_state_gib']} |")
        full = next((r for r in res["update"] if r["variant"] == "full"), None)
        if full:
            lines += ["", f"sampler refresh (full-weight gather into an unsharded copy of {full['sampler_copy_gib']} GiB): "
                          f"{full['sync_s']:.3f} s; HF-export gather to rank 0's CPU: {full['export_s']:.3f} s"]
        if a.cpu_smoke:
            lines += ["", "(--cpu-smoke: a code-path check; CPU peak is the process's RSS, not a device figure)"]
        print("\n".join(lines))
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    dist.barrier()
    return 0 if all(r["finite"] for r in res["update"]) else 1


if __name__ == "__main__":
    sys.exit(main())
