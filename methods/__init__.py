"""Credit methods beyond the paper's ProVer, and the one registry of every `--method`.

Every method is `credit(groups, adv, run) -> metrics`: adv[g][i][t] holds GRPO's per-turn
advantage of turn t of trajectory i of group g and is changed in place (a method may append
rollouts to a group, as grpo-matched does); `run` is train.Run (config, agent, spare envs, judge).

`METHODS` is the only list of method names: `--help`, config validation, the judge's set-up and
README's method table all read it. A credit function is named as "module:function" and imported
when a run starts, so `train.py --help` needs no torch. A method that is another with some flags
preset is one line below the dict: `METHODS[name] = variant(base, doc, flag=value, ...)`.

    grpo          GRPO alone (the credit step adds nothing)
    prover        prover.py: the paper (methods/prover_options.py when a flag beyond the paper is set)
    prover-plus   methods/prover_options.py
    grpo-matched  methods/grpo_matched.py        gigpo         methods/gigpo.py
    spo-chain     methods/spo.py                 spo-tree      methods/spo.py
    criticsearch  methods/criticsearch.py       vine          methods/vine.py (Monte Carlo credit)
    oracle-rb, oracle-add, oracle, prover-exact, prover-plus-exact   lab/ladder.py (keydoor only)
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Callable


@dataclass(frozen=True)
class Method:
    credit: str | None        # "module:function", None = GRPO's advantages unchanged
    doc: str                  # one line, for --help and README's table
    judge: str = ""           # "judge": ProVer's judge (judge.make_judge) | "critic": CriticSearch's | ""
    lab: bool = False         # needs the env's truth: --env keydoor only (the credit lab)
    segments: str = ""        # "module:HEADER" of the run's segments.md ("" = no such file)
    prefix: str = ""          # the namespace of its own metrics in metrics.jsonl (report.html's columns)
    credit_kind: str = ""     # the lab's credit precision: "added" (A − A^GRPO is the credit) |
                              # "final" (A itself: the method replaces GRPO) | "" (no per-turn credit)
    options: str = ""         # "module:function" run instead of `credit` when a flag beyond the paper
                              # is set (methods/prover_options.py's `beyond_paper(cfg)` decides; credit_fn)
    flags: dict = field(default_factory=dict)   # Config fields it presets where the flag is not given


def variant(base: str, doc: str, **flags) -> Method:
    """A registered method with flags preset: `METHODS["prover-focus"] = variant("prover", "ProVer,
    the success's other turns at half their GRPO advantage", focus=0.5)` is the whole method."""
    return replace(METHODS[base], doc=doc, flags={**METHODS[base].flags, **flags})


PROVER_SEGMENTS = "prover:SEGMENTS_HEADER"
METHODS: dict[str, Method] = {
    "prover": Method("prover:credit",
                     "GRPO + λ·Δ̂ on a judge-proposed, verified segment (the paper; option flags in methods/prover_options.py)",
                     judge="judge", segments=PROVER_SEGMENTS, credit_kind="added", prefix="prover/",
                     options="methods.prover_options:credit"),
    "prover-plus": Method("methods.prover_options:plus_credit",
                          "ProVer beyond the paper: every mixed group eligible, the judge names the success, the bonus "
                          "goes to every rollout that took the segment's actions from the same prompt-visible states",
                          judge="judge", segments=PROVER_SEGMENTS, credit_kind="added", prefix="prover/"),
    "grpo": Method(None, "group-relative trajectory advantage on every action token"),
    "grpo-matched": Method("methods.grpo_matched:credit", "GRPO with extra rollouts (ProVer's token budget)", prefix="matched/"),
    "gigpo": Method("methods.gigpo:credit", "GiGPO: episode advantage + ω × step advantage within groups of turns "
                                            "with the same observation", credit_kind="added", prefix="gigpo/"),
    "spo-chain": Method("methods.spo:chain_credit", "SPO-chain: Monte-Carlo values every k turns from restored "
                                                    "states; A = V(b_j) − V(b_{j−1})", credit_kind="final", prefix="spo/"),
    "spo-tree": Method("methods.spo:tree_credit", "SPO-tree: rollouts branch at fixed depths; every edge gets "
                                                  "V(child) − V(parent)", credit_kind="final", prefix="spo/"),
    "criticsearch": Method("methods.criticsearch:credit", "CriticSearch: a critic labels each turn +1/0/−1 in "
                                                          "hindsight; A += α × normalised label",
                           judge="critic", segments="methods.criticsearch:CRITIC_HEADER", credit_kind="added", prefix="critic/"),
    "vine": Method("methods.vine:credit", "Monte Carlo credit: Â_t = V̂(s_{t+1}) − V̂(s_t) from K continuations per "
                                          "restored state, every turn (the benchmarks' positive control)",
                   credit_kind="final", prefix="vine/"),
    "oracle-rb": Method("lab.ladder:oracle_rb", "GRPO on E[R given the decisions] (the door's draw removed)", lab=True, prefix="oracle/"),
    "oracle-add": Method("lab.ladder:oracle_add", "GRPO + λ·A*, the exact advantage on every turn", lab=True, credit_kind="added", prefix="oracle/"),
    "oracle": Method("lab.ladder:oracle_alone", "the exact advantage A* = Q^π − V^π alone (perfect credit)", lab=True, credit_kind="final", prefix="oracle/"),
    "prover-exact": Method("lab.ladder:prover_exact", "ProVer with the exact ΔV instead of Δ̂", judge="judge",
                           lab=True, segments=PROVER_SEGMENTS, credit_kind="added", prefix="prover/"),
    "prover-plus-exact": Method("lab.ladder:prover_plus_exact", "prover-plus with the exact ΔV instead of Δ̂",
                                judge="judge", lab=True, segments=PROVER_SEGMENTS, credit_kind="added", prefix="prover/"),
}


def _load(ref: str):
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def credit_fn(name: str) -> Callable:
    """The method's credit function, imported now; for a method with `options`, a function that
    runs `options` instead of `credit` when the run's config sets a flag beyond the paper."""
    m = METHODS[name]
    if not m.credit:
        return lambda groups, adv, run: {}
    if not m.options:
        return _load(m.credit)
    paper, options = _load(m.credit), _load(m.options)
    from methods.prover_options import beyond_paper
    return lambda groups, adv, run, **kw: (options if beyond_paper(run.cfg) else paper)(groups, adv, run, **kw)


def segments_header(name: str) -> str | None:
    """The header of the method's segments.md, or None when it writes none."""
    ref = METHODS[name].segments
    return _load(ref) if ref else None


def markdown_table() -> str:
    """README's method table, from the registry (a test holds README to it)."""
    rows = ["| method | credit |", "|---|---|"]
    for k, m in METHODS.items():
        rows.append(f"| `{k}` | {m.doc}" + (" (`--env keydoor` only)" if m.lab else "") + " |")
    return "\n".join(rows)
