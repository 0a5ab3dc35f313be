"""What the credit step saw and did, one compact JSON line per update, and the optional external
loggers (`--log tensorboard,wandb`).

What it implements: `<out>/records.jsonl`, one line per policy update (step ≥ 1), written by
train.py on rank 0 after the credit step, before the metrics row and the checkpoint of that
update. For every method it holds up to MAX_GROUPS rollout groups of the update (all ranks' groups
compete: credited first, then judged, dropped, eligible, mixed, uniform; `group_entries`), each
with its task, G, successes, ProVer-eligibility, a status (`group_status`), per trajectory the
outcome, per turn the GRPO advantage `A` and the final one `F` after the method's credit,
validity, the env's ground-truth label and, for up to TEXT_TURNS turns, the text; for ProVer the
judge's proposal and its verification (`judge_entry`); and the update's method stats (the metrics
row's prover/*, gigpo/*, spo/*, critic/*, matched/*, credit/*, lab/* keys). What GiGPO, SPO and
CriticSearch did per turn is read off `F − A`.

Line format (keys are short on purpose):
    {"v": 1, "step": s, "method": m, "groups_total": n, "stats": {...},
     "groups": [{"gid", "task", "type", "text", "G", "succ", "eligible", "status", "reason",
                 "changed", "trajs_total", "judge": {...} | null,
                 "trajs": [{"i", "R", "won", "s0", "n", "A": [...] | null, "F": [...], "ok": "vvx",
                            "truth": {"t": "key"}, "txt": [[t, action, obs, raw], ...]}]}]}
    `s0`: the first turn's step in its episode (> 0 for SPO-tree branches appended to the group);
    `A` is null for trajectories a method appended (they have no GRPO advantage).

Size bound: at most MAX_GROUPS groups × MAX_TRAJ trajectories × MAX_TURNS turns of numbers, text
for TEXT_TURNS turns (+ a segment's ≤ 4) with strings cut to CAP bytes of JSON (escapes counted);
the worst case is `worst_case_bytes()` ≈ 0.2 MB, and no line exceeds MAX_RECORD_BYTES = 256 KiB
(groups are dropped from the end until it fits, counted in "trimmed").

Crash safety: a line is appended with one write call (infra.rundir.append_jsonl); a line cut by a
kill is skipped on reading, and `--resume` drops the lines past the checkpoint like metrics.jsonl
(infra.rundir.start_files).

Left out: prompts and token ids (rebuilt from the env), the judge's transcript (segments.md has its
reading), turns past MAX_TURNS, the text of most turns of long trajectories (their numbers are
kept), CriticSearch's raw labels and SPO's values (visible as F − A).
"""
from __future__ import annotations

import json
import os

import prover

VERSION = 1
MAX_GROUPS = 4                 # N: groups kept per update
MAX_TRAJ = 12                  # trajectories kept per group (G = 8 by default; grpo-matched / spo-tree add more)
MAX_TURNS = 50                 # turns with numbers per trajectory (ALFWorld's step limit)
TEXT_HEAD, TEXT_TAIL = 8, 4    # turns with text: the first 8 and the last 4 (+ a judged segment)
TEXT_TURNS = TEXT_HEAD + TEXT_TAIL
SEG_MAX = 4                    # ProVer's segment length limit (judge.py): its turns always keep text
CAP = {"action": 60, "obs": 100, "raw": 60, "task": 200, "mode": 160, "why": 400, "reason": 160,
       "stat": 40}             # JSON bytes per string field
