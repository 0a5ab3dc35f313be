"""Generated tokens/s: vLLM (vllm_rollout.rollout_throughput) vs an HF KV-cache loop, same prompts.

    .venv-vllm/bin/python bench/vllm_tokens.py                      # builds a tiny Qwen3 in a tmp dir
    .venv-vllm/bin/python bench/vllm_tokens.py --model-dir DIR --prompts 64 --prompt-len 200 --new 16

Prompts are random ids; every sample gets exactly --new tokens (no stop ids), so both backends do
the same work. The HF side is a plain T=1 sampling loop with `use_cache=True` over one left-padded batch
(a stand-in for policy.HFGenerator, which the lead's bench/throughput.py measures itself). Prints
one JSON line per backend. Deliberately left out: bf16, compiled vLLM, prefix-cache hits.
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra.vllm_rollout import rollout_throughput  # noqa: E402


def build_tiny(path: str, vocab: int = 2000, hidden: int = 128, layers: int = 2) -> str:
    """Tiny random Qwen3 (head_dim 32: vLLM's CPU attention rejects 16) + WordLevel tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    words = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, vocab)}
    tk = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>",
                            unk_token="<unk>", padding_side="left").save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=hidden // 32,
                      num_key_value_heads=max(1, hidden // 64), head_dim=32,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1)
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    return path


@torch.no_grad()
def hf_throughput(model_dir: str, prompts: list[list[int]], new: int, repeats: int = 3) -> dict:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    B, L = len(prompts), max(map(len, prompts))
    ids = torch.zeros((B, L), dtype=torch.long)                        # (B, L) left-padded
    mask = torch.zeros((B, L), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):], mask[b, L - len(p):] = torch.tensor(p), 1

    def run():
        m, pos = mask.clone(), (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=m, position_ids=pos, use_cache=True)
        for _ in range(new - 1):
            logp = out.logits[:, -1].float().log_softmax(-1)           # (B, V) at T = 1
            tok = torch.multinomial(logp.exp(), 1)                     # (B, 1)
            logp.gather(-1, tok)                                       # its log-prob, as vLLM
            m = torch.cat([m, torch.ones((B, 1), dtype=torch.long)], -1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=tok, attention_mask=m, position_ids=pos,
                        past_key_values=out.past_key_values, use_cache=True)
    times = []
    for _ in range(repeats + 1):                                       # first call = warm-up
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    warm = sorted(times[1:])[repeats // 2]
    return {"backend": "hf", "first_call_s": round(times[0], 3), "warm_call_s": round(warm, 4),
            "new_tokens": B * new, "tokens_per_s": round(B * new / warm, 1)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=None, help="HF folder; absent = build a tiny Qwen3")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5, help="warm calls; the median is reported")
    ap.add_argument("--no-hf", action="store_true", help="vLLM only")
    ap.add_argument("--prompts-file", default="", help="JSON list of prompt id lists (e.g. real rollout prompts)")
    ap.add_argument("--json", action="store_true", help="end with one line {vllm: ..., hf: ...} (bench/throughput.py)")
    args = ap.parse_args()
    model_dir = args.model_dir or build_tiny(tempfile.mkdtemp(prefix="tiny_qwen3_"))
    if args.prompts_file:
        prompts = json.load(open(args.prompts_file))
    else:
        vocab = json.load(open(os.path.join(model_dir, "config.json")))["vocab_size"]
        rng = random.Random(0)
        prompts = [[rng.randrange(3, vocab) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
    v = rollout_throughput(model_dir, prompts, args.new, repeats=args.repeats)
    print(json.dumps(v), flush=True)
    h = None
    if not args.no_hf:
        h = hf_throughput(model_dir, prompts, args.new, args.repeats)
        print(json.dumps(h), flush=True)
    if args.json:
        print(json.dumps({"vllm": v, "hf": h}), flush=True)
