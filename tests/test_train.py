"""End-to-end: `train.py` as a user runs it, with tiny settings (subprocesses).

    python -m pytest -q tests/test_train.py

Checks the run-directory contract (config.json, metrics.jsonl, curves.png, segments.md,
checkpoint/), that --resume continues from the saved step, and the bad-input paths: unknown flag
value, missing model path, corrupt checkpoint, Ctrl-C.
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from conftest import TINY, train_run as run  # noqa: E402  (tests/conftest.py)


@pytest.fixture(scope="module")
def cache(train_cache):
    return train_cache


def metrics(out):
    return [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]


@pytest.mark.slow
def test_default_prover_run_writes_contract_and_resumes(tmp_path, cache):
    out = tmp_path / "run"
    r = run(["--env", "alfworld", "--iters", "2", "--eval-every", "1", "--checkpoint-every", "1", "--out", str(out), *TINY], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "using the built-in simulator" in r.stdout + r.stderr      # which ALFWorld backend, said once
    cfg = json.load(open(out / "config.json"))
    assert cfg["method"] == "prover" and cfg["env"] == "alfworld" and "built-in" in cfg["env_backend_resolved"]
    rows = metrics(out)
    assert [r_["step"] for r_ in rows] == [0, 1, 2]
    for k in ("train/success", "eval/success", "tokens/rollout", "tokens/verify", "tokens/judge", "env_steps/total", "time/iter_s"):
        assert k in rows[-1], k
    assert rows[1]["tokens/rollout"] > 0 and rows[1]["env_steps/total"] > 0
    assert rows[1]["train/lr"] == cfg["lr"] == rows[2]["train/lr"]          # constant unless --lr-final < 1
    # turn shares: a well-formed but unlisted action is non-admissible, a malformed one is not
    # (it counts as invalid format); a barely cloned policy makes some of either
    inad, inval = rows[1]["train/inadmissible"], rows[1]["train/invalid_format"]
    assert 0 <= inad <= 1 - inval and inad + inval > 0
    # the 4 eval tasks are spread over valid_seen (ordered by type), not its first 4 (one type)
    assert len([k for k in rows[0] if k.startswith("eval/success/")]) == 4
    assert 0 < rows[0]["time/wall_s"] <= rows[1]["time/wall_s"] <= rows[2]["time/wall_s"]
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "segments.md").exists()
    ck = out / "checkpoint"
    assert {"model.safetensors", "config.json", "trainer.pt", "state.json"} <= set(os.listdir(ck))
    assert json.load(open(ck / "state.json"))["step"] == 2
    # resume: continues at step 3, does not restart (no warm-start eval row, steps 0..3 once each)
    r = run(["--env", "alfworld", "--iters", "3", "--eval-every", "1", "--out", str(out), "--resume", *TINY], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming" in r.stdout + r.stderr and "step 2" in r.stdout + r.stderr
    assert [r_["step"] for r_ in metrics(out)] == [0, 1, 2, 3]
    walls = [r_["time/wall_s"] for r_ in metrics(out)]
    assert walls == sorted(walls) and walls[3] > walls[2]          # run time accumulates over --resume
    assert json.load(open(ck / "state.json"))["step"] == 3
    # without --resume the same --out starts over: no rows of the earlier run survive
    r = run(["--env", "alfworld", "--iters", "1", "--eval-every", "1", "--out", str(out), *TINY], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [r_["step"] for r_ in metrics(out)] == [0, 1]


@pytest.mark.slow
def test_bad_flag_value_one_line_error(tmp_path, cache):
    r = run(["--method", "nope", "--out", str(tmp_path)], cache, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--method" in r.stderr and "nope" in r.stderr
    r = run(["--minibatches", "0", "--out", str(tmp_path)], cache, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--minibatches 0" in r.stderr
    r = run(["--bc-slip", "1.5", "--out", str(tmp_path)], cache, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--bc-slip 1.5" in r.stderr and "[0, 1]" in r.stderr
    r = run(["--lr-final", "2", "--out", str(tmp_path)], cache, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--lr-final 2.0" in r.stderr and "[0, 1]" in r.stderr


def test_lr_final_decays_linearly_by_update():
    """--lr-final: the learning rate is a function of the update number alone (so --resume
    continues the schedule), --lr at update 1, --lr × --lr-final at update --iters."""
    sys.path.insert(0, ROOT)
    import train
    cfg = train.Config(lr=1e-4, lr_final=0.1, iters=11)
    assert [train.lr_at(cfg, s) for s in (1, 6, 11)] == pytest.approx([1e-4, 0.55e-4, 1e-5])
    assert all(train.lr_at(train.Config(lr=1e-4), s) == 1e-4 for s in (1, 100, 200))   # constant by default


def test_help_lists_every_flag(tmp_path, cache):
    """`--help` is the flag reference (the Config field docstrings); a '%' in one of them once
    crashed argparse's formatter."""
    sys.path.insert(0, ROOT)
    import train
    r = run(["--help"], cache, timeout=60)
    assert r.returncode == 0, r.stderr[-300:]
    text = " ".join(r.stdout.split())
    import dataclasses
    for f in dataclasses.fields(train.Config):
        assert "--" + f.name.replace("_", "-") in text
    assert "(0.4 = 40% more;" in text          # the docstring's own '%', printed as written