MAX_STATS = 60                 # method stats kept per update
MAX_MATCHED, MAX_NEG = 16, 4   # ProVer --credit-scope matched runs / --negative-credit alternatives kept per group
MAX_RECORD_BYTES = 256 * 1024  # hard limit per line (enforced in `make_record`)
# Measured line sizes: keydoor (4 rooms, G = 8) ≈ 16 KB per update; ALFWorld groups of eight 50-turn
# trajectories with every string at its cap ≈ 94 KB (≤ 19 MB for 200 updates).
STAT_PREFIXES = ("prover/", "gigpo/", "spo/", "critic/", "matched/", "credit/", "lab/")
# A group's status (`group_status`), in the order groups are kept (`group_entries`: then groups the
# method changed before the others, ties by global group id):
#   credited      ProVer: Δ̂ > margin, credit applied; other methods: at least one turn's final
#                 advantage differs from its GRPO advantage
#   not credited  ProVer: judged and verified, Δ̂ ≤ margin
#   dropped       ProVer: the judge's proposal was dropped (`reason` says why)
#   eligible      eligible (1..3 successes: ProVer's rule, also SPO's and CriticSearch's),
#                 advantages unchanged
#   mixed         outcomes differ but not eligible (a GRPO signal only)
#   uniform       every outcome equal (GRPO advantage 0)
STATUS_ORDER = ["credited", "not credited", "dropped", "eligible", "mixed", "uniform"]


# ---------------------------------------------------------------------------------------------
# Small helpers: bounded strings and numbers
# ---------------------------------------------------------------------------------------------
def clip(s, n: int) -> str:
    """`s` cut so that its JSON encoding (ensure_ascii, without quotes) is at most n bytes; a cut
    string ends with "…" (6 bytes escaped, counted)."""
    s = "" if s is None else str(s)
    enc = json.dumps(s)[1:-1]
    if len(enc) <= n:
        return s
    out, used, budget = [], 0, n - 6            # room for "\u2026"
    for ch in s:
        c = len(json.dumps(ch)) - 2
        if used + c > budget:
            break
        out.append(ch)
        used += c
    return "".join(out) + "…"


