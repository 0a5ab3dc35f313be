"""Process and checkpoint reliability: what happens when a run is killed, or started twice.

    python -m pytest -q tests/test_reliability.py

Real tiny runs of `train.py` (subprocesses, the same tiny flags as tests/test_train.py), killed the
way users and machines kill them: SIGKILL of the launcher, SIGKILL of one worker, SIGKILL of the
whole run at random moments; and a second run on a directory in use. Every process started here
has a deadline and is killed (by pid, with its workers) in a `finally`.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from conftest import TINY, train_run  # noqa: E402  (tests/conftest.py)
import config  # noqa: E402

ENV = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
# a long run (it is killed long before its end) that checkpoints at the default interval (auto:
# every update for the tiny policy), no evaluations unless a test adds them
LONG = ["--method", "grpo", "--iters", "200", "--eval-every", "0", *TINY]


def run(args, cache, timeout=300):
    return train_run(args, cache, timeout)


def start(args, cache, log):
    """train.py in the background, output to the file `log` (a pipe nobody reads would fill up and
    stall the run), in its own session so that no signal of ours reaches pytest."""
    f = open(log, "w")
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args, "--cache-dir", str(cache)],
                            cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)


def children(pid):
    """Pids of a process's children (Linux /proc), [] once it is gone."""
    kids = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return kids


def alive(pid):
    """Running (a zombie waiting for a reaper counts as gone: it can no longer write anything)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def kill_all(p, extra=()):
    """SIGKILL a started run and its workers (they sit in sessions of their own), by pid."""
    for pid in [*children(p.pid), *extra, p.pid]:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def wait_for(cond, p, timeout, log):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out; log:\n{open(log).read()[-2000:]}"
        assert p.poll() is None, f"the run ended (exit {p.returncode}) early; log:\n{open(log).read()[-2000:]}"
        time.sleep(0.2)


def steps(out):
    """Every metrics line parsed (a torn line fails here, unlike rundir.read_metrics which skips it)."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f]


@pytest.fixture(scope="module")
def cache(train_cache):
    return train_cache          # the session's: the warm start is built once, by the first test needing it


# ---------------------------------------------------------------------------------------------
# 1. + 3. SIGKILL of the launcher: its workers stop too; the stale lock is taken over
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_launcher_takes_its_workers_down_and_its_stale_lock_is_taken_over(tmp_path, cache):
    from infra import rundir
    out, log = tmp_path / "run", tmp_path / "log"
    p = start([*LONG, "--workers", "2", "--out", str(out)], cache, log)
    kids = []
    try:
        wait_for(lambda: rundir.checkpoint_step(str(out)) is not None, p, 300, log)
        kids = children(p.pid)
        assert len(kids) == 2
        assert (out / ".lock").read_text().split() == [str(p.pid)]          # the launcher's pid
        os.kill(p.pid, signal.SIGKILL)              # nothing can be passed on by the launcher itself
        p.wait(timeout=10)
        deadline = time.time() + 30                 # before the fix: both trained on to update 200
        while any(alive(k) for k in kids) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(alive(k) for k in kids), "workers outlived their launcher"
    finally:
        kill_all(p, kids)
    # the dead launcher's lock file is still there; the kernel dropped its lock with the last worker
    assert (out / ".lock").read_text().split() == [str(p.pid)]
    s = rundir.checkpoint_step(str(out))
    r = run(["--method", "grpo", "--iters", str(s + 1), "--eval-every", "0", "--resume", "--out", str(out),
             "--workers", "1", *TINY], cache)
    assert r.returncode == 0, r.stderr[-2000:]
    assert steps(out) == list(range(1, s + 2))
    assert not (out / ".lock").exists()             # released at exit


# ---------------------------------------------------------------------------------------------
# 2. + 3. SIGKILL of one worker: one line, the rest stopped; a second run on the busy directory refuses
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_worker_is_reported_and_a_busy_directory_refuses(tmp_path, cache, capsys):
    from infra import rundir
    import train
    out, log = tmp_path / "run", tmp_path / "log"
    p = start([*LONG, "--workers", "2", "--out", str(out)], cache, log)
    kids = []
    try:
        wait_for(lambda: rundir.checkpoint_step(str(out)) is not None, p, 300, log)
        kids = children(p.pid)
        assert len(kids) == 2
        # a --resume beside the live run, as a user would start it: refused in one line, nothing written
        before = (out / "metrics.jsonl").read_text()
        r = run(["--method", "grpo", "--resume", "--out", str(out), *TINY], cache, timeout=120)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr[-2000:]
        assert "in use by another run" in r.stderr and f"pid {p.pid}" in r.stderr
        assert (out / "metrics.jsonl").read_text().startswith(before)       # only the live run's rows added
        # a fresh run on it too (in this process: the refusal comes before anything is built)
        with pytest.raises(SystemExit) as e:
            train.main(["--out", str(out), *TINY])
        assert e.value.code == 2 and "in use by another run" in capsys.readouterr().err
        os.kill(kids[1], signal.SIGKILL)            # before the fix: exit 247 and no word why
        p.wait(timeout=90)
    finally:
        kill_all(p, kids)
    text = log.read_text()
    assert p.returncode == 128 + signal.SIGKILL, text[-2000:]
    assert text.count("train.py: worker 1 died (signal 9, SIGKILL); stopping the run") == 1, text[-2000:]
    assert "Traceback" not in text, text[-3000:]    # rank 0's broken collective is not shown as the cause
    assert not any(alive(k) for k in kids)
    assert not (out / ".lock").exists()
    assert "console 'tok R+Vv+Jj': generated tokens of rollouts + verification + judge" in text   # 6. the header


