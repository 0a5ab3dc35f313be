"""Shared fixtures. Run the suite: `python -m pytest -q` from the repository root (CPU only)."""
import os
import subprocess
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
    from infra import warmstart
    torch.set_num_threads(1)
    spec = envs.get_spec("alfworld")
    cache = os.path.join(os.environ.get("PYTEST_CACHE_ROOT", "/tmp"), f"prover-test-cache-{os.getpid()}")
    model, tok, folder = warmstart.tiny_policy(
        spec, {"preset": "small", "backend": "builtin"}, warmstart.TinyConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128),
        warmstart.BCConfig(episodes=30, steps=40, batch=32), seed=0, cache_dir=cache, history_len=2, log=lambda *_: None)
    return spec, model, tok, folder


# The tiny-policy flags of the train.py subprocess tests (test_train, test_reliability, test_fsdp)
TINY = ["--tiny-hidden", "64", "--tiny-layers", "2", "--bc-episodes", "20", "--bc-steps", "30",
        "--group-size", "4", "--tasks-per-iter", "2", "--max-steps", "8", "--eval-episodes", "4",
        "--max-new-tokens", "16", "--strict"]


@pytest.fixture(scope="session")
def train_cache(tmp_path_factory):
    """One --cache-dir for the train.py subprocess tests of the whole session: a warm start is keyed
    by its settings, so each one is built once, by the first test that needs it, as in a user's
    ~/.cache/prover (a test that must see a build uses its own folder)."""
    return tmp_path_factory.mktemp("train-cache")


def train_run(args, cache, timeout=600, **kw):
    """`python train.py ARGS --cache-dir CACHE` as a user runs it; the completed process."""
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args, "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, **kw)
