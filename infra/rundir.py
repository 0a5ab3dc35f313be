"""rundir.py — the run directory: config, metrics, curves, segment reports, errors, checkpoints.

    <out>/config.json      the resolved config (written at start, also on --resume)
    <out>/metrics.jsonl    one JSON object per update (step 0 = the warm start's evaluation)
    <out>/curves.png       success vs updates and vs generated tokens (redrawn after each evaluation
                           and at the end, not every update: see `plot_curves`)
    <out>/segments.md      ProVer / CriticSearch: what got credit and why (`append_segments`)
    <out>/records.jsonl    one bounded JSON line per update: what the credit step saw and did
                           (records.py; appended by `append_jsonl`, cut on --resume like metrics)
    <out>/report.html      self-contained page: curves, config, per-update table, group view
                           (report.py; rewritten by rename after each evaluation)
    <out>/errors.log       a traceback per credit-step error (the run goes on; see train.py)
    <out>/checkpoint/      HF folder + trainer.pt (optimizer, RNG) + state.json (step, counters);
                           --fsdp: + dcp/ (the sharded weights and optimizer state, see
                           `save_sharded`), and the HF folder is the full weights' export
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
    """config.json, segments.md with its header (methods that write one), and metrics.jsonl and
    records.jsonl cut at `start` (a fresh run into an old directory starts over; a resumed one
    drops the lines past its checkpoint). Returns the metrics rows kept."""
    _write_atomic(os.path.join(out, "config.json"), json.dumps(config, indent=1))
    if segments_header is not None:
        append_segments(out, segments_header, [])
    kept = {}
    for name in ("metrics.jsonl", "records.jsonl"):
        path = os.path.join(out, name)
        kept[name] = read_metrics(path, upto=start) if start > 0 else []
        # by rename: truncating in place and rewriting would lose every kept row to a kill in between
        # (a torn last line of the killed run is dropped here too: read_metrics skipped it)
        sep = (",", ":") if name == "records.jsonl" else None        # records are compact (records.dumps)
        _write_atomic(path, "".join(json.dumps(r, separators=sep) + "\n" for r in kept[name]))
    return kept["metrics.jsonl"]


def append_row(out: str, row: dict) -> None:
    """One line, written in one call: a kill can only cut the last line (skipped on reading)."""
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


def append_jsonl(out: str, name: str, line: str) -> None:
    """Append one JSON line (`line`, without its newline) to <out>/<name> with a single unbuffered
    write, so a kill leaves at most a cut last line, which `read_metrics` skips and --resume
    drops. (A plain buffered text file splits a line longer than its buffer into several writes.)"""
    data = (line + "\n").encode()
    with open(os.path.join(out, name), "ab", buffering=0) as f:
        n = f.write(data)
        while n < len(data):            # a short write (rare: a signal mid-call) goes on where it stopped
            n += f.write(data[n:])


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
DCP_DIR = "dcp"        # the sharded part of a --fsdp checkpoint, inside checkpoint/


def save_checkpoint(out: str, model, tok, opt, step: int, counter: Counter, rng_state: dict) -> None:
    """Write `<out>/checkpoint` atomically. A plain model: rank 0 alone calls this. A sharded one
    (--fsdp, dist.shard): EVERY rank calls it — each writes its shards, rank 0 the rest."""
    import torch
    from infra import dist
    final, tmp, old = (os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old"))
    sharded = dist.is_sharded(model)
    rank0 = dist.rank_world()[0] == 0
    if rank0:
        shutil.rmtree(tmp, ignore_errors=True)
    if sharded:
        dist.barrier()                              # tmp is empty before any rank writes into it
        save_sharded(tmp, model, opt)               # every rank: dcp/; rank 0: the HF export
        trainer = {"optimizer": None, "sharded": DCP_DIR, "rng": rng_state}
    else:
        model.save_pretrained(tmp)                  # config + model.safetensors
        trainer = {"optimizer": opt.state_dict(), "rng": rng_state}
    if rank0:
        tok.save_pretrained(tmp)
        torch.save(trainer, os.path.join(tmp, "trainer.pt"))
        with open(os.path.join(tmp, "state.json"), "w") as f:
            json.dump({"step": step, "counter": dict(counter)}, f)
        # swap: a crash at any point leaves `checkpoint` or `checkpoint.old` complete. Under FSDP
        # every rank's shards are on disk by now: dcp.save returns only after rank 0 has collected
        # every rank's write results and written the metadata (.metadata, last).
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(final):
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    if sharded:
        dist.barrier()                              # no rank goes on (or saves again) before the swap


def save_sharded(folder: str, model, opt) -> None:
    """The sharded part of a --fsdp checkpoint, and the full-weights export (every rank calls it).

    * `folder/dcp/`: torch.distributed.checkpoint (DCP) of {"model", "optim"}, each rank writing
      only its own shards (no gather). Keys are parameter names and tensors carry their global
      shapes, so `load_sharded` reshards on load: resume on any number of ranks, or unsharded.
      On several nodes `out` must be on a filesystem every node sees.
    * `folder/` itself: the full weights as an HF folder (config.json + model.safetensors), so
      `checkpoint/` stays loadable by AutoModelForCausalLM elsewhere and by `load_checkpoint`.
      Gathered parameter by parameter to rank 0's CPU (`cpu_offload`): the transient device memory
      is one parameter; rank 0's host memory holds the whole model (4 bytes × N) while it writes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict
    from infra import dist
    msd, osd = get_state_dict(model, opt)              # sharded (DTensor) state, keyed by name
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(folder, DCP_DIR))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.rank_world()[0] == 0:                      # the other ranks got {} (cpu_offload)
        # a tied weight (Qwen3's LM head = its embeddings) came back as separate CPU copies under
        # each name; keep its first name only, as save_pretrained of a plain model writes it
        seen, tied = set(), set()                     # parameter ids met so far; alias names
        for k, v in model.state_dict(keep_vars=True).items():
            if id(v) in seen:
                tied.add(k)
            seen.add(id(v))
        model.save_pretrained(folder, state_dict={k: v for k, v in full.items() if k not in tied})


