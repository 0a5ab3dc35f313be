"""Policy set-up: load any Hugging Face chat model, or build the tiny offline policy and warm-start it.

Two ways to get a policy, one code path afterwards
--------------------------------------------------
* `--model PATH_OR_ID`: any HF causal LM with its tokenizer and chat template.
* no `--model` (the laptop default): nothing can be downloaded, so we *build* a chat model locally:
    1. a word-level tokenizer over the env's closed vocabulary. Text is split by
       `TOKEN_RE` = optional leading space + (a letter run | one digit | one other character), and
       newlines/other whitespace are tokens of their own, so decode(encode(text)) == text for all
       env text (no `<unk>`; digits are single tokens so "drawer 17" and "$12.99" need no number
       vocabulary). A ChatML chat template (`<|im_start|>user ... <|im_end|>`) makes it a chat model.
    2. a small Qwen3-architecture model (random init, local config),
    3. behaviour cloning on the simulator's expert with epsilon-random detours (DAgger-style labels:
       the expert's action at states the noisy policy actually visits), stopped early on purpose so
       the policy starts imperfect (~20–50% held-out success) and RL has something to do.
  The result is saved as an ordinary HF folder (AutoModelForCausalLM / AutoTokenizer load it) under
  a cache dir keyed by env + config, so a second run skips the warm start. With train.py's local
  workers the cloning is data parallel (each rank half of every batch and of the success checks).

Everything downstream (prompts via `apply_chat_template`, generation, log-probs) is the same code
as for a real model. `HFGenerator` is the transformers generation backend used by rollout.py (our
sampling loop over the transformers forward, or over `Qwen3Runner` for Qwen3 models).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

TOKEN_RE = r" ?[A-Za-z]+| ?[0-9]| ?[^A-Za-z0-9\s]|\n|\s"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
# Markup the agents write; added as whole tokens so the tiny model emits them in one step.
MARKUP = ["<action>", "</action>", "<think>", "</think>", "<search>", "</search>",
          "<answer>", "</answer>", "<information>", "</information>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
BC_VERSION = 4  # bump when the warm-start recipe changes so stale caches are not reused


# ---------------------------------------------------------------------------------------------
# 1. tokenizer
# ---------------------------------------------------------------------------------------------
def build_tokenizer(texts: list[str], atomic: list[str] = ()):
    """Closed word-level tokenizer covering every token of `texts` (+ printable ASCII fallbacks).
    `atomic` strings (e.g. product ids) become single tokens wherever they occur."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: set[str] = set()
    for t in list(texts) + ["user assistant system"]:
        for w in re.findall(r"[A-Za-z]+|[0-9]|[^A-Za-z0-9\s]", t):
            words.add(w)
    words |= {chr(c) for c in range(33, 127) if not chr(c).isalpha()}  # every punctuation/digit
    vocab: dict[str, int] = {}
    for s in SPECIAL + MARKUP + ["\n", " ", "\t"]:
        vocab.setdefault(s, len(vocab))
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
        vocab.setdefault(" " + w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(TOKEN_RE), behavior="isolated")
    tk.decoder = decoders.Fuse()  # tokens carry their own spaces: concatenate them back
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token="<unk>", padding_side="left", additional_special_tokens=["<|im_start|>"])
    tok.add_tokens(MARKUP)  # already in the vocab: registers them as atomic (not split by the regex)
    if atomic:
        tok.add_tokens(sorted(set(atomic)))
    tok.chat_template = CHATML
    return tok


# ---------------------------------------------------------------------------------------------
# 2. tiny Qwen3 model
# ---------------------------------------------------------------------------------------------
@dataclass
class TinyConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    intermediate: int = 192
    max_positions: int = 2048


def build_tiny_model(vocab_size: int, cfg: TinyConfig, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    conf = Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads, intermediate_size=cfg.intermediate,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=2, pad_token_id=0)
    return Qwen3ForCausalLM(conf)


