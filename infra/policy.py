"""policy.py — the policy and its sampler: load any Hugging Face chat model; sample from it.

* `load_hf(path)`: any HF causal LM with its tokenizer and chat template (one clear error if the
  path or id does not resolve). The laptop default builds its policy locally instead
  (warmstart.py); both are ordinary HF folders afterwards, so everything downstream is one path.
* `encode_chat(s)`: prompt ids of a user message + the assistant header, through the tokenizer's
  own chat template (the same call for every model).
* `HFGenerator`: the transformers generation backend used by rollout.py — our batched sampling
  loop with a KV cache and the exact behaviour log-probs (softmax(logits / T) of each sampled id),
  over the transformers forward (`HFRunner`) or, for Qwen3 models, a plain-torch forward over the
  model's own modules with a preallocated cache (`Qwen3Runner`; same samples, fewer Python layers).

Imports no other project module. Leaves out: beam search, top-p/top-k (the PPO ratio needs the
plain tempered distribution), speculative decoding; vLLM lives in vllm_rollout.py.
"""
from __future__ import annotations

import inspect
import os
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------
# 1. loading a real model
# ---------------------------------------------------------------------------------------------
def load_hf(path: str, dtype=torch.float32):
    """Load a HF model + tokenizer; one clear error if the path/id does not resolve."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.isdir(path) and (path.startswith((".", "/", "~")) or os.sep in path.strip("/").split("/", 1)[-1]):
        raise FileNotFoundError(f"--model {path!r}: no such directory")
    try:
        tok = AutoTokenizer.from_pretrained(path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:  # hub id not cached / offline / missing files
        raise FileNotFoundError(f"--model {path!r}: cannot load ({str(e).splitlines()[0]})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"--model {path!r}: tokenizer has no chat template; use an instruct/chat model")
    return model, tok


def stop_ids(tok) -> list[int]:
    ids = {tok.eos_token_id}
    for s in ("<|im_end|>", "<|endoftext|>"):
        i = tok.convert_tokens_to_ids(s)
        if isinstance(i, int) and i != tok.unk_token_id and i is not None:
            ids.add(i)
    return sorted(i for i in ids if i is not None)


def encode_chat(tok, user: str) -> list[int]:
    """Prompt ids of one user message + the assistant header (the same call for every model)."""
    return encode_chats(tok, [user])[0]


def encode_chats(tok, users: list[str]) -> list[list[int]]:
    """`encode_chat` for a batch: one template render per message, one tokenizer call for all
    (a fast tokenizer encodes a list in one Rust call; per-prompt calls add Python overhead per
    prompt, which adds up over an update's many prompts)."""
    if not users:
        return []
    texts = [tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False,
                                     add_generation_prompt=True) for u in users]
    return tok(texts, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------
# 2. generation backend (transformers): batched sampling with KV cache and exact log-probs
# ---------------------------------------------------------------------------------------------
@dataclass
class Sample:
    ids: list[int]        # generated ids, including the stop token if generation stopped on it
    logprobs: list[float]  # log softmax(logits / T) of each sampled id (the behaviour policy)


class HFGenerator:
    """Left-padded batched sampling. We write the loop ourselves (not `model.generate`) so the
    returned log-probs are exactly those of the distribution we sampled from (no hidden top-k /
    top-p defaults), and so sampling is seeded per call.

    The forward passes go through one of two runners with the same interface (`prefill(prompts)`
    → last-position logits (B, V); `step(tok)` → next logits (B, V)):
    * `Qwen3Runner` (Qwen3-architecture models without sliding windows, the tiny policy included):
      the model's *own* modules and weights, called from a plain-torch loop with a preallocated
      KV cache; prompts are prefilled in length buckets (see its docstring). Same logits as the
      transformers forward up to float rounding (tested); faster for the tiny policy, whose decode
      steps are mostly per-call overhead and whose prefills are padding-bound (bench/throughput.py
      times both; see results/LOG.md, "The plain-torch Qwen3 sampler, profiled").
    * `HFRunner`: the transformers forward with its DynamicCache, for every other architecture.
    `lean=False` forces the transformers one."""

    def __init__(self, model, tok, max_batch: int = 64, lean: bool = True):
        self.model, self.tok, self.max_batch = model, tok, max_batch
        self.stop = torch.tensor(stop_ids(tok))
        self.pad = tok.pad_token_id
        self.lean = lean

    def sync(self, model) -> None:  # same object: nothing to push
        self.model = model

    def _runner(self):
        return Qwen3Runner if self.lean and Qwen3Runner.supports(self.model) else HFRunner

    @property
    def runner_name(self) -> str:
        return self._runner().NAME

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                 seed: int | None = None, row_seeds: list[int] | None = None) -> list[Sample]:
        """One sample per prompt. Each row draws from its own seeded stream (`row_seeds`, else
        derived from `seed` and the row index), so a row's sample does not depend on which other
        prompts share its batch — the property that makes data-parallel rollouts reproduce a
        single-process run, and continuations reproducible."""
        if row_seeds is None:
            base = seed if seed is not None else random.getrandbits(31)
            row_seeds = [hash((base, i)) & 0x7FFFFFFF for i in range(len(prompts))]
        out: list[Sample] = []
        for i in range(0, len(prompts), self.max_batch):
            out += self._generate(prompts[i:i + self.max_batch], max_new_tokens, temperature,
                                  row_seeds[i:i + self.max_batch])
        return out

    def _generate(self, prompts, max_new, temperature, row_seeds) -> list[Sample]:
        was_training = self.model.training
        self.model.eval()
        B = len(prompts)
        dev = next(self.model.parameters()).device
        # one stream per row on the model's device: sampling where the logits are (on a GPU, moving
        # the (B, V) logits to the CPU and drawing B·V uniforms there every token dominates a decode
        # step for a large vocabulary; see results/LOG.md, "CUDA checks on one NVIDIA H200")
        gens = [torch.Generator(device=dev).manual_seed(int(s)) for s in row_seeds]
        run = self._runner()(self.model, self.pad, max_new)
        logits = run.prefill(prompts)                                          # (B, V)
        gen = torch.full((B, max_new), self.pad, dtype=torch.long)           # (B, N)
        lps = torch.zeros((B, max_new))
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        stop = self.stop.to(dev)
        n = 0
        for n in range(1, max_new + 1):
            if temperature > 0:
                logp = F.log_softmax(logits.float() / temperature, -1)        # (B, V)
                # Gumbel-max with each row's own stream ≡ a categorical sample from softmax(logp)
                u = torch.stack([torch.rand(logp.shape[-1], generator=g, device=dev) for g in gens])  # (B, V)
                tok = (logp - torch.log(-torch.log(u.clamp(1e-20, 1.0)))).argmax(-1)      # (B,)
            else:
                logp = F.log_softmax(logits.float(), -1)
                tok = logp.argmax(-1)
            tok = torch.where(done, torch.full_like(tok, self.pad), tok)
            gen[:, n - 1], lps[:, n - 1] = tok.cpu(), logp.gather(-1, tok[:, None]).squeeze(-1).cpu()
            done |= torch.isin(tok, stop)
            if bool(done.all()) or n == max_new:
                break
            logits = run.step(tok)
        self.model.train(was_training)
        samples, stops = [], set(self.stop.tolist())
        for b in range(B):
            row = gen[b, :n].tolist()
            k = next((j + 1 for j, t in enumerate(row) if t in stops), n)
            samples.append(Sample(row[:k], lps[b, :k].tolist()))
        return samples