def test_lock_is_exclusive_inherited_by_workers_and_released(tmp_path):
    """rundir.lock_run's contract without a training run: a second taker (another process) is
    refused with the owner's pid; a descriptor kept open in a child (the launcher's workers) keeps
    the lock after the owner dropped its own; a stale file (its owner gone) is taken over."""
    from infra import rundir
    take = [sys.executable, "-c", "import sys; from infra import rundir; rundir.lock_run(sys.argv[1])", str(tmp_path)]
    fd = rundir.lock_run(str(tmp_path))
    r = subprocess.run(take, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and f"in use by another run (pid {os.getpid()}" in r.stderr
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(fd,))
    try:
        os.close(fd)                                # the owner is gone, its worker is not
        r = subprocess.run(take, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "in use by another run" in r.stderr
    finally:
        child.kill()
        child.wait(timeout=30)
    assert (tmp_path / ".lock").exists()            # left behind by an owner that did not release it
    fd = rundir.lock_run(str(tmp_path))             # stale: taken over
    assert (tmp_path / ".lock").read_text().split() == [str(os.getpid())]
    rundir.unlock_run(str(tmp_path), fd)
    assert not (tmp_path / ".lock").exists()


# ---------------------------------------------------------------------------------------------
# 4. checkpoint every update for the tiny policy by default
# ---------------------------------------------------------------------------------------------
def test_checkpoint_every_defaults_to_auto():
    import train
    cfg = config.parse_args([])
    assert cfg.checkpoint_every == 0 and train.checkpoint_interval(cfg) == 1     # tiny: every update
    assert train.checkpoint_interval(config.parse_args(["--model", "some/model"])) == 10
    assert train.checkpoint_interval(config.parse_args(["--checkpoint-every", "3"])) == 3
    config.validate(cfg)                                                          # 0 is allowed
    with pytest.raises(ValueError, match="--checkpoint-every -1"):
        config.validate(config.parse_args(["--checkpoint-every", "-1"]))
    assert "0 = auto: every update for the tiny policy" in config.field_docs(train.Config)["checkpoint_every"]


# ---------------------------------------------------------------------------------------------
# 5. SIGKILL at random moments, then --resume to the end: every step once, rows = checkpoint
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_random_sigkills_then_resume_leave_every_step_once(tmp_path, cache):
    from infra import rundir
    out, n = tmp_path / "run", 8
    args = ["--method", "grpo", "--iters", str(n), "--eval-every", "3", "--workers", "1", "--out", str(out), *TINY]
    rng = random.Random(24)
    done = -1                                        # checkpoint step before this start
    for i in range(3):
        log = tmp_path / f"log{i}"
        p = start(args + (["--resume"] if i else []), cache, log)
        try:
            # made progress (a checkpoint past the last one), then a kill anywhere in what follows:
            # an update, an evaluation, a metrics row, a checkpoint write or a curves.png redraw
            wait_for(lambda: (rundir.checkpoint_step(str(out)) or -1) > done or p.poll() is not None, p, 300, log)
            time.sleep(rng.uniform(0.0, 1.5))
        finally:
            kill_all(p)
        s = rundir.checkpoint_step(str(out))
        assert s is not None and s > done
        done = s
        rows = rundir.read_metrics(str(out / "metrics.jsonl"))
        assert rows[-1]["step"] <= s + 1            # a row is written just before its checkpoint, never long before
        if i == 0:
            assert (out / "curves.png").exists()    # redrawn after the warm start's evaluation already
        if s == n:
            break
    r = run(args + ["--resume"], cache)
    assert r.returncode == 0, r.stderr[-2000:]
    assert steps(out) == list(range(n + 1))          # 0 = the warm start's evaluation; each once, all parse
    rows = rundir.read_metrics(str(out / "metrics.jsonl"))
    assert rundir.checkpoint_step(str(out)) == rows[-1]["step"] == n
    assert [r_["step"] for r_ in rows if "eval/success" in r_] == [0, 3, 6, 8]
    assert not (out / ".lock").exists()


# ---------------------------------------------------------------------------------------------
# 6. the warm start's progress bar: its rate and ETA are the BC steps', not the success checks'
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_warm_start_bar_does_not_count_the_success_checks(monkeypatch):
    import tqdm
    from infra import warmstart
    seen = {}

    class Recorded(tqdm.tqdm):
        def close(self):
            if not self.disable:
                seen.update(self.format_dict)
            super().close()

    monkeypatch.setattr(tqdm, "tqdm", Recorded)     # bc_train imports it from the module at call time
    monkeypatch.setattr(warmstart.sys, "stderr", type("Tty", (), {"isatty": lambda self: True, "write": lambda self, x: None,
                                                                  "flush": lambda self: None})())   # the bar shows on a terminal only
    model = warmstart.build_tiny_model(40, warmstart.TinyConfig(hidden=32, layers=1, heads=1, intermediate=64), seed=0)
    data = [([1, 2, 3, 4], [5, 6, 2])] * 8
    bc = warmstart.BCConfig(steps=6, batch=4, check_from=2, check_every=2)
    checks = []

    def slow_check(step):                           # stands in for dozens of episodes
        checks.append(step)
        time.sleep(1.5)
        return False
    t0 = time.time()
    warmstart.bc_train(model, data, bc, pad_id=0, seed=0, check=slow_check)
    wall = time.time() - t0
    assert checks == [2, 4]
    assert seen["n"] == 6
    assert seen["elapsed"] < wall - 2.5             # the 3 s of checks are not in the bar's clock
    assert seen["rate"] is None or 1.0 / seen["rate"] < 1.0    # s/step: the steps' own (~0.05 s), not ~0.5 s


def test_a_worker_that_aborts_itself_is_reported_with_its_last_output(tmp_path, capsys):
    """A worker killed by its own SIGABRT (a C++ library's terminate: e.g. gloo's collective
    mismatch) wrote why before dying: the launcher's one line is followed by that worker's last
    output, and the others are stopped (exit 128 + 6)."""
    from infra import dist
    script = tmp_path / "w.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    sys.stderr.write('terminate called: gloo::EnforceNotMet (collective mismatch)\\n')\n"
                      "    sys.stderr.flush()\n"
                      "    os.abort()\n"
                      "time.sleep(60)\n")
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        t0 = time.time()
        rc = dist.launch(2, str(script), [], time.time())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    assert rc == 134 and time.time() - t0 < 30
    assert "worker 1 died (signal 6, SIGABRT)" in err and "gloo::EnforceNotMet (collective mismatch)" in err


