"""`--fsdp` (FSDP2 sharding, dist.shard) on CPU with gloo: real tiny Qwen3 policies, real train.py runs.

    python -m pytest -q tests/test_fsdp.py

* a 2-rank --fsdp update equals the single-process update on the same groups (weights, grad norm,
  Adam state), with the sharded KL reference in play (--kl-coef, 2 mini-batches);
* a checkpoint saved on 2 ranks resumes on 1 and on 2 ranks to the same next update (DCP
  resharding), and unsharded into a plain model;
* a process killed mid-save (in the sharded write; in the swap) leaves the previous checkpoint
  loadable;
* a plain (non-FSDP) optimizer state resumes into a sharded optimizer;
* --bf16 --grad-ckpt under --fsdp train; --fsdp --lora-r is one clear error;
* bench/fsdp_step.py --cpu-smoke (the GPU bench's code path, tiny).

The multi-rank function-level checks run this file as a script (`python tests/test_fsdp.py MODE
OUT`) in 2 processes with the variables torchrun would set.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from conftest import TINY, train_run as run  # noqa: E402  (tests/conftest.py)

# one update, two mini-batches (the second is off-policy: the sharded KL reference differs from
# the policy there, so --kl-coef is exercised), evaluation before and after
ARGS = ["--env", "alfworld", "--eval-every", "1", "--minibatches", "2", "--kl-coef", "0.05", *TINY]


def metrics(out):
    return [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]


def weights(out):
    from safetensors.torch import load_file
    return load_file(os.path.join(out, "checkpoint", "model.safetensors"))


def assert_close_update(wa, wb):
    """As tests/test_train.py's DDP check: Adam's first steps move each weight by about ±lr, so
    float-order noise in a near-zero gradient element can show at ~1e-5; a wrong reduction (a
    mean instead of a sum, a missing shard) would move most elements by ~lr (1e-4)."""
    import torch
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=3e-5), k
        assert (wa[k] - wb[k]).abs().mean() < 1e-6, k


# ---------------------------------------------------------------------------------------------
# train.py runs
# ---------------------------------------------------------------------------------------------
import pytest  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory, train_cache):
    """A single-process run and a 2-rank --fsdp run of one update from the same warm start (the
    shared cache: the second loads what the first built)."""
    base = tmp_path_factory.mktemp("fsdp")
    cache = train_cache
    single, sharded = base / "single", base / "fsdp2"
    r = run([*ARGS, "--iters", "1", "--workers", "1", "--out", str(single)], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([*ARGS, "--iters", "1", "--workers", "2", "--fsdp", "--out", str(sharded)], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "over 2 ranks" in r.stdout + r.stderr
    return base, cache, single, sharded


@pytest.mark.slow
def test_two_rank_fsdp_update_equals_single_process(runs):
    import torch
    base, cache, single, sharded = runs
    cfg = json.load(open(sharded / "config.json"))
    assert cfg["fsdp"] is True and cfg["world_size"] == 2
    ck = sharded / "checkpoint"
    assert (ck / "dcp" / ".metadata").exists() and {"model.safetensors", "config.json", "trainer.pt"} <= set(os.listdir(ck))
    ma, mb = metrics(single), metrics(sharded)
    assert [m["step"] for m in mb] == [0, 1]
    for k in ("eval/success", "eval/episode_len", "tokens/eval"):
        assert ma[0][k] == mb[0][k], k                            # the sampler copy = the policy
    a, b = ma[1], mb[1]
    for k in ("train/success", "tokens/rollout", "train/rows", "train/tokens_trained", "train/steps"):
        assert a[k] == b[k], k                                    # the same groups, trained alike
    assert a["train/steps"] == 2 and a["train/rows"] > 0
    # the full gradient's norm (clip_grad_norm_ over DTensor shards), not one shard's
    assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-4)
    assert b["train/kl"] == pytest.approx(a["train/kl"], rel=1e-3, abs=1e-9)
    assert b["train/clipfrac"] == pytest.approx(a["train/clipfrac"])
    warm = json.load(open(single / "config.json"))["model_dir"]
    from safetensors.torch import load_file
    w0, wa, wb = load_file(os.path.join(warm, "model.safetensors")), weights(single), weights(sharded)
    assert any(not torch.equal(wa[k], w0[k]) for k in wa)        # the update moved the weights
    assert_close_update(wa, wb)                                   # the HF export: full weights
    # the HF export loads as a plain transformers model, elsewhere
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(ck), dtype=torch.float32)
    assert torch.equal(m.model.embed_tokens.weight, wb["model.embed_tokens.weight"])
    # the sharded checkpoint unsharded into a plain model and AdamW (no process group): weights as
    # exported, Adam moments as the single process's after the same update (a lost or zeroed
    # optimizer state would not be caught by comparing two resumes with each other)
    from infra import rundir
    model, tok, st, step, _ = rundir.load_checkpoint(str(sharded))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.0)
    rundir.restore_optimizer(model, opt, st)
    assert step == 1 and st["optimizer"] is None and st["sharded"] == "dcp"
    plain = torch.load(single / "checkpoint" / "trainer.pt", weights_only=False)["optimizer"]
    mine = opt.state_dict()
    assert plain["state"].keys() == mine["state"].keys()
    for i, s in plain["state"].items():
        assert float(mine["state"][i]["step"]) == float(s["step"]) == 2.0        # two mini-batch steps
        assert torch.allclose(mine["state"][i]["exp_avg"], s["exp_avg"], atol=1e-6, rtol=1e-3)
        assert torch.allclose(mine["state"][i]["exp_avg_sq"], s["exp_avg_sq"], atol=1e-9, rtol=1e-3)
    for k, v in model.state_dict().items():
        if k in wb:
            assert torch.equal(v, wb[k]), k


@pytest.mark.slow
def test_fsdp_checkpoint_resumes_on_one_and_two_ranks(runs):
    """Saved by 2 ranks; resumed on 1 and on 2 (DCP reshards the weights and Adam state): the
    next update is the same."""
    base, cache, single, sharded = runs
    outs = {}
    for n in (1, 2):
        d = base / f"resume{n}"
        shutil.copytree(sharded, d)
        r = run([*ARGS, "--iters", "2", "--workers", str(n), "--fsdp", "--resume", "--out", str(d)], cache)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "resuming" in r.stdout + r.stderr
        outs[n] = d
    m1, m2 = metrics(outs[1]), metrics(outs[2])
    assert [m["step"] for m in m1] == [m["step"] for m in m2] == [0, 1, 2]
    for k in ("train/success", "tokens/rollout", "train/rows", "train/tokens_trained"):
        assert m1[2][k] == m2[2][k], k
    assert m1[2]["train/grad_norm"] == pytest.approx(m2[2]["train/grad_norm"], rel=1e-4)
    w1, w2 = weights(outs[1]), weights(outs[2])
    import torch
    assert any(not torch.equal(w1[k], weights(sharded)[k]) for k in w1)    # update 2 happened
    assert_close_update(w1, w2)


@pytest.mark.slow
def test_fsdp_bf16_grad_ckpt_two_workers(tmp_path, runs):
    """Mixed precision (MixedPrecisionPolicy bf16) and non-reentrant gradient checkpointing under
    FSDP train end to end: finite steps that move the weights."""
    base, cache, single, sharded = runs
    out = tmp_path / "bf16"
    r = run(["--env", "alfworld", "--method", "grpo", "--iters", "1", "--eval-every", "0", "--workers", "2", "--fsdp",
             "--bf16", "--grad-ckpt", "--kl-coef", "0.05", "--out", str(out), *TINY], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    row = metrics(out)[-1]
    assert row["step"] == 1 and row["train/skipped_nonfinite"] == 0 and row["train/steps"] == 1
    assert row["train/grad_norm"] > 0


@pytest.mark.slow
def test_fsdp_with_lora_is_one_clear_error(tmp_path):
    r = run(["--fsdp", "--lora-r", "4", "--out", str(tmp_path)], tmp_path / "cache", timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "--fsdp with --lora-r 4" in r.stderr


@pytest.mark.slow
def test_fsdp_step_bench_cpu_smoke(tmp_path):
    out = tmp_path / "fsdp_step.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fsdp_step.py"), "--cpu-smoke", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.load(open(out))
    assert res["cpu_smoke"] and res["world"] == 1
    assert [u["variant"] for u in res["update"]] == ["full", "full+ckpt"]
    assert all(u["finite"] and u["grad_norm"] > 0 and u["step_s"] > 0 and u["peak_gib"] > 0 for u in res["update"])
    assert res["update"][0]["sync_s"] >= 0 and res["update"][0]["sampler_copy_gib"] >= 0


# ---------------------------------------------------------------------------------------------
# function-level, 2 ranks (this file as a worker script)
# ---------------------------------------------------------------------------------------------
def _tiny(seed=0):
    import envs
    from infra import warmstart
    tok = warmstart.env_tokenizer(envs.get_spec("alfworld"))
    cfg = warmstart.TinyConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128)
    return warmstart.build_tiny_model(len(tok), cfg, seed), tok


def _rows(vocab, rank, n=4):
    import torch
    import grpo
    g = torch.Generator().manual_seed(100 + rank)
    ids = torch.randint(3, vocab, (n, 14), generator=g)
    return [grpo.Row(r[:10].tolist(), r[10:].tolist(), [-3.0] * 4, 1.0 if i % 2 else -1.0) for i, r in enumerate(ids)]


def _worker(mode: str, out: str) -> None:
    import random
    from collections import Counter

    import torch
    from infra import dist
    import grpo
    from infra import rundir
    torch.set_num_threads(1)
    rank, world = dist.init(False, fsdp=True)
    model, tok = _tiny()
    if mode == "convert":
        # a plain optimizer state (as a checkpoint without --fsdp holds it) into a sharded optimizer
        plain_opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        grpo.update(model, plain_opt, _rows(len(tok), 0), grpo.UpdateCfg(), tok.pad_token_id)  # same rows on both
        plain = plain_opt.state_dict()
        dist.shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        rundir.restore_optimizer(model, opt, {"optimizer": plain})
        mine = opt.state_dict()["state"]
        for i, s in plain["state"].items():
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(mine[i][k].full_tensor(), s[k]), (i, k)
            assert float(mine[i]["step"]) == float(s["step"])
        grpo.update(model, opt, _rows(len(tok), rank), grpo.UpdateCfg(), tok.pad_token_id)   # and it steps on
        if rank == 0:
            open(os.path.join(out, "ok"), "w").write("ok")
        return
    dist.shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rng = {"py": random.Random(0).getstate(), "torch": torch.get_rng_state()}
    grpo.update(model, opt, _rows(len(tok), rank), grpo.UpdateCfg(), tok.pad_token_id)
    rundir.save_checkpoint(out, model, tok, opt, 1, Counter(a=1), rng)      # the one to survive
    expected = dist.full_state_dict(model)                                  # collective
    if rank == 0:
        torch.save({k: v.clone() for k, v in expected.items()}, os.path.join(out, "expected.pt"))
    grpo.update(model, opt, _rows(len(tok), rank), grpo.UpdateCfg(), tok.pad_token_id)
    if mode == "kill-in-dcp" and rank == 1:
        # killed while writing its shard: a partial file, then SIGKILL (no handler, no cleanup)
        from torch.distributed.checkpoint.filesystem import FileSystemWriter

        def die(self, *a, **k):
            with open(os.path.join(out, "checkpoint.tmp", "dcp", "__1_0.distcp"), "wb") as f:
                f.write(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
        FileSystemWriter.write_data = die
    if mode == "kill-in-swap" and rank == 0:
        # killed between the swap's two renames: `checkpoint` already moved to `checkpoint.old`
        real = os.replace

        def replace(src, dst):
            if src.endswith("checkpoint.tmp"):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, dst)
        os.replace = replace
    rundir.save_checkpoint(out, model, tok, opt, 2, Counter(a=2), rng)


def _launch(mode: str, out, victim: int | None):
    """2 worker processes of `mode`; returns their return codes. With a victim, the survivor is
    stopped a few seconds after the victim's death (what the launcher does)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, str(out)], cwd=ROOT,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    deadline = time.time() + 240
    if victim is not None:
        while procs[victim].poll() is None and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(3.0)
        for p in procs:
            if p.poll() is None:
                p.kill()
    errs = [p.communicate(timeout=max(1, deadline - time.time()))[1] for p in procs]
    return [p.returncode for p in procs], errs


