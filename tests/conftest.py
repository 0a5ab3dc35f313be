"""Shared fixtures. Run the suite: `python -m pytest -q` from the repository root (CPU only)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_alfworld():
    """A small warm-started tiny policy for ALFWorld (built once per session, a few seconds)."""
    import torch
    import envs
    import warmstart
    torch.set_num_threads(1)
    spec = envs.get_spec("alfworld")
    cache = os.path.join(os.environ.get("PYTEST_CACHE_ROOT", "/tmp"), f"prover-test-cache-{os.getpid()}")
    model, tok, folder = warmstart.tiny_policy(
        spec, {"preset": "small", "backend": "builtin"}, warmstart.TinyConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128),
        warmstart.BCConfig(episodes=30, steps=40, batch=32), seed=0, cache_dir=cache, history_len=2, log=lambda *_: None)
    return spec, model, tok, folder
