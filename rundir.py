"""rundir.py — the run directory: config, metrics, curves, segment reports, errors, checkpoints.

    <out>/config.json      the resolved config (written at start, also on --resume)
    <out>/metrics.jsonl    one JSON object per update (step 0 = the warm start's evaluation)
    <out>/curves.png       success vs updates and vs generated tokens (redrawn after each evaluation
                           and at the end, not every update: see `plot_curves`)
    <out>/segments.md      ProVer / CriticSearch: what got credit and why (`append_segments`)
    <out>/errors.log       a traceback per credit-step error (the run goes on; see train.py)
    <out>/checkpoint/      HF folder + trainer.pt (optimizer, RNG) + state.json (step, counters)
    <out>/.lock            held while a run uses the directory; holds its pid (`lock_run`)

Crash safety: the checkpoint is written to `checkpoint.tmp` and swapped in with renames, so a kill
at any moment leaves `checkpoint` or `checkpoint.old` complete; a metrics line cut by a kill is
skipped on reading, and a resumed run drops the rows past its checkpoint (it re-does them);
config.json and the cut metrics.jsonl are rewritten by rename, so a kill during a (re)start does not
empty them. Rows are appended before the checkpoint of their update is written, never after: a
kill between the two leaves a row past the checkpoint (dropped and re-done on --resume), never a
checkpoint whose row is missing.
Plain values in, no config object: any script can read a run directory with these functions.
"""
from __future__ import annotations

import json
import os
import shutil
import traceback
from collections import Counter


# ---------------------------------------------------------------------------------------------
# The run directory's lock: one run at a time
# ---------------------------------------------------------------------------------------------
LOCK = ".lock"


class RunDirBusy(ValueError):
    """Another live run holds the run directory (a ValueError: train.py reports it in one line)."""


def lock_run(out: str) -> int:
    """Take `<out>/.lock` for this run, or raise RunDirBusy naming the owner's pid; returns the
    lock's file descriptor (keep it open; `unlock_run` at the end).

    Why flock and not "a file with a pid, taken if the pid is dead": the kernel releases a flock
    when the last descriptor of it closes, i.e. when its owner is gone however it ended (SIGKILL
    included), so a lock of a dead run is taken over by itself, with no pid liveness check to get
    wrong (a reused pid, a pid of another machine's namespace). The descriptor is inherited by the
    local workers (dist.launch keeps it open in them), so the lock stays held until the *last*
    process of the run has exited, not just the launcher. The pid written in the file is only for
    the message. Local filesystems and NFS (Linux emulates flock over NFS locks) are covered;
    POSIX only (fcntl), like dist's local workers."""
    import fcntl
    path = os.path.join(out, LOCK)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirBusy(f"--out {out}: in use by another run (pid {owner}, see {path}); "
                             "wait for it to end or stop it first") from None
        # The owner before us unlinks the file on release (unlock_run): if that happened between our
        # open and our flock, we hold a lock on a file nobody else will open. Retry on the new one.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)               # a stale pid of a dead owner may be there
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_run(out: str, fd: int) -> None:
    """Release the lock: unlink first, while still holding it (see the retry in lock_run), then close."""
    try:
        os.unlink(os.path.join(out, LOCK))
    except FileNotFoundError:
        pass
    os.close(fd)