# ---------------------------------------------------------------------------------------------
# 3. loading a real model / the cached tiny one
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
    (a fast tokenizer encodes a list in one Rust call; per-prompt calls cost ~5% of an update)."""
    if not users:
        return []
    texts = [tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False,
                                     add_generation_prompt=True) for u in users]
    return tok(texts, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------
# 4. generation backend (transformers): batched sampling with KV cache and exact log-probs
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
      transformers forward up to float rounding (tested); generation took 1.56x less time in a
      profile of the default run on 2 CPU cores (README, scale-out; bench/throughput.py times
      both), because the tiny model's decode steps are per-call overhead and its prefills are
      padding-bound.
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
        # (B, V) logits to the CPU and drawing B·V uniforms there every token cost ~170 ms a token
        # for a 152k vocabulary, measured on an H200: 369 tokens/s for 64 rows of a 0.6B model)
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

    Why: for the 137k-parameter tiny policy a decode step is mostly the wrapper's per-call work
    (mask construction, cache objects, output records: 5.8 ms a step for 32 rows vs 3.0 ms here,
    measured side by side), and the prompts of one batch differ a lot in length (126–790 tokens on
    ALFWorld: one "help" text in the history makes a prompt 3x longer), so one left-padded prefill
    spends much of its work on padding.

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

    def _forward(self, ids, pos, mask, rows, start: int) -> torch.Tensor:
        """ids, pos (b, T); mask (b, 1, T, start+T) bool (True = may attend); rows: the cache rows
        (a slice or an index tensor) these b sequences own; their K, V go to columns
        [start, start+T). Returns the last position's logits (b, V)."""
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


# ---------------------------------------------------------------------------------------------
# 5. behaviour-cloning warm start of the tiny policy (cached)
# ---------------------------------------------------------------------------------------------
@dataclass
class BCConfig:
    episodes: int = 400           # noisy expert episodes to collect
    epsilon: float = 0.3          # chance of a random admissible action instead of the expert's
    # Chance of a *slip*: an action that was admissible earlier in the episode but is not now (e.g.
    # `go to` the place the agent already stands at), which the env answers with "Nothing happens.".
    # Why: demos made only of admissible actions never show a failed action in the prompt's
    # history, so a cloned policy that emits one is off its training distribution and tends to
    # repeat it (bench/diagnose.py: ~2/3 of the tiny policy's held-out turns are not admissible,
    # and at T = 0.4 ~40% repeat the previous action). The target after a slip is the expert's
    # next action from the unchanged state: recovery. Measured (README Results, screens): the warm
    # start lands higher on held-out tasks at the same stop; RL from it was not faster in 15 updates.
    slip: float = 0.0
    steps: int = 400              # optimizer steps at most (few on purpose: the policy should start imperfect)
    batch: int = 64
    lr: float = 2e-3
    # Early stop at a target success rate (0 = off: run all `steps`). Why: BC stops in the steep
    # part of its learning curve on purpose, where a different seed moves the result a lot (here
    # 400 steps gave 24-34% held-out success over three seeds, 300 steps 7-20%); stopping at a
    # measured success makes every seed start RL from about the same level. Measured on
    # `check_episodes` training-split tasks that neither the demos nor RL use (never the eval split);
    # 64 episodes is a noisy estimate (±5 points), traded against a warm start of a few minutes.
    target: float = 0.0
    check_from: int = 250         # first check at this step, then every `check_every` steps
    # Why 50, not 25: a check plays 64 episodes, and the failures run all 50 turns (~7 s on 2
    # cores); checking every 25 steps was ~40% of seed 0's 367 s warm start (750 steps). The
    # checks do not change the weights (tested), so a coarser schedule stops at the same step when
    # the first passing check falls on a multiple of 50, else at a later passing one or at `steps`
    # (the noisy estimate bounces: ALFWorld seed 2 passed at 525, then at no multiple of 50 up to
    # 750). Fewer noisy checks are also fewer chances to stop on a lucky estimate.
    check_every: int = 50
    check_episodes: int = 64
    check_temperature: float = 0.4   # the evaluation temperature