def test_a_stopped_rank_of_a_group_ends_without_the_interpreters_shutdown(tmp_path):
    """exit_stopped in a process of a (real, one-rank gloo) process group ends it with the code at
    once: no atexit handler runs (the interpreter's shutdown is what could abort in Gloo's threads),
    and what was printed before is not lost; without a group it returns."""
    script = tmp_path / "s.py"
    script.write_text("import atexit, os, sys\n"
                      f"sys.path.insert(0, {ROOT!r})\n"
                      "from infra import dist, launch\n"
                      "if sys.argv[1] == 'group':\n"
                      "    dist.init(fsdp=True)\n"
                      "atexit.register(lambda: sys.stderr.write('shutdown ran\\n'))\n"
                      "print('before', flush=False)\n"
                      "launch.exit_stopped(130)\n"
                      "print('returned')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}   # a group of one
    g = subprocess.run([sys.executable, str(script), "group"], capture_output=True, text=True, env=env, timeout=120)
    assert g.returncode == 130 and g.stdout == "before\n" and "shutdown ran" not in g.stderr, g.stderr[-2000:]
    n = subprocess.run([sys.executable, str(script), "none"], capture_output=True, text=True, env=env, timeout=120)
    assert n.returncode == 0 and n.stdout == "before\nreturned\n" and "shutdown ran" in n.stderr, n.stderr[-2000:]


def test_ctrl_c_before_the_workers_can_speak_is_said_by_the_launcher(tmp_path, capsys):
    """A Ctrl-C that reaches the workers before they handle signals (still importing) kills them
    silently: the launcher says what happened in one line and exits 130."""
    import threading
    from infra import dist
    script = tmp_path / "w.py"
    script.write_text("import os, time\n"
                      f"open(os.path.join({str(tmp_path)!r}, 'up' + os.environ['RANK']), 'w').close()\n"
                      "time.sleep(60)\n")

    def ctrl_c():   # once both workers run (so the launcher's handler is in place), as a terminal would
        while not all((tmp_path / f"up{r}").exists() for r in (0, 1)):
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        threading.Thread(target=ctrl_c, daemon=True).start()
        rc = dist.launch(2, str(script), [], time.time())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    assert rc == 130 and err.strip().splitlines()[-1] == "interrupted during start-up; no new checkpoint", err
