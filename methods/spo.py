"""spo-chain — SPO-chain (arXiv 2505.23564; AIFrameResearch/SPO), agent adaptation (OURS, as the ProVer
    authors describe it): boundaries at turns b = k, 2k, ... < T_i (state before that turn) instead
    of low-probability tokens; N current-policy continuations from each restored boundary state;
        V(b_j) = mean outcome of its N continuations,  V(b_0) = mean_g R (the group is a free
        estimate of V(s_0), the paper's V(prompt)),  V(b_end) = R_i
        A_{i,t} = V(b_j) − V(b_{j−1}) − pen_t   for turns t in [b_{j−1}, b_j)
    The segment advantages telescope to R_i − mean_g R, i.e. SPO-chain redistributes GRPO's (no-std)
    advantage over the segments; it *replaces* GRPO's advantage in eligible groups (SPO has no
    GRPO term). Same eligible-group regime as ProVer (`min_success..max_success`); other groups keep
    GRPO. Identical restore states (same task, history and observation) share one set of N
    continuations, as SPO deduplicates identical prefixes. Left out: SPO's probability mask (p ≥ 0.9
    tokens untrained), its global whitening, and its KL form; continuations are not training data.

spo-tree — SPO-tree (same sources), agent adaptation (OURS): the G rollouts are the root's first
    branches; at each depth d in `spo_tree_depths` (turn indices) every branch still running gets
    b − 1 sibling continuations from its restored state before turn d (it keeps its own remainder as
    one child, so prefixes are reused). V(leaf) = R; V(node) = mean of its children's V; every edge
    (a run of consecutive turns between two nodes) gets A = V(child) − V(parent) (SPO's "rloo"),
    minus pen_t per turn. Sibling continuations are training data (in SPO-tree every edge is a
    sample): they are appended to their group as Trajectory records with `start_step` = d and only
    the edge's turns (their prompts already carry the restored history), so train.py's rows include
    them and train/success counts the tree's leaves. Eligible groups only (as ProVer); SPO's replay
    buffer, A = 0 edge dropping, probability mask and whitening are left out.

Notation: a group is the G trajectories of one task; trajectory i has turns t = 0..T_i−1 and binary
outcome R_i = success (or WebShop's score with --reward score; rollout.outcome); `pen_t` = invalid_penalty · 1[turn t lacked <action> tags], or inadmissible_penalty if its action
was not admissible (grpo.turn_penalty, dev. 2).
What is ours, not the source's, is marked OURS.

Costs: continuations run through `rollout.run_episodes(purpose="verify")`, so their tokens and env
steps land in `tokens/verify` / `env_steps/verify` exactly like ProVer's; grpo-matched's extra
episodes are rollouts (`tokens/rollout`); critic tokens go to `tokens/judge` (and
`tokens/judge_prompt`; estimated for the offline judges, see `critique_tokens`).
Each method batches all of a step's continuations into one `run_episodes` call per tree level.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from methods.common import penalised, seed_for
from prover import eligible
from rollout import Trajectory, continue_from, make_trajectories, outcome, run_episodes


def chain_boundaries(T: int, k: int) -> list[int]:
    """Turn indices b (state before turn b) every k turns, strictly inside the trajectory."""
    return list(range(k, T, k)) if k > 0 else []


def chain_advantages(T: int, bounds: list[int], values: list[float], v0: float, R: float) -> list[float]:
    """Per-turn segment advantage: turns in [b_{j−1}, b_j) get V(b_j) − V(b_{j−1}); b_0 = 0 with
    V = v0, and the last segment ends at T with V = R."""
    assert len(bounds) == len(values)
    edges = [0] + list(bounds) + [T]
    vals = [v0] + list(values) + [R]
    out = [0.0] * T
    for j in range(1, len(edges)):
        for t in range(edges[j - 1], edges[j]):
            out[t] = vals[j] - vals[j - 1]
    return out


def _state_key(tr: Trajectory, t: int):
    s = tr.turns[t].state
    return (tr.task, s.step, s.history, s.obs)


def chain_credit(groups, adv, run) -> dict:
    cfg, N = run.cfg, run.cfg.spo_n
    todo = [g for g, grp in enumerate(groups) if eligible(grp, cfg.min_success, cfg.max_success)]
    keys: dict = {}                                   # restore-state key → index into `starts`
    starts = []
    for g in todo:
        for tr in groups[g]:
            for b in chain_boundaries(len(tr.turns), cfg.spo_interval):
                k = _state_key(tr, b)
                if k not in keys:
                    keys[k] = len(starts)
                    starts.append(tr.turns[b].state)
    wins: list[float] = []
    if starts:                                        # one batched call: N per unique boundary
        envs = run.envs(len(starts) * N)
        finals = continue_from(run.agent, envs, starts, N, cfg.temperature, seed_for(run, 2, groups))
        wins = [outcome(f.info, run.agent.reward) for f in finals]
    V = [sum(wins[j * N:(j + 1) * N]) / N for j in range(len(starts))]
    n_bounds = 0
    for g in todo:
        grp = groups[g]
        v0 = sum(tr.R for tr in grp) / len(grp)
        for i, tr in enumerate(grp):
            bs = chain_boundaries(len(tr.turns), cfg.spo_interval)
            n_bounds += len(bs)
            a = chain_advantages(len(tr.turns), bs, [V[keys[_state_key(tr, b)]] for b in bs], v0, tr.R)
            adv[g][i] = [penalised(x, tn, cfg) for x, tn in zip(a, tr.turns)]
    return {"spo/eligible": len(todo), "spo/boundaries": n_bounds, "spo/unique_states": len(starts),
            "spo/continuations": len(starts) * N}


@dataclass
class Node:
    edges: list["Edge"] = field(default_factory=list)


@dataclass
class Edge:
    """A run of consecutive turns: `traj.turns[lo:hi]`, ending in `child` (a node) or a leaf (R)."""
    child: Node | None
    R: float = 0.0
    traj: object = None
    lo: int = 0
    hi: int = 0


def tree_value(node: Node) -> float:
    """V(node) = mean over its children (leaf: R)."""
    vs = [tree_value(e.child) if e.child is not None else e.R for e in node.edges]
    return sum(vs) / len(vs)


def edge_advantages(root: Node) -> list[tuple[Edge, float]]:
    """(edge, V(child) − V(parent)) for every edge of the tree."""
    out: list[tuple[Edge, float]] = []

    def walk(n: Node) -> float:
        vals = [walk(e.child) if e.child is not None else e.R for e in n.edges]
        v = sum(vals) / len(vals)
        out.extend((e, c - v) for e, c in zip(n.edges, vals))
        return v
    walk(root)
    return out


def parse_depths(s: str) -> list[int]:
    d = sorted({int(x) for x in s.replace(" ", "").split(",") if x})
    if any(x <= 0 for x in d):
        raise ValueError(f"spo_tree_depths {s!r}: positive turn indices, e.g. '3,6'")
    return d


def build_tree(groups, todo, run, depths: list[int], b: int) -> tuple[list[Node], list[list[Trajectory]]]:
    """Grow one tree per eligible group, one batched `run_episodes` per depth. Returns the roots
    and, per eligible group, the new sibling continuations (Trajectory, `start_step` = depth)."""
    cfg = run.cfg
    roots = [Node() for _ in todo]
    extra: list[list[Trajectory]] = [[] for _ in todo]
    # frontier: (tree index, parent node, trajectory, turn offset of the branch, its start depth)
    frontier = [(k, roots[k], tr, 0, 0) for k, g in enumerate(todo) for tr in groups[g]]
    for d in depths:
        nxt, req = [], []
        for k, parent, tr, off, a in frontier:
            loc = off + d - a                           # index in tr.turns of the turn at depth d
            if loc < len(tr.turns):                     # still running at depth d: branch here
                node = Node()
                parent.edges.append(Edge(node, traj=tr, lo=off, hi=loc))
                nxt.append((k, node, tr, loc, d))       # its own remainder is one child (prefix reuse)
                req += [(k, node, tr.turns[loc].state)] * (b - 1)
            else:
                parent.edges.append(Edge(None, tr.R, tr, off, len(tr.turns)))
        if req:
            envs = run.envs(len(req))
            turns, finals = run_episodes(run.agent, envs, [s for _, _, s in req], cfg.temperature,
                                         seed_for(run, 3 + d, groups), purpose="verify", keep_states=True,
                                         fresh_env_randomness=True)
            for (k, node, _), ts, f in zip(req, turns, finals):
                grp = groups[todo[k]]
                tr = make_trajectories([ts], [f], grp[0].group_id, grp[0].task, start_step=d,
                                       reward=run.agent.reward)[0]
                extra[k].append(tr)
                nxt.append((k, node, tr, 0, d))
        frontier = nxt
    for k, parent, tr, off, a in frontier:
        parent.edges.append(Edge(None, tr.R, tr, off, len(tr.turns)))
    return roots, extra


def tree_credit(groups, adv, run) -> dict:
    cfg = run.cfg
    todo = [g for g, grp in enumerate(groups) if eligible(grp, cfg.min_success, cfg.max_success)]
    roots, extra = build_tree(groups, todo, run, parse_depths(cfg.spo_tree_depths), cfg.spo_tree_branch)
    n_edges, n_zero = 0, 0
    for k, g in enumerate(todo):
        base = len(groups[g])
        for j, tr in enumerate(extra[k]):
            tr.traj_id = base + j
            groups[g].append(tr)
            adv[g].append([0.0] * len(tr.turns))
        row = {id(tr): i for i, tr in enumerate(groups[g])}
        for e, a in edge_advantages(roots[k]):
            i = row[id(e.traj)]
            for t in range(e.lo, e.hi):
                adv[g][i][t] = penalised(a, e.traj.turns[t], cfg)
            n_edges += 1
            n_zero += a == 0
    return {"spo/eligible": len(todo), "spo/continuations": sum(len(x) for x in extra),
            "spo/edges": n_edges, "spo/zero_edges": n_zero,
            "spo/root_value_mean": sum(tree_value(r) for r in roots) / len(roots) if roots else 0.0}