@pytest.mark.slow
def test_missing_model_path_one_line_error(tmp_path, cache):
    r = run(["--model", str(tmp_path / "no-such-model"), "--iters", "1", "--out", str(tmp_path / "o")], cache, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("train.py: error: --model")
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_corrupt_checkpoint_one_line_error(tmp_path, cache):
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "state.json").write_text("{not json")
    r = run(["--resume", "--iters", "1", "--out", str(out), "--workers", "2", *TINY], cache, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # both workers hit it; rank 0 reports it once, the other's echo is not shown
    assert r.stderr.count("corrupt checkpoint") == 1, r.stderr
    assert "corrupt checkpoint" in r.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_workers_flag_checked(tmp_path, cache):
    r = run(["--workers", "3", "--tasks-per-iter", "2", "--out", str(tmp_path)], cache, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--workers 3" in r.stderr


@pytest.mark.slow
def test_missing_official_alfworld_data_one_line_error(tmp_path):
    env = dict(os.environ, ALFWORLD_DATA=str(tmp_path / "nodata"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--env-backend", "real", "--iters", "1",
                        "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "nodata" in last and "alfworld-download" in last


def _terminal_sigint():
    # A job started in the background (`cmd &`, as CI runners do) inherits SIGINT *ignored*, and
    # Python then never raises KeyboardInterrupt. Restore the default a terminal would give.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tensorboard_scalars(logdir, tag):
    """{step: value} of one scalar, read back from the event files as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(str(logdir))
    ea.Reload()
    return {e.step: e.value for e in ea.Scalars(tag)}


# the 2-worker Ctrl-C also logs to TensorBoard where it is installed (optional); without it, no --log
_TB = "tensorboard" if importlib.util.find_spec("tensorboard") else ""


@pytest.mark.parametrize("sig,workers,log", [(signal.SIGINT, 1, ""), (signal.SIGINT, 2, _TB), (signal.SIGTERM, 2, "")],
                         ids=["ctrl-c", "ctrl-c-2-workers", "sigterm-2-workers"])
@pytest.mark.slow
def test_interrupt_leaves_loadable_checkpoint(tmp_path, cache, sig, workers, log):
    """A Ctrl-C / SIGTERM mid-loop: exit 130, one line from rank 0, a checkpoint --resume loads, and
    (with --log tensorboard) every metrics row written before the stop also in TensorBoard's files."""
    out = tmp_path / "run"
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--method", "grpo", "--iters", "200",
                          "--eval-every", "0", "--checkpoint-every", "1", "--out", str(out), "--cache-dir", str(cache),
                          "--workers", str(workers), *(["--log", log] if log else []), *TINY],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=_terminal_sigint)
    deadline = time.time() + 400
    while time.time() < deadline and not (out / "checkpoint" / "state.json").exists():
        time.sleep(0.5)
    time.sleep(1.0)  # interrupt somewhere in the middle of the next update (or a checkpoint write)
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert err.count("last complete checkpoint") == 1, err[-2000:]      # said once, by rank 0
    assert "Traceback" not in err, err[-3000:]
    if log:
        from infra import rundir
        rows = rundir.read_metrics(str(out / "metrics.jsonl"))
        assert rows, err[-2000:]
        assert _tensorboard_scalars(out / "tensorboard", "train/success") == \
            {r["step"]: pytest.approx(r["train/success"]) for r in rows}
    r = run(["--method", "grpo", "--resume", "--iters", "1", "--eval-every", "0", "--out", str(out), *TINY], cache, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
def test_interrupt_during_warm_start_is_clean(tmp_path):
    """Ctrl-C before the first update (here: in the warm start, two workers) exits 130 with one
    line and no traceback, and leaves no half-written cache entry behind."""
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--iters", "2", "--bc-episodes", "20",
                          "--bc-steps", "2000", "--group-size", "4", "--tasks-per-iter", "2", "--workers", "2",
                          "--cache-dir", str(cache), "--out", str(tmp_path / "run")],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=_terminal_sigint)
    time.sleep(15.0)  # imports, demos, then 2,000 BC steps (minutes): interrupted in the warm start
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted during set-up" in err.strip().splitlines()[-1]
    assert all(os.path.exists(cache / d / "done.json") for d in (os.listdir(cache) if cache.exists() else []))


@pytest.mark.slow
def test_two_workers_equal_single_process(tmp_path, cache):
    """Data parallel on CPU (gloo, the environment torchrun would set): each worker owns whole
    groups and evaluates every other held-out task with seeds fixed by the task's position, and
    gradients are summed; so the warm-start evaluation is identical and the first update equals a
    single-process run on the same groups (up to float summation order)."""
    import torch
    from safetensors.torch import load_file
    args = ["--env", "alfworld", "--iters", "1", "--eval-every", "1", "--minibatches", "2", *TINY]
    single, multi = tmp_path / "single", tmp_path / "multi"
    # each builds its own warm start: the 2-worker one data parallel (half of every BC batch and of
    # the success checks per rank), which must give the single-process weights up to float order
    r = run([*args, "--workers", "1", "--out", str(single)], tmp_path / "cache1")
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([*args, "--workers", "2", "--out", str(multi)], tmp_path / "cache2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "over 2 ranks" in r.stdout + r.stderr and r.stdout.count("done:") == 1
    assert json.load(open(multi / "config.json"))["world_size"] == 2
    ma, mb = metrics(single), metrics(multi)
    assert [m["step"] for m in mb] == [0, 1]                                # one writer
    for k in ("eval/success", "eval/episode_len", "tokens/eval"):
        assert ma[0][k] == mb[0][k], k                                      # the same 4 episodes
    a, b = ma[1], mb[1]
    assert a["train/success"] == b["train/success"] and a["tokens/rollout"] == b["tokens/rollout"]
    assert a["train/inadmissible"] == b["train/inadmissible"] and a["train/invalid_format"] == b["train/invalid_format"]
    # two mini-batches: each rank trains its share of the same turns in each step (rank-invariant split)
    assert a["train/steps"] == b["train/steps"] == 2 and a["train/clipfrac"] == pytest.approx(b["train/clipfrac"])
    assert a["train/rows"] == b["train/rows"] > 0 and a["train/tokens_trained"] == b["train/tokens_trained"]
    warm = [load_file(os.path.join(json.load(open(d / "config.json"))["model_dir"], "model.safetensors")) for d in (single, multi)]
    assert "cache1" in json.load(open(single / "config.json"))["model_dir"] and "cache2" in json.load(open(multi / "config.json"))["model_dir"]
    for k in warm[0]:
        assert torch.allclose(warm[0][k], warm[1][k], atol=1e-5), k
    assert "2 workers" in r.stdout + r.stderr                              # the warm start was built data parallel
    wa, wb = load_file(single / "checkpoint" / "model.safetensors"), load_file(multi / "checkpoint" / "model.safetensors")
    w0 = warm[0]
    assert wa.keys() == wb.keys()
    assert any(not torch.equal(wa[k], w0[k]) for k in wa)                  # the update did move the weights
    # Adam's first steps move each weight by about ±lr whatever the gradient's size, so float-order
    # noise in a near-zero gradient element can flip its step and show up at up to 2·lr per step
    # (seen: one element of 2,048 at 1.2e-5 on one CPU, at 3.8e-5 on another, after 2 steps of lr
    # 1e-4); a missing or wrong gradient sum would move most elements by ~lr. So: no element past
    # that bound, at most 0.1% of all elements past 1e-5, and each tensor's mean difference far below lr.
    lr, steps = json.load(open(single / "config.json"))["lr"], a["train/steps"]
    diffs = {k: (wa[k] - wb[k]).abs() for k in wa}
    assert all(float(d.max()) <= 2 * lr * steps for d in diffs.values())
    assert sum(int((d > 1e-5).sum()) for d in diffs.values()) <= 1e-3 * sum(d.numel() for d in diffs.values())
    for k, d in diffs.items():
        assert float(d.mean()) < 1e-6, k


@pytest.mark.slow
def test_lora_bf16_gradient_checkpointing_run_and_resume(tmp_path, cache):
    """The real-model switches on the tiny policy: LoRA adapters (peft), bf16 autocast and
    gradient checkpointing train end to end, and a LoRA checkpoint resumes."""
    pytest.importorskip("peft")
    out = tmp_path / "run"
    args = ["--method", "grpo", "--iters", "2", "--eval-every", "0", "--checkpoint-every", "1", "--lora-r", "4",
            "--bf16", "--grad-ckpt", "--out", str(out), *TINY]
    r = run(args, cache)
    assert r.returncode == 0, r.stderr[-3000:]
    ck = os.listdir(out / "checkpoint")
    assert "adapter_config.json" in ck and "trainer.pt" in ck
    rows = metrics(out)
    assert rows[-1]["step"] == 2 and rows[-1]["train/skipped_nonfinite"] == 0
    # a LoRA checkpoint holds adapters only: resuming applies them to the recorded base model
    r = run([*args[:2], "--iters", "3", *args[4:], "--resume"], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [m["step"] for m in metrics(out)] == [1, 2, 3]


@pytest.mark.slow
def test_diagnose_bench_reports_failure_modes(tmp_path, cache):
    """bench/diagnose.py on a real (tiny) run: plays held-out episodes with the run's settings and
    writes the failure-mode table; its counts are those of the recorded turns."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from diagnose import failure_modes
    from rollout import Trajectory, Turn
    adm = ["go to desk 1", "open drawer 1"]
    t = lambda i, a: Turn(i, "o", adm, "x", a, True, "o", 0.0, False)
    lost = Trajectory(0, 0, 0, "t", "x", [t(0, "go to sofa 1"), t(1, "go to sofa 1"), t(2, "go to desk 1")], False, 0.0)
    won = Trajectory(0, 1, 0, "t", "x", [t(0, "open drawer 1")], True, 1.0)
    m = failure_modes([[lost], [won]], max_steps=3)
    assert (m["success"], m["out_of_steps"], m["non_admissible"], m["repeats"]) == (0.5, 0.5, 0.5, 0.25)
    assert m["non_admissible_verbs"] == {"go": 2}
    out = tmp_path / "run"
    r = run(["--env", "alfworld", "--method", "grpo", "--iters", "1", "--eval-every", "0", "--workers", "1",
             "--out", str(out), *TINY], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    d = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "diagnose.py"), str(out), "--episodes", "4",
                        "--temperatures", "0.4", "--out-dir", str(tmp_path / "res")], capture_output=True, text=True, timeout=300)
    assert d.returncode == 0, d.stderr[-3000:]
    res = json.load(open(tmp_path / "res" / "diagnose_run.json"))
    m = res["by_temperature"]["0.4"]
    assert m["episodes"] == 4 and 0 <= m["non_admissible"] <= 1 and m["episode_len"] <= 8
    assert "non-admissible turns" in (tmp_path / "res" / "diagnose_run.md").read_text()
    # bench/learning.py --recheck on the same run: warm start and checkpoint, one diagnose per
    # sampling seed; seed 0 of the checkpoint is the evaluation just made
    import learning
    r = learning.recheck({"dir": str(out), "points": []}, n=2, episodes=4, jobs=1)
    assert (r["step"], r["episodes"], len(r["warm_runs"]), len(r["final_runs"])) == (1, 4, 2, 2)
    assert r["final_runs"][0] == m["success"] and r["gain"] == pytest.approx(r["final"] - r["warm"])
    warm_dir = json.load(open(out / "config.json"))["model_dir"]
    assert r["warm_runs"][0] == learning._diagnosed(str(out), warm_dir, 4, 0.4, 0)[0]
    assert 0 < r["gain_se"] < 0.5
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "diagnose.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no config.json" in bad.stderr


@pytest.mark.slow
def test_warmstart_bench_times_one_and_two_workers(tmp_path):
    """bench/warmstart_speed.py builds the warm start from an empty cache with 1 and with 2 workers
    (train.py --iters 0) and reports both; data parallel, the same steps reach the same loss."""
    out = tmp_path / "ws.json"
    extra = "--tiny-hidden 32 --bc-episodes 10 --bc-steps 12 --bc-target 0 --max-steps 8"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "warmstart_speed.py"), "--workers", "1,2",
                        "--extra", extra, "--out", str(out)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    runs = json.load(open(out))["runs"]
    assert [x["workers"] for x in runs] == [1, 2] and all(x["warm_start_s"] > 0 for x in runs)
    assert runs[0]["bc_steps"] == runs[1]["bc_steps"] == 12 and runs[0]["demo_steps"] == runs[1]["demo_steps"]
    assert runs[1]["final_loss"] == pytest.approx(runs[0]["final_loss"], rel=1e-3)
    assert "| 2 |" in r.stdout
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "warmstart_speed.py"), "--workers", "one"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--workers 'one'" in bad.stderr


def test_learning_bench_summary_names_nondefault_flags(tmp_path):
    """bench/learning.py --dirs: the warm-start, best, last and last-within-N-minutes evaluations
    of each run, and the title says which flags differ from the benchmark's defaults."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import learning
    assert learning.nondefault_flags({"env": "alfworld", "seed": 3, "out": "x", "tiny_hidden": 128, "lr": 1e-4}) == "--tiny-hidden 128"
    assert learning.nondefault_flags({"env": "webshop", "history_len": 0, "reward": "score"}) == ""   # its own defaults
    dirs = []
    for seed, evals in ((0, [(0, 0.25, 60), (10, 0.5, 900), (20, 0.75, 2000)]), (1, [(0, 0.2, 50), (10, 0.1, 1700)])):
        d = tmp_path / f"s{seed}"
        d.mkdir()
        json.dump({"env": "alfworld", "seed": seed, "tiny_hidden": 128}, open(d / "config.json", "w"))
        with open(d / "metrics.jsonl", "w") as f:
            for step, sr, wall in evals:
                f.write(json.dumps({"step": step, "eval/success": sr, "eval/score": sr, "time/wall_s": wall}) + "\n")
        dirs.append(str(d))
    s = learning.summarise([learning.curve(d) for d in dirs], minutes=30)
    a, b = s["runs"]
    assert (a["warm"], a["best"], a["best_step"], a["last"]) == (0.25, 0.75, 20, 0.75)
    assert (a["within"], a["within_step"], a["gain_within"]) == (0.5, 10, 0.25)      # 2000 s is past 30 min
    assert (b["best"], b["gain_last"]) == (0.1, pytest.approx(-0.1))
    md = open(learning.write("alfworld", s, str(tmp_path / "out"))).read()
    assert md.startswith("# Held-out success (score) of `train.py --env alfworld --tiny-hidden 128` (not the default)")
    assert (tmp_path / "out" / "learning_alfworld.png").stat().st_size > 1000


@pytest.mark.slow
def test_compare_bench_builds_one_warm_start_then_runs_side_by_side(tmp_path):
    """bench/compare.py: the shared warm start is built once (runs/<env>-warmstart, --iters 0) and
    pinned beside the results (<out>/warmstarts/, to be committed), every method's run then loads
    it from there and its summary records the weights' hash, and the table names each method; a
    re-run skips the finished runs."""
    import hashlib
    out = tmp_path / "res"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--envs", "alfworld", "--methods", "grpo",
           "prover", "--seeds", "0", "--iters", "1", "--eval-every", "1", "--eval-episodes", "4", "--out", str(out),
           "--", *TINY, "--bc-target", "0"]
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "alfworld warm start ready" in r.stdout
    assert "behaviour cloning" in (out / "runs" / "alfworld-warmstart" / "stdout.log").read_text()
    for m in ("grpo", "prover"):
        log = (out / "runs" / f"alfworld-{m}-s0" / "stdout.log").read_text()
        assert "cached warm start" in log and "behaviour cloning" not in log
        assert metrics(out / "runs" / f"alfworld-{m}-s0")[-1]["step"] == 1
    (pinned,) = (out / "warmstarts").glob("tiny-alfworld-*/model.safetensors")
    sha = hashlib.sha1(pinned.read_bytes()).hexdigest()[:12]
    for m in ("grpo", "prover"):
        assert json.load(open(out / "summaries" / "compare" / f"alfworld-{m}-s0.json"))["summary"]["warm_start"] == sha
    table = (out / "compare.md").read_text()
    assert "| grpo |" in table and "| prover |" in table
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0 and again.stdout.count("warm start ready") == 0
    assert (again.stdout + again.stderr).count("skipped (done)") == 2


@pytest.mark.slow
def test_gpu_step_bench_runs_our_update_on_cpu(tmp_path):
    """bench/gpu_step.py (made for a GPU) in its CPU smoke form: every variant takes a finite
    step through grpo.update, the FLOP count is positive, and the saved folder loads as a policy."""
    out = tmp_path / "g.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_step.py"), "--device", "cpu", "--hidden", "64",
                        "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
                        "--vocab", "700", "--rows", "4", "--prompt", "24", "--action", "6", "--steps", "1",
                        "--gen-rows", "3", "--gen-new", "5", "--out", str(out), "--save-model", str(tmp_path / "m")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.load(open(out))
    assert [u["variant"] for u in res["update"]] == ["full", "full+ckpt", "lora16"]
    assert all(u["finite"] and u["grad_norm"] > 0 and u["tflops"] > 0 for u in res["update"])
    full, lora = res["update"][0], res["update"][2]
    assert full["trainable"] == full["params"] and lora["trainable"] < full["params"] / 3   # LoRA: adapters only
    assert res["generate"]["new_tokens"] == 3 * 5
    sys.path.insert(0, ROOT)
    from infra import policy
    model, tok = policy.load_hf(str(tmp_path / "m"))
    assert model.config.vocab_size == len(tok) and model.config.num_hidden_layers == 2


@pytest.mark.slow
def test_keydoor_from_the_command_line(tmp_path, cache):
    """The credit lab as a user runs it: --env-opt reaches the env, --max-steps works with it,
    lab/* metrics are logged; a bad --env-opt is one line, exit 2, before anything is built."""
    out = tmp_path / "kd"
    r = run(["--env", "keydoor", "--env-opt", "rooms=3", "--env-opt", "p_key=0.9", "--max-steps", "12",
             "--iters", "1", "--eval-every", "1", "--workers", "1", "--bc-episodes", "20", "--bc-steps", "30",
             "--group-size", "4", "--tasks-per-iter", "2", "--eval-episodes", "0", "--strict", "--out", str(out)], cache)
    assert r.returncode == 0, r.stderr[-3000:]
    # not a terminal: no progress-bar redraws, one plain line per evaluation / update
    assert "updates:" not in r.stderr + r.stdout and "behaviour cloning:" not in r.stderr + r.stdout
    assert [ln.split("|")[0].strip() for ln in r.stdout.splitlines() if ln.startswith("step ")] == ["step 0", "step 1"], r.stdout
    cfg = json.load(open(out / "config.json"))
    assert cfg["env_kwargs"] == {"rooms": 3, "p_key": 0.9, "max_steps": 12}
    row = metrics(out)[-1]
    assert 0.0 < row["lab/q_key"] < 1.0 and row["train/episode_len"] <= 12
    assert row["eval/episodes"] == 128                    # --eval-episodes 0: the whole test split
    # bench/diagnose.py --episodes 0 plays the whole split too; on a generated (unbounded) split it
    # says so in one line instead of playing forever
    diag = [sys.executable, os.path.join(ROOT, "bench", "diagnose.py")]
    d = subprocess.run([*diag, str(out), "--episodes", "0", "--temperatures", "0.4", "--out-dir", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=300)
    assert d.returncode == 0, d.stderr[-3000:]
    assert json.load(open(tmp_path / "res" / "diagnose_kd.json"))["by_temperature"]["0.4"]["episodes"] == 128
    (tmp_path / "gen").mkdir()
    gen = {**cfg, "eval_split": "train", "eval_episodes": 4}        # a run that evaluated on training tasks
    json.dump(gen, open(tmp_path / "gen" / "config.json", "w"))
    d = subprocess.run([*diag, str(tmp_path / "gen"), "--model", str(out / "checkpoint"), "--episodes", "0"],
                       capture_output=True, text=True, timeout=120)
    assert d.returncode == 1 and "split 'train' is generated" in d.stderr and len(d.stderr.strip().splitlines()) == 1, d.stderr
    # a hand-edited config that train.py would have refused (the whole of a generated split) is one
    # line naming the file, not a traceback from the env set-up
    json.dump({**gen, "eval_episodes": 0}, open(tmp_path / "gen" / "config.json", "w"))
    d = subprocess.run([*diag, str(tmp_path / "gen"), "--model", str(out / "checkpoint"), "--episodes", "4"],
                       capture_output=True, text=True, timeout=120)
    assert d.returncode == 1 and "config.json: --eval-episodes 0" in d.stderr and len(d.stderr.strip().splitlines()) == 1, d.stderr
    for bad, word in ((["rooms=abc"], "rooms"), (["p_key=1.5"], "p_key"), (["doors=2"], "doors"), (["pivot=5", "rooms=4"], "pivot")):
        t0 = time.time()
        r = run(["--env", "keydoor", *[a for b in bad for a in ("--env-opt", b)], "--out", str(tmp_path / "bad")], cache, timeout=60)
        assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert time.time() - t0 < 30


@pytest.mark.parametrize("flags, word", [
    (["--iters", "-1"], "--iters"), (["--group-size", "1"], "--group-size"), (["--verify-k", "0"], "--verify-k"),
    (["--model", os.path.join(ROOT, "README.md")], "is a file"), (["--model", "EMPTY_DIR"], "no config.json"),
])
@pytest.mark.slow
def test_bad_config_is_one_line_before_anything_is_built(flags, word, tmp_path, cache):
    """Every rule is checked before the warm start (no minutes of set-up, no run files)."""
    flags = [str(tmp_path) if f == "EMPTY_DIR" else f for f in flags]
    t0 = time.time()
    r = run([*flags, "--out", str(tmp_path / "run")], cache, timeout=60)
    assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert time.time() - t0 < 30 and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_console_says_when_the_judge_endpoint_is_down(tmp_path, cache):
    """An OpenAI judge whose endpoint drops every connection (a real listener on 127.0.0.1 that
    accepts and closes): every eligible group is dropped, the console says so each update with the
    count and the reason, and the endpoint is asked for one proposal per update only (its 1 + 3
    retried attempts), not once per eligible group."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port, hits = srv.getsockname()[1], []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            hits.append(1)
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    try:
        r = run(["--env", "keydoor", "--env-opt", "rooms=3", "--iters", "2", "--eval-every", "0", "--workers", "1",
                 "--bc-episodes", "40", "--bc-steps", "60",           # a small warm start: built in seconds
                 "--judge", "openai", "--judge-url", f"http://127.0.0.1:{port}/v1",
                 "--judge-model", "x", "--judge-timeout", "2", "--strict", "--out", str(tmp_path / "run")], cache)
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr[-3000:]
    rows = metrics(tmp_path / "run")
    dropped = sum(v for row in rows for k, v in row.items() if k.startswith("prover/dropped/connection error"))
    eligible = sum(row.get("prover/eligible", 0) for row in rows)
    updates = sum(1 for row in rows if row.get("prover/eligible", 0) > 0)
    assert dropped == eligible > updates, rows      # several groups per update, all dropped
    assert len(hits) == 4 * updates, (len(hits), updates)
    assert dropped > 0 and "judge failing:" in r.stdout + r.stderr and "connection error" in r.stdout + r.stderr
