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
passes a signal on once, and stops the others when one worker fails; a worker killed outright (a
signal it cannot handle, e.g. SIGKILL or the OOM killer) is reported in one line by the launcher,
which then stops the rest. Workers die with their launcher (`die_with_launcher`): a launcher killed
with SIGKILL cannot pass anything on, and orphaned workers would train on beside a `--resume`.

Sharded training (`--fsdp`, section "FSDP2" below): the policy's parameters, gradients and Adam
state are split over the ranks with torch's FSDP2 (`fully_shard` per decoder layer, then the root),
instead of a whole replica per rank. Groups are still owned whole by ranks; FSDP reduce-scatters
the gradients itself, set to *sum* (not its default mean), so the update is again the
single-process one.

Everything here takes plain values (no config object), so any script can use it. What it leaves
out: elastic restarts, several nodes (torchrun does both), tensor/pipeline parallelism.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass


# ---------------------------------------------------------------------------------------------
# Ranks and collectives (identity in a single process)
# ---------------------------------------------------------------------------------------------
def init(use_cuda: bool = False, fsdp: bool = False) -> tuple[int, int]:
    """Join the process group torchrun (or `launch`) described in the environment; (rank, world).
    A single process (no WORLD_SIZE, or 1) joins nothing, unless `fsdp`: FSDP2 shards over a
    device mesh, which needs a process group even of one rank (so `--fsdp` on one process runs
    the same sharded code, and resumes a checkpoint written by N ranks)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not fsdp:
        return 0, 1
    import torch
    import torch.distributed as tdist
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if tdist.is_initialized():        # a script (bench/fsdp_step.py, a test) joined one already
        return tdist.get_rank(), tdist.get_world_size()
    if world == 1:                    # alone: an in-memory store, no address or port to agree on
        tdist.init_process_group("nccl" if use_cuda else "gloo", store=tdist.HashStore(), rank=0, world_size=1)
        return 0, 1
    tdist.init_process_group("nccl" if use_cuda else "gloo")
    return tdist.get_rank(), world


def rank_world() -> tuple[int, int]:
    """(rank, world size) of an initialised process group; (0, 1) otherwise."""
    import torch.distributed as tdist
    if tdist.is_available() and tdist.is_initialized():
        return tdist.get_rank(), tdist.get_world_size()
    return 0, 1


def all_reduce(x, op: str = "sum"):
    """Reduce a tensor over ranks in place (and return it): `op` "sum" or "max"; identity in a
    single process."""
    import torch.distributed as tdist
    if tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1:
        tdist.all_reduce(x, op={"sum": tdist.ReduceOp.SUM, "max": tdist.ReduceOp.MAX}[op])
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
# Workers: the one interface the core uses (train.py's loop, grpo.step)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workers:
    """This process's place among the run's data-parallel workers: rank `rank` of `world`. In one
    process (0 of 1) every method is the identity, so the core reads as single-process code."""
    rank: int = 0
    world: int = 1

    @property
    def lead(self) -> bool:
        """The worker that writes the run directory and the console (rank 0)."""
        return self.rank == 0

    def mine(self, n: int) -> list[int]:
        """The positions (of n tasks) this worker owns: every world-th, from its rank."""
        return list(range(self.rank, n, self.world))

    def gather(self, obj) -> list:
        """Every worker's picklable `obj`, in rank order."""
        return gather(obj, self.world)

    def sum(self, x):
        """A tensor summed over the workers, in place (and returned)."""
        return all_reduce(x)

    def summed_grads(self, model) -> list:
        """The trainable parameters, their gradients summed over the workers (a sharded model's
        were reduce-scattered, summed, in its backward already)."""
        return [p for p in model.parameters() if p.requires_grad] if is_sharded(model) else all_reduce_grads(model)

    def passes(self, model, batches: list, dummy) -> list:
        """(batch, real) for each forward/backward pass of an update: every batch, real; for a
        sharded model, then (dummy, False) until this worker has run as many passes as the busiest
        (each pass of a sharded model is a collective: every worker must run it)."""
        out = [(b, True) for b in batches]
        if is_sharded(model):
            import torch
            dev = next(model.parameters()).device
            most = int(all_reduce(torch.tensor([float(len(batches))], device=dev), op="max")[0].item())
            out += [(dummy, False)] * (most - len(batches))
        return out