def num(x) -> float | None:
    """A finite float rounded to 4 decimals and clamped to ±1e6 (bounded JSON width); None else."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    if x != x or x in (float("inf"), float("-inf")):
        return None
    return round(max(-1e6, min(1e6, x)), 4)


def _ok_char(tn) -> str:
    # a turn's validity: v = well-formed and admissible, x = no <action> tags, n = well-formed but
    # not admissible
    if not tn.valid:
        return "x"
    return "n" if tn.admissible and tn.action not in tn.admissible else "v"


# ---------------------------------------------------------------------------------------------
# One group → a bounded entry (on each rank)
# ---------------------------------------------------------------------------------------------
def traj_entry(tr, a_grpo, a_final, seg: tuple[int, int] | None = None) -> dict:
    """One trajectory: numbers for its first MAX_TURNS turns, text for TEXT_HEAD + TEXT_TAIL of them
    (all of a judged segment's turns too)."""
    n = min(len(tr.turns), MAX_TURNS)
    text_t = set(range(min(n, TEXT_HEAD))) | set(range(max(0, n - TEXT_TAIL), n))
    if seg is not None:
        text_t |= {t for t in range(seg[0], seg[1] + 1) if t < n}
    txt = []
    for t in sorted(text_t):
        tn = tr.turns[t]
        # [turn, the action, the observation it got (truncated), the raw output of a malformed turn]
        txt.append([t, clip(tn.action, CAP["action"]), clip(tn.next_obs, CAP["obs"]),
                    "" if tn.valid else clip(tn.text, CAP["raw"])])
    return {"i": tr.traj_id, "R": num(tr.R), "won": bool(tr.won), "s0": int(tr.start_step), "n": len(tr.turns),
            "A": None if a_grpo is None else [num(x) for x in a_grpo[:n]],
            "F": [num(x) for x in a_final[:n]],
            "ok": "".join(_ok_char(tn) for tn in tr.turns[:n]),
            # the env's ground-truth label (keydoor's "key"/"trap"/"nokey"), never shown to policy or judge
            "truth": {str(t): clip(tn.truth, 8) for t, tn in enumerate(tr.turns[:n]) if tn.truth},
            "txt": txt}


def judge_entry(r: dict) -> dict:
    """ProVer's per-group record (prover.credit fills `run.records`), bounded."""
    # the examined success (sid, traj), the proposal (failure mode, rationale, segment ℓ..r, validation
    # status, repairs, tool calls count) or the drop reason, Δ̂ ± SE, K, and the outcomes of the K
    # continuations from s_pre and from s_post
    out = {"sid": r.get("sid"), "traj": r.get("traj"), "status": clip(r.get("status"), 16),
           "reason": clip(r.get("reason"), CAP["reason"]) if r.get("reason") else None,
           "repairs": r.get("repairs", 0), "tools": r.get("tool_calls", 0)}
    if r.get("start") is not None:
        out.update({"start": r["start"], "end": r["end"], "mode": clip(r.get("failure_mode"), CAP["mode"]),
                    "why": clip(r.get("rationale"), CAP["why"]),
                    "delta": num(r.get("delta")), "se": num(r.get("se")), "sr_pre": num(r.get("sr_pre")),
                    "sr_post": num(r.get("sr_post")), "k": r.get("k"), "applied": bool(r.get("applied")),
                    # the continuations' outcomes (K = --verify-k each; capped at 64 for the bound)
                    "pre": [num(x) for x in (r.get("pre") or [])[:64]],
                    "post": [num(x) for x in (r.get("post") or [])[:64]]})
    # on every verified record: the bonus actually added (λ·Δ̂ when applied, else 0; shrink: not
    # λ·Δ̂), the credit test, CRN (paired; `se_ind` the unpaired SE) and the adaptive-K rounds (1 on
    # the paper's path); only with an option beyond the paper (methods/prover_options.py): the
    # judge's success-choice fallback (`choice`), up to MAX_MATCHED matched runs [traj, turn] and up
    # to MAX_NEG negative-credit alternatives
    if r.get("choice"):
        out["choice"] = clip(r["choice"], CAP["reason"])
    if "bonus" in r:
        out.update({"bonus": num(r["bonus"]), "test": clip(r.get("test"), 16), "paired": bool(r.get("paired")),
                    "se_ind": num(r.get("se_unpaired")), "rounds": r.get("rounds")})
    if "matched" in r:
        out["matched"] = [[int(i), int(t)] for i, t in r["matched"][:MAX_MATCHED]]
    if "neg" in r:
        out["neg"] = [{"a": clip(x.get("action"), CAP["action"]), "occ": [[int(i), int(t)] for i, t in x.get("occ", [])[:8]],
                       "delta": num(x.get("delta")), "se": num(x.get("se")), "applied": bool(x.get("applied")),
                       "pen": num(x.get("penalty"))} for x in r["neg"][:MAX_NEG]]
    return out


def group_status(group, a_grpo, a_final, judged: dict | None, elig: bool) -> tuple[str, int]:
    """(status, turns whose final advantage differs from GRPO's) — the statuses: see STATUS_ORDER."""
    changed = 0
    for i, tr in enumerate(group):
        base = a_grpo[i] if a_grpo is not None and i < len(a_grpo) else None
        for t in range(len(tr.turns)):
            if base is None or abs(a_final[i][t] - base[t]) > 1e-9:
                changed += 1
    if judged is not None:
        if judged.get("start") is None:
            return "dropped", changed
        return ("credited" if judged.get("applied") else "not credited"), changed
    if changed:
        return "credited", changed
    if elig:
        return "eligible", changed
    return ("mixed" if len({tr.R for tr in group}) > 1 else "uniform"), changed


def group_entries(groups, adv_grpo, adv_final, judged: list[dict], min_success: int, max_success: int) -> list:
    """This rank's best MAX_GROUPS groups as (sort key, entry). `judged`: ProVer's run.records
    (dicts with the local group index "g"); empty for other methods."""
    by_g = {r["g"]: r for r in judged}
    out = []
    for g, group in enumerate(groups):
        if not group:
            continue
        a_g = adv_grpo[g] if g < len(adv_grpo) else None       # groups a method appended have none
        elig = prover.eligible(group, min_success, max_success)
        jr = by_g.get(g)
        status, changed = group_status(group, a_g, adv_final[g], jr, elig)
        gid = group[0].group_id
        key = (STATUS_ORDER.index(status), 0 if changed else 1, gid)
        out.append((key, g, status, changed, elig, jr))
    out.sort(key=lambda x: x[0])
    entries = []
    for key, g, status, changed, elig, jr in out[:MAX_GROUPS]:
        group, a_g = groups[g], (adv_grpo[g] if g < len(adv_grpo) else None)
        seg = (jr["start"], jr["end"]) if jr and jr.get("start") is not None else None
        sid = jr.get("sid") if jr else None
        trajs = []
        for i, tr in enumerate(group[:MAX_TRAJ]):
            base = a_g[i] if a_g is not None and i < len(a_g) else None
            trajs.append(traj_entry(tr, base, adv_final[g][i], seg if i == sid else None))
        t0 = group[0]
        entries.append((key, {
            "gid": t0.group_id, "task": t0.task, "type": clip(t0.task_type, 40), "text": clip(t0.task_text, CAP["task"]),
            "G": len(group), "succ": int(sum(tr.success for tr in group)), "eligible": bool(elig),
            "status": status, "reason": (clip(jr.get("reason"), CAP["reason"]) if jr and jr.get("reason") else None),
            "changed": changed, "trajs_total": len(group), "judge": judge_entry(jr) if jr else None,
            "trajs": trajs}))
    return entries


# ---------------------------------------------------------------------------------------------
# All ranks' entries → the update's line (rank 0)
# ---------------------------------------------------------------------------------------------
def make_record(step: int, method: str, parts: list[list], row: dict | None) -> dict:
    """The update's record from every rank's `group_entries`, bounded by MAX_RECORD_BYTES."""
    allg = sorted((e for p in parts for e in p), key=lambda x: x[0])
    stats = {}
    for k, v in (row or {}).items():
        if k.startswith(STAT_PREFIXES) and len(stats) < MAX_STATS:
            stats[clip(k, CAP["stat"])] = num(v) if isinstance(v, (int, float)) else clip(v, CAP["stat"])
    rec = {"v": VERSION, "step": step, "method": method, "groups_total": sum(len(p) for p in parts),
           "stats": stats, "groups": [e for _, e in allg[:MAX_GROUPS]]}
    # groups_total: groups that competed (each rank sends its best MAX_GROUPS), not the batch size
    while len(dumps(rec)) > MAX_RECORD_BYTES and rec["groups"]:
        rec["groups"].pop()
        rec["trimmed"] = rec.get("trimmed", 0) + 1
    return rec


def dumps(rec: dict) -> str:
    """The line as written (ASCII: a byte per character, so len() is the size in bytes)."""
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def worst_case_bytes() -> int:
    """Size of a record with every count and every string at its cap (the static bound)."""
    from types import SimpleNamespace as NS
    wide = "\u00e9" * 1000                              # 6 bytes a character once escaped
    tn = NS(action=wide, next_obs=wide, text=wide, valid=False, admissible=[], truth="trap")
    tr = NS(traj_id=99, R=-0.123456789, won=False, start_step=99, turns=[tn] * MAX_TURNS, task_type=wide,
            task_text=wide, task=999999, group_id=999999, success=0.0)
    a = [-123456.123456] * MAX_TURNS
    jr = {"g": 0, "sid": 0, "traj": 99, "status": "repaired", "reason": wide, "repairs": 3, "tool_calls": 999,
          "start": MAX_TURNS // 2, "end": MAX_TURNS // 2 + SEG_MAX - 1, "failure_mode": wide, "rationale": wide, "delta": -0.123456,
          "se": 0.123456, "sr_pre": 0.123456, "sr_post": 0.123456, "k": 64, "applied": False,
          "pre": [0.123456] * 64, "post": [0.123456] * 64, "choice": wide, "bonus": -0.123456, "test": wide,
          "paired": True, "se_unpaired": 0.123456, "rounds": 10**6, "matched": [[99, 99]] * 99,
          "neg": [{"action": wide, "occ": [[99, 99]] * 99, "delta": -0.123456, "se": 0.123456, "applied": True,
                   "penalty": -0.123456}] * 99}
    group = [tr] * MAX_TRAJ
    parts = [group_entries([group] * MAX_GROUPS, [[a] * MAX_TRAJ] * MAX_GROUPS, [[a] * MAX_TRAJ] * MAX_GROUPS,
                           [dict(jr, g=g) for g in range(MAX_GROUPS)], 1, 3)]
    row = {f"prover/{'x' * 40}{k}": -123456.123456 for k in range(MAX_STATS)}
    rec = {"v": VERSION, "step": 10**7, "method": "criticsearch", "groups_total": 10**4,
           "stats": make_record(0, "", [], row)["stats"], "groups": [e for _, e in parts[0]], "trimmed": 99}
    return len(dumps(rec))


def read_records(out: str) -> list[dict]:
    """Every complete line of <out>/records.jsonl (a line cut by a kill is skipped)."""
    from infra import rundir
    return rundir.read_metrics(os.path.join(out, "records.jsonl"))


# ---------------------------------------------------------------------------------------------
# Optional loggers: --log tensorboard,wandb (the same keys as metrics.jsonl)
# ---------------------------------------------------------------------------------------------
LOGGERS = {"tensorboard": ("tensorboard", "pip install tensorboard"),
           "wandb": ("wandb", "pip install wandb")}


def parse_loggers(spec: str) -> list[str]:
    """`--log` value → logger names; ValueError (one line) for an unknown name or a missing
    package. Checked at start-up (config.validate): never a silent skip later."""
    import importlib.util
    names = [s.strip() for s in (spec or "").split(",") if s.strip()]
    for n in names:                   # every name first: a typo is said before a missing package
        if n not in LOGGERS:
            raise ValueError(f"--log {spec}: unknown logger {n!r} (choose from {', '.join(LOGGERS)}, comma-separated)")
    for n in names:
        module, how = LOGGERS[n]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"--log {n}: the {module} package is not installed ({how}); it is optional, "
                             "not in requirements.txt")
    return list(dict.fromkeys(names))


