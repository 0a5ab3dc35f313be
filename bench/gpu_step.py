"""bench/gpu_step.py — our GRPO update and rollout sampler on a GPU with a Qwen3-0.6B-shaped model.

    python bench/gpu_step.py                  # on a CUDA GPU: random-init Qwen3-0.6B shape, bf16 autocast
    python bench/gpu_step.py --save-model DIR # also save that model + a tokenizer as an HF folder
                                              # (for `train.py --model DIR --device cuda` checks)
    python bench/gpu_step.py --device cpu --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 \
        --intermediate 192 --vocab 1000 --rows 8 --prompt 48 --action 8 --gen-rows 4   # smoke test

No weights can be downloaded on our machines, so the model is built locally from a config with
Qwen3-0.6B's shape (28 layers, hidden 1024, 16 query / 8 KV heads of 128, MLP 3072, vocabulary
151,936, tied embeddings: 0.6B parameters) and random init; speed does not depend on the weights.

What is timed — exactly the code train.py runs, not a stand-in:
  * `update/<variant>`: `grpo.update` on `--rows` turn-rows of `--prompt` prompt + `--action`
    action tokens (one optimizer step, AdamW, fp32 master weights, bf16 autocast forward and
    backward, gradient clipping), after one untimed warm-up step. Variants: full fine-tuning;
    full with gradient checkpointing; LoRA r = 16 on all projections (peft, as `--lora-r 16`).
    Old log-probs come from a no-grad pass first, so ρ = 1 as in a real on-policy step.
  * `generate`: `policy.HFGenerator` sampling `--gen-new` tokens for `--gen-rows` prompts of
    `--prompt` tokens (the fp32 policy, as train.py's HF rollout backend uses it).

MFU = model FLOPs / (time × peak): per row, 6·N_body·(P+A) for the transformer body (N_body =
parameters outside the embedding), 6·V·H·A for the LM head (our loss runs it on action tokens
only), and 6·L·(P+A)²·H_q·d_head for causal attention (QKᵀ and AV, forward + backward, halved for
the causal mask); recomputation under gradient checkpointing is not counted (the usual
convention). Peak: `--peak-tflops` (989, the H100/H200 SXM dense bf16 figure). Writes
results/speed/gpu_step.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def build(a, device):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    conf = Qwen3Config(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                       num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
                       intermediate_size=a.intermediate, max_position_embeddings=4096, tie_word_embeddings=True,
                       bos_token_id=None, eos_token_id=2, pad_token_id=0)
    with torch.device(device):     # initialise on the GPU: 0.6B fp32 weights are built in a second there
        model = Qwen3ForCausalLM(conf)
    return model


def timed_updates(model, opt, rows, ucfg, device: str, steps: int) -> tuple[list[float], dict]:
    """One warm-up update (allocator, kernels, optimizer state), then `steps` timed ones; returns
    the seconds of each and the last update's stats (shared with bench/fsdp_step.py)."""
    import grpo
    grpo.update(model, opt, rows, ucfg, pad_id=0)
    sync(device)
    times, stats = [], {}
    for _ in range(steps):
        t = time.perf_counter()
        stats = grpo.update(model, opt, rows, ucfg, pad_id=0)
        sync(device)
        times.append(time.perf_counter() - t)
    return times, stats


def synthetic_rows(model, a, device, seed: int):
    """(B) turn-rows of random tokens with on-policy old log-probs (ρ = 1) and ±1 advantages."""
    import torch
    import grpo
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, a.vocab, (a.rows, a.prompt + a.action), generator=g)
    rows = [grpo.Row(r[:a.prompt].tolist(), r[a.prompt:].tolist(), [0.0] * a.action, 1.0 if i % 2 else -1.0)
            for i, r in enumerate(ids)]
    batch = grpo.collate(rows, pad_id=0)
    with torch.no_grad():
        lp = grpo.token_logprobs(model, *(t.to(device) for t in batch[:3])).cpu()   # (B, T-1)
    for b, r in enumerate(rows):
        r.logprobs = lp[b, a.prompt - 1:a.prompt + a.action - 1].tolist()
    return rows


def model_flops(a, n_body: int) -> float:
    T = a.prompt + a.action
    per_row = 6 * n_body * T + 6 * a.vocab * a.hidden * a.action + 6 * a.layers * T * T * a.heads * a.head_dim
    return per_row * a.rows


def sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_update(variant: str, a, device) -> dict:
    import torch
    import grpo
    model = build(a, device)
    n_all = sum(p.numel() for p in model.parameters())
    n_body = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    if variant == "full+ckpt":
        model.gradient_checkpointing_enable()
    if variant == "lora16":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                 "gate_proj", "up_proj", "down_proj"]))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    ucfg = grpo.UpdateCfg(bf16=device.startswith("cuda"), micro_tokens=a.micro_tokens)
    rows = synthetic_rows(model, a, device, seed=1)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times, stats = timed_updates(model, opt, rows, ucfg, device, a.steps)
    s = min(times)
    tokens = a.rows * (a.prompt + a.action)
    res = {"variant": variant, "params": n_all, "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
           "step_s": s, "step_s_all": times, "tokens_per_s": tokens / s, "action_tokens_per_s": a.rows * a.action / s,
           "tflops": model_flops(a, n_body) / s / 1e12, "grad_norm": stats.get("train/grad_norm"),
           "finite": stats.get("train/skipped_nonfinite") == 0,
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None}
    res["mfu"] = res["tflops"] / a.peak_tflops
    del model, opt
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def time_generate(a, device) -> dict:
    import torch
    from infra.policy import HFGenerator

    class Tok:          # HFGenerator needs only the pad and stop ids
        pad_token_id, eos_token_id, unk_token_id = 0, 2, 1

        def convert_tokens_to_ids(self, t):
            return 2

    model = build(a, device).eval()
    gen = HFGenerator(model, Tok(), max_batch=a.gen_rows)
    g = torch.Generator().manual_seed(2)
    prompts = torch.randint(3, a.vocab, (a.gen_rows, a.prompt), generator=g).tolist()
    gen.stop = torch.tensor([a.vocab + 1])          # no stop token: every row generates gen_new tokens
    gen.generate(prompts[:2], 4, 1.0, seed=0)        # warm-up
    sync(device)
    t = time.perf_counter()
    out = gen.generate(prompts, a.gen_new, 1.0, seed=0)
    sync(device)
    s = time.perf_counter() - t
    n = sum(len(o.ids) for o in out)
    del model
    return {"rows": a.gen_rows, "prompt": a.prompt, "new_tokens": n, "seconds": s, "tokens_per_s": n / s}


def save_model(a, path: str) -> None:
    """The same shape as an HF folder a `train.py --model` run can load: weights of the built
    model and the tiny policy's word-level tokenizer for ALFWorld, resized to the vocabulary."""
    import envs
    from infra import warmstart
    tok = warmstart.env_tokenizer(envs.get_spec("alfworld"))
    b = argparse.Namespace(**{**vars(a), "vocab": len(tok)})
    model = build(b, "cpu")
    model.save_pretrained(path)
    tok.save_pretrained(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--rows", type=int, default=64, help="turn-rows in the update")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--action", type=int, default=32)
    p.add_argument("--micro-tokens", type=int, default=16384, help="padded tokens per forward pass")
    p.add_argument("--steps", type=int, default=3, help="timed updates per variant (the best is reported)")
    p.add_argument("--variants", default="full,full+ckpt,lora16")
    p.add_argument("--gen-rows", type=int, default=64)
    p.add_argument("--gen-new", type=int, default=32)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--save-model", default="", help="also save the model (with the ALFWorld tokenizer) here")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "speed", "gpu_step.json"))
    a = p.parse_args(argv)
    import torch
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench/gpu_step.py: no CUDA GPU visible (use --device cpu for a smoke run)", file=sys.stderr)
        return 1
    res = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "config": {k: v for k, v in vars(a).items() if k not in ("out", "save_model")},
           "update": [time_update(v, a, a.device) for v in a.variants.split(",") if v],
           "generate": time_generate(a, a.device)}
    lines = [f"# GRPO update and sampling on {res['device']} (torch {res['torch']})", "",
             f"{a.rows} rows × ({a.prompt} prompt + {a.action} action) tokens; Qwen3 shape "
             f"{a.layers}×{a.hidden}, vocabulary {a.vocab}; " + ("bf16 autocast, fp32 weights" if a.device.startswith("cuda") else "fp32"), "",
             "| variant | params | trainable | step s | tokens/s | TFLOP/s | MFU | peak GiB |", "|---|---|---|---|---|---|---|---|"]
    for r in res["update"]:
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "–"
        lines.append(f"| {r['variant']} | {r['params'] / 1e6:.0f}M | {r['trainable'] / 1e6:.1f}M | {r['step_s']:.3f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['tflops']:.1f} | {r['mfu']:.1%} | {mem} |")
    g = res["generate"]
    lines += ["", f"sampling (HFGenerator, fp32): {g['rows']} prompts of {g['prompt']} tokens, {g['new_tokens']} new "
                  f"tokens in {g['seconds']:.2f} s = {g['tokens_per_s']:,.0f} tokens/s"]
    print("\n".join(lines))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if a.save_model:
        save_model(a, a.save_model)
        print(f"saved the model and tokenizer to {a.save_model}")
    return 0 if all(r["finite"] for r in res["update"]) else 1


if __name__ == "__main__":
    sys.exit(main())