class HFRunner:
    """The transformers forward: one left-padded prefill (logits of the last position only), then
    one token per step through its DynamicCache."""
    NAME = "transformers"

    def __init__(self, model, pad: int, max_new: int):
        self.model, self.pad = model, pad
        self.dev = next(model.parameters()).device
        # transformers renamed the cache argument `past_key_values` → `cache` during 5.x (the old
        # name goes in 5.40): pass whichever this version's forward declares
        self.cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def _past(self, res):
        return getattr(res, "cache", None) if self.cache_kw == "cache" else res.past_key_values

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        B, L = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad, dtype=torch.long)                 # (B, L) left-padded
        mask = torch.zeros((B, L), dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, L - len(p):], mask[b, L - len(p):] = torch.tensor(p), 1
        self.mask = mask.to(self.dev)
        self.pos = (self.mask.cumsum(-1) - 1).clamp(min=0)                     # (B, L)
        # logits_to_keep=1: only the last position's (B, 1, V), not (B, L, V) — for a 152k
        # vocabulary and 64 rows of 1,500 tokens the full tensor would be ~29 GB in bf16
        res = self.model(input_ids=ids.to(self.dev), attention_mask=self.mask, position_ids=self.pos,
                         use_cache=True, logits_to_keep=1)
        self.past = self._past(res)
        return res.logits[:, -1]

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        B = tok.shape[0]
        self.mask = torch.cat([self.mask, torch.ones((B, 1), dtype=torch.long, device=self.dev)], -1)  # (B, L+n)
        self.pos = self.pos[:, -1:] + 1
        res = self.model(input_ids=tok[:, None], attention_mask=self.mask, position_ids=self.pos,
                         use_cache=True, **{self.cache_kw: self.past})
        self.past = self._past(res)
        return res.logits[:, -1]


