"""dist.py — everything data-parallel: ranks, collectives, the local-worker launcher, stop signals.

How a run is spread over processes
----------------------------------
Every rank holds the whole policy and owns whole rollout groups (group k of an update belongs to
rank k mod world). Gradients are *summed* over ranks (each rank's loss is its token-sum over the
global token count, see grpo.update), so an update is the one a single process would take, up to
float summation order. Two ways to get ranks:

* `torchrun --nproc-per-node N train.py ...` (GPUs: NCCL; CPUs: gloo) — torchrun sets RANK,
  WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT and `init` joins the group.
* `train.py --workers N` (the laptop default: one per core for the tiny policy) — `launch` starts N
  copies of the script with the same variables torchrun would set, on 127.0.0.1.

Stops: SIGINT/SIGTERM in a worker raise KeyboardInterrupt (`stop_on_signal`), so a scheduler's
SIGTERM takes the same path as Ctrl-C (report the last complete checkpoint, exit 130). The launcher
passes a signal on once, and stops the others when one worker fails.

Everything here takes plain values (no config object), so any script can use it. What it leaves
out: elastic restarts, several nodes (torchrun does both), model sharding (DDP-style replicas only).
"""
from __future__ import annotations

import os
import signal
import sys
import time


# ---------------------------------------------------------------------------------------------
# Ranks and collectives (identity in a single process)
# ---------------------------------------------------------------------------------------------
def init(use_cuda: bool = False) -> tuple[int, int]:
    """Join the process group torchrun (or `launch`) described in the environment; (rank, world).
    A single process (no WORLD_SIZE, or 1) joins nothing."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    import torch
    import torch.distributed as tdist
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    tdist.init_process_group("nccl" if use_cuda else "gloo")
    return tdist.get_rank(), world


def rank_world() -> tuple[int, int]:
    """(rank, world size) of an initialised process group; (0, 1) otherwise."""
    import torch.distributed as tdist
    if tdist.is_available() and tdist.is_initialized():
        return tdist.get_rank(), tdist.get_world_size()
    return 0, 1


def all_reduce(x):
    """Sum a tensor over ranks in place (and return it); identity in a single process."""
    import torch.distributed as tdist
    if tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1:
        tdist.all_reduce(x)
    return x


def all_reduce_grads(model) -> list:
    """Sum the trainable parameters' gradients over ranks (a rank with no rows of its own
    contributes zeros); returns those parameters."""
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        all_reduce(p.grad)
    return params


def gather(obj, world: int) -> list:
    """Every rank's picklable `obj`, in rank order; [obj] in a single process."""
    if world == 1:
        return [obj]
    import torch.distributed as tdist
    out = [None] * world
    tdist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    import torch.distributed as tdist
    if tdist.is_available() and tdist.is_initialized():
        tdist.barrier()


# ---------------------------------------------------------------------------------------------
# Stop signals
# ---------------------------------------------------------------------------------------------
STOPPING = False   # set by SIGTERM: errors after it are the stop's echo, not failures


def _raise_interrupt(signum, frame):
    global STOPPING
    STOPPING = True
    raise KeyboardInterrupt


def stop_on_signal() -> None:
    """SIGTERM (Slurm, Kubernetes, `timeout`) behaves like Ctrl-C in this process."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


# ---------------------------------------------------------------------------------------------
# Local workers: the laptop default uses every core
# ---------------------------------------------------------------------------------------------
def auto_workers(requested: int, max_workers: int, tiny_cpu: bool) -> int:
    """Number of local worker processes. `requested` 0 = auto: one per usable core (at most
    `max_workers`, the tasks per update) when `tiny_cpu` (the tiny policy on CPU), else 1 (real
    models, vLLM and CUDA use torchrun). Why processes and not threads: the tiny model's matrices
    are too small for intra-op threads to help, and most of a step is Python (prompts, env logic,
    sampling), so a second core only pays off as a second process with its own share of the groups."""
    if requested < 0:
        raise ValueError(f"--workers {requested}: must be >= 0 (0 = auto)")
    if requested > max_workers:
        raise ValueError(f"--workers {requested}: more workers than --tasks-per-iter {max_workers} (each worker owns whole groups)")
    if requested:
        return requested
    if not tiny_cpu:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, max_workers))


def launch(n: int, script: str, argv: list[str], t0: float) -> int:
    """Start n copies of `script argv` as ranks 0..n-1 of a gloo group on 127.0.0.1 and wait;
    returns the exit code. Rank 0 prints, writes the run directory and checkpoints; all ranks roll
    out and evaluate their share. Ctrl-C/SIGTERM are passed on once, so the run stops as a single
    process would (last complete checkpoint, exit 130). If a worker fails, the others are stopped
    rather than left waiting for it in the next collective; the other ranks' stderr is shown only
    when rank 0 did not already report the error itself. `t0` (PROVER_T0) is the launch time, so
    the workers' wall clock counts from it."""
    import socket
    import subprocess
    import tempfile
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                PROVER_T0=str(t0))
    errs = [None] + [tempfile.TemporaryFile("w+") for _ in range(n - 1)]
    # own sessions: a terminal's Ctrl-C reaches only this process, which passes it on once
    procs = [subprocess.Popen([sys.executable, script, *argv], start_new_session=True,
                              stderr=errs[r], env=dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    user_stop, stopped_at, failed_at = False, None, None

    def stop_all(*_):
        nonlocal stopped_at
        stopped_at = stopped_at or time.time()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def on_signal(signum, frame):
        nonlocal user_stop
        user_stop = True
        stop_all()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    while any(p.poll() is None for p in procs):
        now = time.time()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if failed_at and not stopped_at and now > failed_at + 5:   # the rest have not failed by themselves
            stop_all()
        if stopped_at and now > stopped_at + 60:                   # one stuck in a broken collective
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    if user_stop:
        return 130
    failed = [r for r, c in enumerate(codes) if c not in (0, 130)]   # 130: stopped by us
    if not failed:
        return max(codes)
    if failed[0] != 0:   # rank 0 did not report it (it printed its own error if it failed): show the worker's
        errs[failed[0]].seek(0)
        sys.stderr.write(f"train.py: worker {failed[0]} failed (exit {codes[failed[0]]}):\n" + errs[failed[0]].read()[-4000:])
    return codes[failed[0]]