def workers() -> Workers:
    """This process's Workers (of the initialised process group; 0 of 1 otherwise)."""
    return Workers(*rank_world())


# ---------------------------------------------------------------------------------------------
# FSDP2 (--fsdp): the policy sharded over the ranks
# ---------------------------------------------------------------------------------------------
# Memory per rank for N parameters over W ranks (fp32 master weights, AdamW):
#   sharded policy: 4 (weights) + 4 (gradients) + 8 (Adam moments) bytes × N / W
#   + one decoder layer all-gathered at a time (forward and backward), + activations
#   + the HF sampler's full copy (4 bytes × N, `--rollout hf` only: see `copy_full_weights`)
#   + the KL reference, sharded like the policy (4 bytes × N / W, `--kl-coef` > 0 only)
# so on 8 GPUs a Qwen3-1.7B policy's training state is ~3.4 GB per GPU instead of ~27 GB.
#
# How the pieces fit this code base:
# * Units: `fully_shard` on every decoder layer (the model's `_no_split_modules` classes, e.g.
#   Qwen3DecoderLayer), then on the whole model (the root: embeddings, final norm and the LM head,
#   which Qwen3 ties to the embeddings — one parameter, so it must sit in one unit). A layer's
#   weights are all-gathered just before its forward and freed after it (and again in backward).
# * The loss does not call the model's forward: grpo.token_logprobs runs the body and then the LM
#   head on the action positions only (a (B, T, V) logits tensor would dwarf the model). FSDP2's
#   gathers run in hooks around a module *call*, so that computation is routed through a method of
#   the root registered with `register_fsdp_forward_method` (`root_call`): the root's parameters
#   are gathered around it, and the layers' own calls inside do the rest.
# * Gradients: every rank's loss is its token-sum over the GLOBAL token count (grpo.step), so the
#   gradients must be *summed* over ranks. FSDP2 averages by default (divides by W); we set the
#   divide factor to 1 and force plain SUM collectives (gloo has no PREMUL_SUM), on every unit.
#   all_reduce_grads is then skipped (Workers.summed_grads): FSDP has reduced them already.
# * Collectives in lockstep: each forward/backward of a sharded model is a collective, so every
#   rank must run the same number of them. Workers.passes pads the ranks with fewer micro-batches with
#   zero-weight passes; generation never touches the sharded model (below), because rollouts have
#   rank-dependent lengths and would deadlock.
# * Mixed precision (`--bf16`): MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) — layers
#   compute in bf16, gradients are reduced in fp32 into the fp32 master shards.
_MESH = None


def is_sharded(model) -> bool:
    """True for a model `shard` has wrapped (an FSDP2 module)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:               # a torch without distributed support
        return False
    return isinstance(model, FSDPModule)


def _mesh(device_type: str):
    """One 1-D device mesh over all ranks (the policy and the reference share it)."""
    global _MESH
    if _MESH is None:
        import torch.distributed as tdist
        from torch.distributed.device_mesh import init_device_mesh
        _MESH = init_device_mesh(device_type, (tdist.get_world_size(),))
    return _MESH


def decoder_layers(model) -> list:
    """The blocks FSDP shards one by one: modules of the classes HF lists in `_no_split_modules`
    (its own "never split this across devices" unit, the decoder layer), else `model.model.layers`."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        layers = list(getattr(getattr(model, "model", None), "layers", []))
    if not layers:
        raise ValueError(f"--fsdp: no decoder layers found in {type(model).__name__}")
    return layers


def _call(self, fn, *args):
    """The root's registered forward method (see `root_call`): runs fn(*args) while the root's
    parameters are gathered."""
    return fn(*args)


def shard(model, bf16: bool = False, reshard_root: bool = False):
    """FSDP2-shard `model` in place over all ranks of the process group (see the section comment);
    returns it (its class becomes FSDP<cls>; parameter names are unchanged). The model must be on
    its device already. `reshard_root`: free the root's gathered weights after each call too
    (FSDP2 keeps the root gathered between forward and backward by default: right for the policy,
    wasted memory for the KL reference, which has no backward)."""
    import types

    import torch
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    mesh = _mesh(next(model.parameters()).device.type)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=True if reshard_root else None)
    for m in model.modules():
        if isinstance(m, FSDPModule):     # per unit: neither setting recurses into sub-units
            m.set_gradient_divide_factor(1.0)              # sum, not mean, over ranks
            m.set_force_sum_reduction_for_comms(True)      # as ReduceOp.SUM (no PREMUL_SUM on gloo)
    model.prover_call = types.MethodType(_call, model)     # a plain attribute, not a submodule
    register_fsdp_forward_method(model, "prover_call")
    return model