class Loggers:
    """Mirrors each metrics row to TensorBoard (`<out>/tensorboard/`) and/or Weights & Biases
    (offline unless $WANDB_MODE says otherwise: `<out>/wandb/`, sync later with `wandb sync`).
    Numeric keys only, named as in metrics.jsonl, at x = the row's step. On --resume TensorBoard
    purges the events past the checkpoint (purge_step); a wandb run is a new run each start."""

    def __init__(self, spec: str, out: str, config: dict, start: int = 0):
        self.names, self.tb, self.wb = parse_loggers(spec), None, None
        if "tensorboard" in self.names:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(log_dir=os.path.join(out, "tensorboard"), purge_step=start + 1 if start else None)
        if "wandb" in self.names:
            os.environ.setdefault("WANDB_MODE", "offline")       # works without network
            import wandb
            self.wb = wandb.init(project="prover", name=os.path.basename(os.path.normpath(out)), dir=out,
                                 config=config, reinit=True)

    def log(self, row: dict) -> None:
        vals = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        step = int(row.get("step", 0))
        if self.tb is not None:
            for k, v in vals.items():
                self.tb.add_scalar(k, v, global_step=step)
            self.tb.flush()                                    # a kill loses nothing logged
        if self.wb is not None:
            self.wb.log(vals, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wb is not None:
            self.wb.finish()
