"""Process management around one training run: flags, the run lock, local workers, signals, errors.

    main(cfg, argv, train, script)    # train.py's entry point: the parsed flags, and argv for workers

1. Validate the flags (config.py; train.py parsed them): a bad one is one line and exit 2, before
   anything is built.
2. Lock the run directory (one run per directory: a --resume beside a live run would interleave
   rows and checkpoints); workers inherit the lock.
3. `--workers N > 1` (the default for the tiny policy on CPU: one per core): start N copies of
   `script` as ranks of a gloo group (infra/dist.py) and wait; else train in this process.
   For a debugger or `breakpoint()`, use `--workers 1`: one process, nothing forked.
4. Errors: a config or data problem (ValueError, missing file or package, refused connection)
   is one line and exit 2; Ctrl-C or SIGTERM says where the last complete checkpoint is (exit 130);
   a worker broken by a peer's death stays quiet so the launcher's one line names the cause.
"""
from __future__ import annotations

import os
import sys
import time

from config import default_out, validate
from infra import dist, rundir
from infra.runlog import T_START


def main(cfg, argv: list[str], train, script: str) -> None:
    """`python train.py ARGV` (cfg: ARGV parsed): validate, lock the run directory, then train here
    or in n workers (each parses ARGV itself). A stopped rank of a process group ends at once
    (exit_stopped: the interpreter's shutdown could abort in Gloo's threads)."""
    try:
        _main(cfg, argv, train, script)
    except SystemExit as e:
        if e.code == 130:
            exit_stopped(130)
        raise


def _main(cfg, argv: list[str], train, script: str) -> None:
    cfg.out = cfg.out or default_out(cfg)
    try:
        validate(cfg)
        tiny_cpu = not cfg.model and cfg.rollout == "hf" and cfg.device != "cuda"
        n = dist.auto_workers(cfg.workers, cfg.tasks_per_iter, tiny_cpu) if "WORLD_SIZE" not in os.environ else 1
    except ValueError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    rank = int(os.environ.get("RANK", "0"))
    lock = None
    if dist.under_launcher():
        dist.die_with_launcher()      # a worker of ours: stop if the launcher dies, however it dies
    elif rank == 0:                   # the launcher, a single process, or torchrun's rank 0
        # One run per directory, checked before anything is built (a --resume beside a live run
        # would interleave rows and checkpoints). The workers inherit the lock (keep_fds below).
        os.makedirs(cfg.out, exist_ok=True)
        try:
            lock = rundir.lock_run(cfg.out)
        except rundir.RunDirBusy as e:
            print(f"train.py: error: {e}", file=sys.stderr)
            raise SystemExit(2)
    try:
        if n > 1:
            raise SystemExit(dist.launch(n, script, argv, T_START,
                                         keep_fds=(lock,) if lock is not None else ()))
        dist.stop_on_signal()
        try:
            out = train(cfg)
        except (ValueError, FileNotFoundError, ImportError, ConnectionError) as e:
            print(f"train.py: error: {e}", file=sys.stderr)
            raise SystemExit(2)
        except KeyboardInterrupt:         # before the loop (warm start, first evaluation): nothing to save yet
            if rank == 0:
                print("\ninterrupted during set-up (warm start or first evaluation); no new checkpoint", file=sys.stderr)
            raise SystemExit(130)
        except Exception:
            if dist.STOPPING and rank != 0:   # a peer stopped first and broke a collective: stop quietly
                raise SystemExit(130)
            if dist.under_launcher():
                # A peer killed by a signal breaks the next collective here, often before the
                # launcher has seen it die. The launcher then stops us (SIGTERM: KeyboardInterrupt
                # in this wait) and reports the death in one line; this traceback would be an echo
                # hiding the cause. A real error here is shown after the wait (2 s < the
                # launcher's 5 s grace for a worker that failed by itself).
                try:
                    time.sleep(2.0)
                except KeyboardInterrupt:
                    s = rundir.checkpoint_step(cfg.out) if rank == 0 else None
                    if s is not None:     # what the launcher's line cannot say: where to go on from
                        print(f"last complete checkpoint: {cfg.out}/checkpoint (step {s}); continue with --resume",
                              file=sys.stderr)
                    raise SystemExit(130) from None
            raise
        if rank == 0:
            print(f"done: {out}")
    finally:
        if lock is not None:
            rundir.unlock_run(cfg.out, lock)


def exit_stopped(code: int) -> None:
    """In a process of a process group that was stopped (Ctrl-C, SIGTERM, a peer's failure): flush
    the console and end the process now, skipping the interpreter's shutdown; without a group,
    return (the caller raises SystemExit as usual).

    Why: a process that exits without `destroy_process_group()` can abort in the interpreter's
    shutdown — Gloo's worker threads may still hold work whose tensors need the GIL as they are
    freed, and the C++ runtime ends with SIGABRT and "terminate called without an active
    exception" after the run's last line. Destroying the group instead could wait on a peer stuck in
    a collective. Nothing is left to write by then: metrics, records and checkpoints are written whole
    by rename or appended by opened-and-closed files, and the lead closed its loggers."""
    tdist = sys.modules.get("torch.distributed")
    if tdist is None or not (tdist.is_available() and tdist.is_initialized()):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken pipe: nothing more can be said anyway
            pass
    os._exit(code)