@pytest.mark.slow
@pytest.mark.parametrize("mode,victim", [("kill-in-dcp", 1), ("kill-in-swap", 0)])
def test_kill_mid_save_leaves_previous_checkpoint_loadable(tmp_path, mode, victim):
    import torch
    from infra import rundir
    codes, errs = _launch(mode, tmp_path, victim)
    assert codes[victim] == -signal.SIGKILL, errs[victim][-3000:]
    assert rundir.checkpoint_step(str(tmp_path)) == 1
    if mode == "kill-in-dcp":
        assert (tmp_path / "checkpoint.tmp").exists() and (tmp_path / "checkpoint").exists()
    else:
        assert not (tmp_path / "checkpoint").exists() and (tmp_path / "checkpoint.old").exists()
    model, tok, st, step, counter = rundir.load_checkpoint(str(tmp_path))
    assert step == 1 and counter["a"] == 1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rundir.restore_optimizer(model, opt, st)                  # the sharded part, unsharded here
    expected = torch.load(tmp_path / "expected.pt")
    sd = model.state_dict()
    for k, v in expected.items():
        assert torch.equal(sd[k], v), k
    assert all(float(s["step"]) == 1.0 for s in opt.state_dict()["state"].values())


@pytest.mark.slow
def test_plain_optimizer_state_resumes_sharded(tmp_path):
    codes, errs = _launch("convert", tmp_path, None)
    assert codes == [0, 0], errs[0][-3000:] + errs[1][-3000:]
    assert (tmp_path / "ok").exists()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