def load_sharded(folder: str, model, opt) -> None:
    """Load `folder/dcp` into `model` and `opt` in place: sharded or not, on any number of ranks
    (DCP reads each rank's slices of the global tensors). The optimizer may be fresh: its state is
    created first (torch's state_dict helpers), then overwritten."""
    import torch.distributed as tdist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    import warnings
    with warnings.catch_warnings():    # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=os.path.join(folder, DCP_DIR), no_dist=not tdist.is_initialized())
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def restore_optimizer(model, opt, trainer_state: dict) -> None:
    """After `load_checkpoint` and building the optimizer: its state from the checkpoint. A
    --fsdp checkpoint restores the weights as well from its sharded part (the same fp32 values as
    the HF export the model was built from: the sampler copy taken from it agrees bit for bit).
    A plain checkpoint into a sharded model (turning --fsdp on at a resume): the plain optimizer
    state, keyed by parameter position, is renamed by parameter name and scattered to the shards."""
    from infra import dist
    if trainer_state.get("sharded"):
        load_sharded(trainer_state["dir"], model, opt)
    elif dist.is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
        names = [n for n, p in model.named_parameters() if p.requires_grad]   # the optimizer's order
        plain = trainer_state["optimizer"]
        osd = {"state": {names[i]: v for i, v in plain["state"].items()},
               "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in plain["param_groups"]]}
        set_optimizer_state_dict(model, opt, osd, options=StateDictOptions(full_state_dict=True))
    else:
        opt.load_state_dict(trainer_state["optimizer"])


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
        tr["dir"] = d                                   # where restore_optimizer finds dcp/
        if tr.get("sharded") and not os.path.exists(os.path.join(d, DCP_DIR, ".metadata")):
            raise FileNotFoundError(f"{DCP_DIR}/.metadata missing")
    except Exception as e:  # any unreadable part means the checkpoint is unusable
        raise ValueError(f"--resume: corrupt checkpoint {d}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return model, tok, tr, st["step"], Counter(st["counter"])