def collect_demos(spec, env_kwargs: dict, agent_fmt, bc: BCConfig, seed: int):
    """(prompt ids, target ids) pairs: the expert's next action at every state that an
    ε-noisy expert visits. `agent_fmt(state) -> prompt ids` is the rollout's own prompt builder,
    so the warm start sees exactly the prompts RL will use."""
    from tqdm import tqdm
    from rollout import AgentState
    rng = random.Random(seed)
    env = spec.make(split=spec.splits[0], seed=seed, **env_kwargs)
    eos = agent_fmt.tok.eos_token
    data = []
    for ep in tqdm(range(bc.episodes), desc="warm start: expert demos", leave=False, mininterval=1):
        obs, info = env.reset(10_000_000 + ep)  # far from RL's training task indices
        s = AgentState(None, obs, info, (), 0)
        seen: set[str] = set()            # actions admissible at some earlier step of this episode
        for _ in range(env.max_steps):
            a_star = env.expert_action()
            tgt = agent_fmt.tok(spec.response(a_star) + eos, add_special_tokens=False)["input_ids"]
            data.append((agent_fmt.prompt_ids(s), tgt))
            a = a_star
            slips = []
            if bc.slip > 0:
                adm_now = set(s.info.get("admissible") or [])
                slips = sorted(seen - adm_now)
                seen |= adm_now - {"help", "look", "inventory"}
            if slips and rng.random() < bc.slip:
                a = rng.choice(slips)
            elif rng.random() < bc.epsilon:   # a detour: the env's own notion of one, else an admissible action
                if hasattr(env, "random_action"):
                    a = env.random_action(rng)
                else:
                    adm = [x for x in (s.info.get("admissible") or []) if x not in ("help", "look", "inventory")]
                    a = rng.choice(adm) if adm else a_star
            obs, r, done, info = env.step(a)
            s = AgentState(None, obs, info, s.history + ((s.obs, a),), s.step + 1)
            if done:
                break
    return data