class Qwen3Runner:
    """Sampling forward of a `Qwen3ForCausalLM` from its own modules, without the transformers
    wrapper. Per layer (the Qwen3 block, as in transformers' modeling_qwen3):
        x = RMSNorm(h);  q, k = RMSNorm_head(W_q x), RMSNorm_head(W_k x);  v = W_v x
        q, k = RoPE(q, k);  h = h + W_o · SDPA(q, K, V)      (K, V: the cache, GQA heads shared)
        h = h + W_down(SiLU(W_gate RMSNorm(h)) ⊙ W_up RMSNorm(h))
    then logits = lm_head(RMSNorm(h_last)). RoPE: the model's rotary module and transformers' own
    apply_rotary_pos_emb.

    Why: for the tiny policy a decode step is mostly the wrapper's per-call work (mask
    construction, cache objects, output records), which this loop does not do, and the prompts of
    one batch differ a lot in length (on ALFWorld one "help" text in the history makes a prompt
    several times longer), so one left-padded prefill spends much of its work on padding (see
    results/LOG.md, "The plain-torch Qwen3 sampler, profiled").

    The cache is preallocated: K, V (B, kv_heads, S, head_dim) per layer with S = longest prompt +
    max_new. Each prompt is *right-aligned* at the longest prompt's end (as with left padding), so
    decode steps write every row's token at the same column; the slots before a short prompt are
    masked. Prefill runs in length buckets (rows sorted by length; a bucket closes when the next
    prompt is > `BUCKET` × its shortest), each bucket left-padded only to its own longest prompt
    and written into its rows' columns of the shared cache."""

    NAME = "qwen3-lean"
    BUCKET = 1.25

    def __init__(self, model, pad: int, max_new: int):
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
        self.m, self.pad, self.max_new = model, pad, max_new
        self.rope = apply_rotary_pos_emb                  # transformers' own RoPE, looked up once
        c = model.config
        self.nh, self.nkv = c.num_attention_heads, c.num_key_value_heads
        self.hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.dev = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype

    @staticmethod
    def supports(model) -> bool:
        c = getattr(model, "config", None)
        return (type(model).__name__ == "Qwen3ForCausalLM" and c is not None
                and not getattr(c, "use_sliding_window", False)
                and all(t == "full_attention" for t in (getattr(c, "layer_types", None) or ["full_attention"])))

    def _forward(self, ids, pos, mask, rows, start: int, last: bool = True) -> torch.Tensor:
        """ids, pos (b, T); mask (b, 1, T, start+T) bool (True = may attend); rows: the cache rows
        (a slice or an index tensor) these b sequences own; their K, V go to columns
        [start, start+T). Returns the last position's logits (b, V), or with last=False the final
        norm's output at every position (b, T, D), for a caller that applies the head to a few."""
        mm = self.m.model
        h = mm.embed_tokens(ids)                                            # (b, T, D)
        cos, sin = mm.rotary_emb(h, pos)                                    # (b, T, hd) each
        b, T, _ = h.shape
        end = start + T
        for i, layer in enumerate(mm.layers):
            a, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(h)
            q = a.q_norm(a.q_proj(x).view(b, T, self.nh, self.hd)).transpose(1, 2)    # (b, nh, T, hd)
            k = a.k_norm(a.k_proj(x).view(b, T, self.nkv, self.hd)).transpose(1, 2)   # (b, nkv, T, hd)
            v = a.v_proj(x).view(b, T, self.nkv, self.hd).transpose(1, 2)
            q, k = self.rope(q, k, cos, sin)
            kc, vc = self.cache[i]
            kc[rows, :, start:end], vc[rows, :, start:end] = k, v
            o = F.scaled_dot_product_attention(q, kc[rows, :, :end], vc[rows, :, :end], attn_mask=mask,
                                               scale=a.scaling, enable_gqa=self.nh != self.nkv)
            h = h + a.o_proj(o.transpose(1, 2).reshape(b, T, self.nh * self.hd))
            x = layer.post_attention_layernorm(h)
            h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        if not last:
            return mm.norm(h)                                               # (b, T, D)
        return self.m.lm_head(mm.norm(h[:, -1]))                            # (b, V)

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        B, L = len(prompts), max(len(p) for p in prompts)
        S = L + self.max_new
        self.cache = [(torch.zeros(B, self.nkv, S, self.hd, dtype=self.dtype, device=self.dev),
                       torch.zeros(B, self.nkv, S, self.hd, dtype=self.dtype, device=self.dev))
                      for _ in self.m.model.layers]
        self.valid = torch.zeros(B, S, dtype=torch.bool, device=self.dev)   # cache slots holding tokens
        for b, p in enumerate(prompts):
            self.valid[b, L - len(p):L] = True
        self.pos = torch.tensor([len(p) for p in prompts], device=self.dev)[:, None]  # next position (B, 1)
        self.n = L                                                           # next cache column
        logits = [None] * B
        order = sorted(range(B), key=lambda b: len(prompts[b]))
        while order:
            lo = len(prompts[order[0]])
            j = next((j for j, b in enumerate(order) if len(prompts[b]) > self.BUCKET * lo), len(order))
            bucket, order = order[:j], order[j:]
            Lb = len(prompts[bucket[-1]])                                    # the bucket's longest
            ids = torch.full((len(bucket), Lb), self.pad, dtype=torch.long)
            for r, b in enumerate(bucket):
                ids[r, Lb - len(prompts[b]):] = torch.tensor(prompts[b])
            rows = torch.tensor(bucket, device=self.dev)
            valid = self.valid[rows, L - Lb:L]                               # (b, Lb)
            pos = (valid.long().cumsum(-1) - 1).clamp(min=0)
            # causal over the bucket's columns, keys restricted to real tokens; a padding query
            # sees itself so its (unused) row stays finite instead of an all-masked NaN
            eye = torch.eye(Lb, dtype=torch.bool, device=self.dev)
            mask = (eye.cumsum(0).bool() & valid[:, None, :]) | eye             # (b, Lb, Lb)
            # columns before the bucket's window hold no tokens of these rows: masked out
            mask = torch.cat([torch.zeros(len(bucket), Lb, L - Lb, dtype=torch.bool, device=self.dev), mask], -1)
            out = self._forward(ids.to(self.dev), pos, mask[:, None], rows, L - Lb)
            for r, b in enumerate(bucket):
                logits[b] = out[r]
        return torch.stack(logits)                                          # (B, V)

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        self.valid[:, self.n] = True
        mask = self.valid[:, None, None, :self.n + 1]                       # (B, 1, 1, n+1)
        out = self._forward(tok[:, None], self.pos, mask, slice(None), self.n)
        self.pos, self.n = self.pos + 1, self.n + 1
        return out