def _write_atomic(path: str, text: str) -> None:
    """Write a whole file by rename: a kill mid-write leaves the old file, not a torn or empty one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Metrics and reports
# ---------------------------------------------------------------------------------------------
def read_metrics(path: str, upto: int | None = None) -> list[dict]:
    """Rows of a metrics.jsonl (with `upto`: only steps <= upto); a torn last line is skipped."""
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut by a crash
                    if upto is None or r.get("step", 0) <= upto:
                        rows.append(r)
    return rows


def start_files(out: str, config: dict, start: int, segments_header: str | None) -> list[dict]:
    """config.json, segments.md with its header (methods that write one), and metrics.jsonl cut at
    `start` (a fresh run into an old directory starts over; a resumed one drops the rows past its
    checkpoint). Returns the rows kept."""
    _write_atomic(os.path.join(out, "config.json"), json.dumps(config, indent=1))
    if segments_header is not None:
        append_segments(out, segments_header, [])
    mpath = os.path.join(out, "metrics.jsonl")
    rows = read_metrics(mpath, upto=start) if start > 0 else []
    # by rename: truncating in place and rewriting would lose every kept row to a kill in between
    # (a torn last line of the killed run is dropped here too: read_metrics skipped it)
    _write_atomic(mpath, "".join(json.dumps(r) + "\n" for r in rows))
    return rows


def append_row(out: str, row: dict) -> None:
    """One line, written in one call: a kill can only cut the last line (skipped on reading)."""
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


def append_segments(out: str, header: str, entries: list[str]) -> None:
    """Append report entries to segments.md, writing `header` first if the file is new or empty
    (the one place the header is written)."""
    with open(os.path.join(out, "segments.md"), "a") as f:
        if f.tell() == 0:
            f.write(header)
        f.write("".join(e if e.endswith("\n") else e + "\n" for e in entries))


def log_error(out: str, step: int, where: str, exc: BaseException) -> None:
    """One traceback in errors.log, headed by the update and where it happened."""
    with open(os.path.join(out, "errors.log"), "a") as f:
        f.write(f"--- step {step}: {where}: {type(exc).__name__}: {exc}\n")
        f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def plot_curves(out: str, rows: list[dict]) -> None:
    """curves.png: train and held-out success against updates and against generated tokens.
    About 0.3 s a redraw (1 s more for the first, matplotlib's import): train.py redraws it after
    each evaluation and at the end, not every update (a tiny-policy update takes about a second)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    tok_cum, cum = [], 0
    for r in rows:
        cum += r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)
        tok_cum.append(cum)
    steps = [r["step"] for r in rows]
    for a, xs, xl in ((ax[0], steps, "policy updates"), (ax[1], tok_cum, "generated tokens (rollout + verify + judge)")):
        a.plot(xs, [r.get("train/success", float("nan")) for r in rows], alpha=0.4, label="train rollouts")
        ev = [(x, r["eval/success"]) for x, r in zip(xs, rows) if "eval/success" in r]
        if ev:
            a.plot(*zip(*ev), "o-", label="held-out eval")
        a.set_xlabel(xl)
        a.set_ylabel("success rate")
        a.set_ylim(-0.02, 1.02)
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle(os.path.basename(os.path.normpath(out)))
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png.tmp.png"), dpi=90)
    plt.close(fig)
    os.replace(os.path.join(out, "curves.png.tmp.png"), os.path.join(out, "curves.png"))


# ---------------------------------------------------------------------------------------------
# Checkpoints (atomic)
# ---------------------------------------------------------------------------------------------
def save_checkpoint(out: str, model, tok, opt, step: int, counter: Counter, rng_state: dict) -> None:
    import torch
    final, tmp, old = (os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old"))
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)                      # config + model.safetensors
    tok.save_pretrained(tmp)
    torch.save({"optimizer": opt.state_dict(), "rng": rng_state}, os.path.join(tmp, "trainer.pt"))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump({"step": step, "counter": dict(counter)}, f)
    # swap: a crash at any point leaves `checkpoint` or `checkpoint.old` complete
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def checkpoint_step(out: str) -> int | None:
    """Step of the last complete checkpoint, or None."""
    for d in ("checkpoint", "checkpoint.old"):
        p = os.path.join(out, d, "state.json")
        if os.path.exists(p):
            try:
                return int(json.load(open(p))["step"])
            except (ValueError, KeyError, json.JSONDecodeError):
                return None
    return None


def load_checkpoint(out: str, base_model: str = ""):
    """(model, tok, trainer state, step, counter). One clear error if it is missing or corrupt.
    A LoRA checkpoint holds only the adapters: they are applied to `base_model` (--model), or to
    the base recorded in the adapter's config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = os.path.join(out, "checkpoint")
    if not os.path.isdir(d) and os.path.isdir(d + ".old"):
        d = d + ".old"
    if not os.path.isdir(d):
        raise FileNotFoundError(f"--resume: no checkpoint in {out}")
    try:
        with open(os.path.join(d, "state.json")) as f:
            st = json.load(f)
        tok = AutoTokenizer.from_pretrained(d, padding_side="left")
        if os.path.exists(os.path.join(d, "adapter_config.json")):
            from peft import PeftModel
            base_model = base_model or json.load(open(os.path.join(d, "adapter_config.json")))["base_model_name_or_path"]
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32),
                                              d, is_trainable=True)
        else:
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        tr = torch.load(os.path.join(d, "trainer.pt"), weights_only=False)
    except Exception as e:  # any unreadable part means the checkpoint is unusable
        raise ValueError(f"--resume: corrupt checkpoint {d}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return model, tok, tr, st["step"], Counter(st["counter"])