def root_call(model, fn, *args):
    """fn(*args), inside the sharded root's gather hooks when `model` is sharded (else directly).
    Every rank must make the same calls (each is a collective)."""
    return model.prover_call(fn, *args) if is_sharded(model) else fn(*args)


def _full(t, cache: dict | None = None):
    """The whole tensor of a (possibly sharded) DTensor parameter: an all-gather, so every rank
    must ask for the same tensors in the same order. `cache` (by id) gathers a tied weight once."""
    from torch.distributed.tensor import DTensor
    if not isinstance(t, DTensor):
        return t
    if cache is None:
        return t.full_tensor()
    if id(t) not in cache:
        cache[id(t)] = t.full_tensor()
    return cache[id(t)]


def copy_full_weights(sharded, full) -> None:
    """Copy the sharded model's current weights into `full`, an unsharded copy of the same
    architecture, in place (the sampler's copy: see build.FullCopySampler). Parameter by parameter,
    so the transient extra memory is one gathered tensor. Every rank calls it (all-gathers).

    Why a full copy for sampling and not `unshard()` around generation: rollouts, continuations
    and the judge make a rank-dependent number of forward passes (episodes end at different turns
    on different ranks), and any forward of a sharded model is a collective, so ranks would wait
    on each other forever. The copy costs 4 bytes × N per rank and one all-gather of the weights
    per update; the sampler itself runs unchanged (`policy.Qwen3Runner` included). Buffers (RoPE's
    inverse frequencies) are not sharded and never change: they are not copied."""
    import torch
    dst = dict(full.named_parameters())
    with torch.no_grad():
        for name, p in sharded.named_parameters():   # same names: fully_shard keeps the module tree
            dst[name].copy_(_full(p))


def full_state_dict(model) -> dict:
    """{name: whole tensor} of a sharded model on every rank (plain models: their state_dict).
    Every rank calls it. Used to push weights into each rank's own vLLM engine."""
    cache: dict = {}
    return {k: _full(v, cache) for k, v in model.state_dict().items()}


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


# The launcher's pid, in its workers' environment: it tells a worker that `launch` started it (so it
# neither takes the run directory's lock, which the launcher holds for it, nor outlives the launcher).
LAUNCHER_ENV = "PROVER_LAUNCHER_PID"


def under_launcher() -> bool:
    """True in a worker process started by `launch` (not under torchrun, not a single process)."""
    return LAUNCHER_ENV in os.environ


def die_with_launcher() -> None:
    """In a worker started by `launch`: get SIGTERM when the launcher dies, however it dies.

    Why: the launcher passes Ctrl-C/SIGTERM on, but a launcher killed with SIGKILL (or by the OOM
    killer) passes nothing on, and its workers would train to the end unseen, writing the run
    directory beside any `--resume` started meanwhile. SIGTERM (not SIGKILL) so the worker stops
    the way a passed-on Ctrl-C stops it: KeyboardInterrupt, the last complete checkpoint kept.

    How, and why this way: Linux's `prctl(PR_SET_PDEATHSIG)` asks the kernel to send the signal when
    the parent exits — immediate, no thread, no polling, and it works while the worker sits in C code
    (a forward pass, a collective). It has one gap: it is set here, at worker start, after the
    interpreter and its imports came up, so a launcher that died before that has already been
    replaced as parent (by init or a subreaper): hence the check of the parent pid just after. Where
    prctl is missing (macOS) a daemon thread polls the parent pid once a second instead; portable,
    but up to a second late and the signal is handled only when the main thread runs Python.
    Either way the lock on the run directory (rundir.lock_run), inherited by the workers, stays
    held until the last of them has exited, so a `--resume` cannot start beside a dying worker."""
    launcher = int(os.environ.get(LAUNCHER_ENV, "0") or 0)
    if not launcher:
        return
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            PR_SET_PDEATHSIG = 1      # from <linux/prctl.h>
            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False             # no libc prctl (unusual libc): fall back to the watchdog below
    if os.getppid() != launcher:      # the launcher died before prctl was set: nothing will signal us
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if not armed:
        import threading

        def watch():
            while os.getppid() == launcher:
                time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGTERM)   # delivered to the main thread, as a Ctrl-C would be
        threading.Thread(target=watch, name="die-with-launcher", daemon=True).start()


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


