"""The paper's model family: a tiny random Qwen3.5 (linear attention with the gated delta rule, then
full attention: tests/helpers.py's `tiny_qwen3_5`) saved as an ordinary HF folder trains through
`train.py --model DIR` and the transformers sampler. Its generation with left-padded batches is
tested beside Qwen3's in tests/test_core.py (a row's sample does not depend on its batch-mates).

    python -m pytest -q tests/test_qwen3_5.py

On CPU transformers runs the gated delta rule and the causal conv in their PyTorch fallbacks
(`flash-linear-attention` and `causal-conv1d` are CUDA kernels): correct, slower; at this size a
few seconds an update.
"""
import json
import math

import torch

from conftest import train_run
from helpers import tiny_qwen3_5


def test_train_py_updates_a_tiny_qwen3_5(tmp_path, train_cache):
    import envs
    from infra import warmstart
    from transformers import AutoModelForCausalLM
    tok = warmstart.env_tokenizer(envs.get_spec("alfworld"))          # the tiny policy's ALFWorld tokenizer
    model = tiny_qwen3_5(tok)
    assert model.config.layer_types == ["linear_attention", "full_attention"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    folder, out = tmp_path / "qwen3_5", tmp_path / "run"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    r = train_run(["--model", str(folder), "--env", "alfworld", "--workers", "1", "--threads", "1", "--iters", "1",
                   "--eval-every", "0", "--group-size", "2", "--tasks-per-iter", "2", "--max-steps", "3",
                   "--max-new-tokens", "8", "--strict", "--out", str(out)], train_cache, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sampler transformers" in r.stdout
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [row["step"] for row in rows] == [1]
    row = rows[0]
    assert row["train/steps"] == 1 and row["train/skipped_nonfinite"] == 0 and row["train/tokens_trained"] > 0
    assert math.isfinite(row["loss/pg"]) and math.isfinite(row["train/grad_norm"]) and row["train/grad_norm"] > 0
    after = AutoModelForCausalLM.from_pretrained(out / "checkpoint", dtype=torch.float32).state_dict()
    assert type(AutoModelForCausalLM.from_pretrained(out / "checkpoint")).__name__ == "Qwen3_5ForCausalLM"
    moved = {k for k, v in after.items() if not torch.equal(v, before[k])}
    # the update reached both kinds of layer: the gated delta rule's projections and full attention's
    assert any(k.startswith("model.layers.0.linear_attn.") for k in moved), sorted(moved)
    assert any(k.startswith("model.layers.1.self_attn.") for k in moved), sorted(moved)