def dist_rank_world() -> tuple[int, int]:
    """(rank, world size) of an initialised torch.distributed group; (0, 1) otherwise."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def bc_train(model, data, bc: BCConfig, pad_id: int, seed: int, check=None) -> list[float]:
    """Cross-entropy on the response tokens only (prompt tokens masked). `check(step) -> bool`
    (the target-success check) runs from `bc.check_from` every `bc.check_every` steps; True stops.

    Data parallel when torch.distributed is initialised (train.py's local workers): every rank
    draws the same batch (same RNG) and takes every world-th row; its loss is its token-sum over
    the *global* token count and gradients are summed over ranks, so each step is the
    single-process step up to float summation order, at 1/world of the compute per rank."""
    from tqdm import tqdm
    from grpo import Row, _all_reduce, all_reduce_grads, collate, token_logprobs
    rank, world = dist_rank_world()
    g = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=bc.lr, weight_decay=0.0)
    model.train()
    losses = []
    bar = tqdm(range(bc.steps), desc="warm start: behaviour cloning", mininterval=1, disable=rank != 0)
    for step in bar:
        batch = [data[g.randrange(len(data))] for _ in range(bc.batch)]
        rows = [Row(p, t, [0.0] * len(t), 0.0) for p, t in batch]
        n_tok = float(sum(len(r.action_ids) for r in rows))               # the global token count
        rows = rows[rank::world]
        ids, attn, mask, _, _ = collate(rows, pad_id)                     # (B/world, T), (B/world, T-1)
        lr = bc.lr * min(1.0, (step + 1) / 20)                            # short warm-up
        for gr in opt.param_groups:
            gr["lr"] = lr
        # cross-entropy on the response tokens only (token mean over the whole batch)
        loss = -(token_logprobs(model, ids, attn, mask) * mask).sum() / n_tok
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            all_reduce_grads(model)
            loss = _all_reduce(loss.detach().clone())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        n = step + 1
        if check is not None and n >= bc.check_from and (n - bc.check_from) % bc.check_every == 0 and n < bc.steps:
            if check(n):
                break
    bar.close()
    return losses


def success_check(spec, env_kwargs: dict, model, tok, bc: BCConfig, seed: int, history_len: int, log, record: list):
    """The warm start's stopping rule: success of the current policy at the evaluation
    temperature on `bc.check_episodes` training-split tasks (indices 20,000,000+: the demos use
    10,000,000+ and RL draws below 1,000,000; finite training splits are spread over instead)."""
    from grpo import _all_reduce
    from rollout import Agent, rollout_groups, spread_tasks
    tasks = spread_tasks(spec.num_tasks(spec.splits[0]), bc.check_episodes, first=20_000_000)
    n = len(tasks)                                # a finite training split may hold fewer tasks
    rank, world = dist_rank_world()
    mine = list(range(rank, n, world))            # data parallel: each rank plays every world-th task
    envs = [spec.make(split=spec.splits[0], seed=seed, **env_kwargs) for _ in mine]
    agent = Agent(HFGenerator(model, tok), tok, spec, compact=True, history_len=history_len)

    def check(step: int) -> bool:
        groups = rollout_groups(agent, envs, [tasks[i] for i in mine], 1, bc.check_temperature, seed=seed + 11,
                                purpose="bc_check", keep_states=False, positions=mine)
        won = _all_reduce(torch.tensor([float(sum(g[0].success for g in groups))]))   # every rank decides alike
        sr = float(won[0]) / n
        record.append({"step": step, "success": sr})
        log(f"warm start: step {step}: success {sr:.3f} on {n} unseen training tasks (target {bc.target:.2f})")
        return sr >= bc.target
    return check


def template_texts(spec) -> list[str]:
    """The fixed words of the env's prompt templates (both styles), rendered with a dummy view."""
    from envs import PromptInput
    v = PromptInput(task="x", obs="y", admissible=["z"], history=[("a", "b")], step=1)
    v0 = PromptInput(task="x", obs="y", admissible=["z"], history=[], step=0)
    return [f(w, 2) for f in (spec.compact_prompt, spec.chat_prompt) for w in (v, v0)]


def env_tokenizer(spec):
    """The tiny policy's tokenizer for an env: its vocabulary, its prompt templates' words and its
    atomic strings (e.g. product ids) kept whole."""
    return build_tokenizer(spec.vocabulary() + template_texts(spec), spec.atomic())


def tiny_policy(spec, env_kwargs: dict, tiny: TinyConfig, bc: BCConfig, seed: int, cache_dir: str,
                history_len: int, log=print):
    """Build (or load from cache) the warm-started tiny policy; returns (model, tok, folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    bc_key = asdict(bc) if bc.target > 0 else {k: v for k, v in asdict(bc).items()
                                                 if k not in ("target", "check_from", "check_every", "check_episodes", "check_temperature")}
    if not bc.slip:          # added later: keys of warm starts without slips stay what they were
        bc_key.pop("slip")
    key = json.dumps({"env": spec.name, "env_kwargs": env_kwargs, "tiny": asdict(tiny), "bc": bc_key,
                      "seed": seed, "history_len": history_len, "v": BC_VERSION,
                      # the env's text: a changed vocabulary (e.g. new product ids) is a new key
                      "vocab": hashlib.sha1("\n".join(spec.vocabulary() + spec.atomic()).encode()).hexdigest()[:12]},
                     sort_keys=True)
    folder = os.path.join(os.path.expanduser(cache_dir), f"tiny-{spec.name}-{hashlib.sha1(key.encode()).hexdigest()[:12]}")
    cached = os.path.exists(os.path.join(folder, "done.json"))
    rank, world = dist_rank_world()
    if world > 1:    # data parallel: build together unless every rank sees the cache
        from grpo import _all_reduce
        cached = bool(_all_reduce(torch.tensor([float(cached)]))[0] == world)
    if cached:
        log(f"tiny policy: cached warm start at {folder}")
        tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
    t0 = time.time()
    log(f"tiny policy: building tokenizer + Qwen3 model and behaviour cloning ({bc.episodes} noisy expert "
        f"episodes, {bc.steps} steps); cached at {folder}")
    tok = env_tokenizer(spec)
    model = build_tiny_model(len(tok), tiny, seed)
    from rollout import Agent
    fmt = Agent(gen=None, tok=tok, spec=spec, compact=True, history_len=history_len)
    data = collect_demos(spec, env_kwargs, fmt, bc, seed)
    unk = sum(t == tok.unk_token_id for p, tg in data for t in p + tg)
    if unk:
        log(f"tiny policy: warning: {unk} <unk> tokens in the demonstrations (vocabulary gap)")
    checks: list[dict] = []
    check = success_check(spec, env_kwargs, model, tok, bc, seed, history_len, log, checks) if bc.target > 0 else None
    losses = bc_train(model, data, bc, tok.pad_token_id, seed, check)
    if rank != 0:            # data-parallel warm start: rank 0 writes the cache, the others load it
        import torch.distributed as dist
        dist.barrier()
        tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
    tmp = f"{folder}.tmp{os.getpid()}"  # private: two processes building the same key do not collide
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "done.json"), "w") as f:
        json.dump({"key": json.loads(key), "demos": len(data), "steps": len(losses), "final_loss": losses[-1],
                   "checks": checks, "seconds": time.time() - t0}, f, indent=1)
    try:
        os.replace(tmp, folder)  # atomic: a half-written cache is never picked up
    except OSError:              # another process finished the same key first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"tiny policy: warm start done in {time.time() - t0:.0f}s ({len(data)} demo steps, {len(losses)} BC steps"
        + (f", stopped at success {checks[-1]['success']:.3f}" if checks and checks[-1]["success"] >= bc.target else "")
        + f", final loss {losses[-1]:.3f}" + (f", {world} workers" if world > 1 else "") + ")")
    if world > 1:
        import torch.distributed as dist
        dist.barrier()
    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