def _how(code: int) -> str:
    """A worker's end in words: Popen's negative return code means killed by that signal."""
    if code < 0:
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def _exit_status(code: int) -> int:
    """The launcher's exit status for a worker's return code: a signal death becomes 128 + signal,
    as a shell reports it (SystemExit(-9) would exit 247, which reads as nothing in particular)."""
    return 128 - code if code < 0 else code


def launch(n: int, script: str, argv: list[str], t0: float, keep_fds: tuple = ()) -> int:
    """Start n copies of `script argv` as ranks 0..n-1 of a gloo group on 127.0.0.1 and wait;
    returns the exit code. Rank 0 prints, writes the run directory and checkpoints; all ranks roll
    out and evaluate their share. Ctrl-C/SIGTERM are passed on once, so the run stops as a single
    process would (last complete checkpoint, exit 130). If a worker fails, the others are stopped
    rather than left waiting for it in the next collective; the other ranks' stderr is shown only
    when rank 0 did not already report the error itself. A worker killed by a signal (SIGKILL, the
    OOM killer) cannot report anything itself: the launcher says so in one line (rank and signal),
    stops the others at once and exits 128 + the signal. `t0` (PROVER_T0) is the launch time, so
    the workers' wall clock counts from it. `keep_fds` stay open in the workers (the run
    directory's lock: held until the last worker is gone, see rundir.lock_run)."""
    import socket
    import subprocess
    import tempfile
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                PROVER_T0=str(t0), **{LAUNCHER_ENV: str(os.getpid())})   # see die_with_launcher
    errs = [None] + [tempfile.TemporaryFile("w+") for _ in range(n - 1)]
    # own sessions: a terminal's Ctrl-C reaches only this process, which passes it on once
    procs = [subprocess.Popen([sys.executable, script, *argv], start_new_session=True, pass_fds=tuple(keep_fds),
                              stderr=errs[r], env=dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    user_stop, stopped_at, failed_at, killed = False, None, None, None

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
        # A worker killed by a signal before we stopped anything was killed from outside (by hand,
        # the OOM killer): nothing of it will print, and its peers would fail in their next
        # collective with a traceback that hides the cause. Say it once, stop the rest at once.
        dead = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode is not None and p.returncode < 0]
        if dead and killed is None and not stopped_at:
            killed = dead[0]
            sys.stderr.write(f"\ntrain.py: worker {killed[0]} died ({_how(killed[1])}); stopping the run\n")
            sys.stderr.flush()
            stop_all()
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
        if codes[0] < 0:   # rank 0 died of the passed-on signal before it could say anything (imports)
            sys.stderr.write("\ninterrupted during start-up; no new checkpoint\n")
        return 130
    if killed is not None:            # already reported; the others were stopped by us
        # a worker that aborted itself (SIGABRT: a C++ library's terminate, e.g. gloo's "collective
        # mismatch") wrote why before dying: show its last lines (rank 0's went to the console)
        if errs[killed[0]] is not None:
            errs[killed[0]].seek(0)
            tail = errs[killed[0]].read()[-2000:].strip()
            if tail:
                sys.stderr.write(f"train.py: worker {killed[0]}'s last output:\n{tail}\n")
        return _exit_status(killed[1])
    failed = [r for r, c in enumerate(codes) if c not in (0, 130)]   # 130: stopped by us
    if not failed:
        return max(codes)
    if failed[0] != 0:   # rank 0 did not report it (it printed its own error if it failed): show the worker's
        errs[failed[0]].seek(0)
        sys.stderr.write(f"train.py: worker {failed[0]} failed ({_how(codes[failed[0]])}):\n" + errs[failed[0]].read()[-4000:])
    return _exit_status(codes[failed[0]])
