"""Baselines ProVer is compared against, as `--method` choices: grpo-matched, gigpo, spo-chain,
spo-tree, criticsearch. Each is a `credit(groups, adv, run) -> dict` like `prover.credit`:
`adv[g][i][t]` holds GRPO's per-turn advantages (with the invalid-format penalty) and is changed in
place; the returned dict holds this step's metrics, namespaced by method.

    python train.py --env alfworld --method gigpo          # or grpo-matched | spo-chain | spo-tree | criticsearch

Notation: a group is the G trajectories of one task; trajectory i has turns t = 0..T_i−1 and binary
outcome R_i = success (or WebShop's score with --reward score; rollout.outcome); `pen_t` = invalid_penalty · 1[turn t lacked <action> tags], or inadmissible_penalty if its action
was not admissible (grpo.turn_penalty, dev. 2).
The formulas and their sources are in shared/reference/baselines.md; what is ours is marked OURS.

grpo-matched — GRPO at ProVer's budget (ProVer paper's "budget-matched GRPO").
    Extra rollouts from the tasks' start states join their groups (G grows), then GRPO advantages
    are recomputed. Budget per update: `matched_tokens` generated tokens if set, else
    `matched_extra` × this update's rollout tokens; converted to whole episodes with this update's
    mean tokens per episode, spread round-robin over the groups. OURS: the default 0.4 (about
    40%) is chosen to match ProVer's own overhead, (tokens/verify + tokens/judge) / tokens/rollout,
    with the tiny policy and the built-in judge on ALFWorld (see results/LOG.md, "grpo-matched's
    default budget") — not the paper's +2.4% (real LLMs, whose rollouts are much longer relative
    to the continuations). ProVer's overhead depends on the setting: measure it from the
    `tokens/*` metrics and pass --matched-extra or --matched-tokens.

gigpo — GiGPO (arXiv 2505.10978; verl-agent `gigpo/core_gigpo.py`), for every group:
    A_{i,t} = A^E_i + ω·A^S_{i,t} − pen_t
    A^E_i   = (R_i − mean_g R) / F             episode advantage (grpo.group_advantages: 0 if G = 1)
    R_{i,t} = γ^{T_i−1−t} · R_i                discounted step return, terminal-only reward, γ = 0.95
    A^S_{i,t} = (R_{i,t} − mean_{S(i,t)} R) / F   S(i,t) = anchor-state group: all turns of all
                                               trajectories of the group whose observation equals
                                               turn.obs (exact; or greedy difflib ratio ≥ threshold
                                               against each cluster's first member); singleton → 0
    F = 1 ("mean_norm", the repo's default) or std + 1e-6 ("mean_std_norm", unbiased std).
    OURS: the invalid penalty is each turn's own adjustment on the final advantage (as in grpo.py),
    not folded into the step returns, so with no repeated states GiGPO reduces exactly to GRPO.

spo-chain — SPO-chain (arXiv 2505.23564; AIFrameResearch/SPO), agent adaptation (OURS, as the ProVer
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

criticsearch — CriticSearch (arXiv 2511.12159): for each eligible group the judge
    (`run.judge.critique(traj, gold=None, group=group)`, the same backends as ProVer's judge)
    labels every turn of every trajectory with privileged information (full trajectory + outcome),
    c_{i,t} ∈ {+1, 0, −1};  Â = (c − mean)/(std + 1e-6) over all labelled turns of the group;
    A_{i,t} += α·Â_{i,t}, α = 0.25. No verification. VERIFIED from the paper's abstract: a frozen
    critic, per-turn retrospective labels with privileged information, a hybrid advantage with
    GRPO, no extra rollouts. RECONSTRUCTION (OURS / second-hand): the label format, the group-wise
    normalisation, α = 0.25 (a third-party note), labelling only ProVer-eligible groups (ProVer's
    description of its comparison), and a dropped critique (parse failure) → its turns neutral
    (Â = 0, left out of the normalisation statistics). No gold answer exists for ALFWorld.

Costs: continuations run through `rollout.run_episodes(purpose="verify")`, so their tokens and env
steps land in `tokens/verify` / `env_steps/verify` exactly like ProVer's; grpo-matched's extra
episodes are rollouts (`tokens/rollout`); critic tokens go to `tokens/judge` (and
`tokens/judge_prompt`; estimated for the offline judges, see `critique_tokens`).
Each method batches all of a step's continuations into one `run_episodes` call per tree level.
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from methods import critic
import grpo
import judge
from infra import rundir
from prover import eligible
from rollout import Trajectory, continue_from, make_trajectories, outcome, run_episodes, start_state

EPS = 1e-6


def _seed(run, salt: int, groups) -> int:
    """Deterministic per (seed, step, method, the groups' global ids) — ints only (str hashes vary
    per process). The group ids make data-parallel ranks, which hold different groups, draw
    different samples (with the step alone every rank would reuse one random stream)."""
    return hash((run.cfg.seed, run.step, salt, *(grp[0].group_id for grp in groups))) & 0x7FFFFFFF


def _penalised(x: float, turn, cfg) -> float:
    return x - grpo.turn_penalty(turn, cfg.invalid_penalty, cfg.inadmissible_penalty)


# ---------------------------------------------------------------------------------------------
# grpo-matched
# ---------------------------------------------------------------------------------------------
def matched_counts(n_groups: int, n_traj: int, rollout_tokens: int, extra: float, matched_tokens: int = 0) -> list[int]:
    """Extra episodes per group. Budget = matched_tokens, or extra × rollout_tokens; one episode
    costs rollout_tokens / n_traj on average; the count is rounded and dealt round-robin."""
    if n_groups == 0 or n_traj == 0 or rollout_tokens <= 0:
        return [0] * n_groups
    budget = matched_tokens if matched_tokens > 0 else extra * rollout_tokens
    n = int(round(budget / (rollout_tokens / n_traj)))
    return [n // n_groups + (k < n % n_groups) for k in range(n_groups)]


def grpo_matched(groups, adv, run) -> dict:
    cfg = run.cfg
    tok = sum(len(tn.action_ids) for grp in groups for tr in grp for tn in tr.turns)
    counts = matched_counts(len(groups), sum(len(g) for g in groups), tok, cfg.matched_extra, cfg.matched_tokens)
    envs = run.envs(sum(counts))
    starts, k = [], 0
    for grp, c in zip(groups, counts):
        for _ in range(c):
            starts.append(start_state(envs[k], grp[0].task))
            k += 1
    if starts:   # one batched call; they are rollouts (training data), so counted as such
        turns, finals = run_episodes(run.agent, envs[:k], starts, cfg.temperature, _seed(run, 1, groups), purpose="rollout")
        k = 0
        for grp, c in zip(groups, counts):
            base = len(grp)
            for tr in make_trajectories(turns[k:k + c], finals[k:k + c], grp[0].group_id, grp[0].task,
                                        reward=run.agent.reward):
                tr.traj_id += base
                grp.append(tr)
            k += c
    adv[:] = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    return {"matched/extra_episodes": sum(counts), "matched/group_size_mean": sum(len(g) for g in groups) / max(1, len(groups))}


# ---------------------------------------------------------------------------------------------
# gigpo
# ---------------------------------------------------------------------------------------------
def anchor_clusters(keys: list[str], similarity: float = 0.0) -> list[int]:
    """Cluster id per key: exact equality, or (similarity > 0) greedy clustering — join the first
    cluster whose *first member* has difflib ratio ≥ similarity, else open a new one."""
    ids: list[int] = []
    if similarity <= 0:
        index: dict[str, int] = {}
        for k in keys:
            ids.append(index.setdefault(k, len(index)))
        return ids
    heads: list[str] = []
    for k in keys:
        for c, h in enumerate(heads):
            if h == k or difflib.SequenceMatcher(None, h, k).ratio() >= similarity:
                ids.append(c)
                break
        else:
            heads.append(k)
            ids.append(len(heads) - 1)
    return ids


def _norm(xs: list[float], mode: str) -> list[float]:
    """(x − mean)/F over one step group; a singleton gives 0 (its own mean)."""
    if len(xs) == 1:
        return [0.0]
    m = sum(xs) / len(xs)
    if mode == "mean_norm":
        return [x - m for x in xs]
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return [(x - m) / (sd + EPS) for x in xs]


def gigpo_group(R: list[float], obs: list[list[str]], gamma: float = 0.95, omega: float = 1.0,
                mode: str = "mean_norm", similarity: float = 0.0) -> tuple[list[list[float]], dict]:
    """A^E + ω·A^S per turn for one group (penalty not included). R[i]: outcome; obs[i][t]: anchor."""
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"gigpo mode {mode!r}: use mean_norm | mean_std_norm")
    AE = grpo.group_advantages(torch.tensor([R], dtype=torch.float64), mode == "mean_std_norm")[0].tolist()
    flat = [(i, t) for i in range(len(R)) for t in range(len(obs[i]))]
    ret = {(i, t): gamma ** (len(obs[i]) - 1 - t) * R[i] for i, t in flat}          # Eq. 5, terminal reward
    cid = anchor_clusters([obs[i][t] for i, t in flat], similarity)
    members: dict[int, list[tuple[int, int]]] = {}
    for key, c in zip(flat, cid):
        members.setdefault(c, []).append(key)
    AS: dict[tuple[int, int], float] = {}
    for keys in members.values():
        for key, a in zip(keys, _norm([ret[k] for k in keys], mode)):
            AS[key] = a
    out = [[AE[i] + omega * AS[(i, t)] for t in range(len(obs[i]))] for i in range(len(R))]
    shared = [len(v) for v in members.values() if len(v) > 1]
    return out, {"step_groups": len(shared), "clusters": len(members), "shared_turns": sum(shared),
                 "abs_AS": sum(abs(a) for a in AS.values())}


def gigpo(groups, adv, run) -> dict:
    cfg = run.cfg
    st = {"step_groups": 0, "clusters": 0, "shared_turns": 0, "abs_AS": 0.0}
    n_turns = 0
    for g, grp in enumerate(groups):
        a, s = gigpo_group([tr.R for tr in grp], [[tn.obs for tn in tr.turns] for tr in grp],
                           cfg.gigpo_gamma, cfg.gigpo_omega, cfg.gigpo_mode, cfg.gigpo_similarity)
        for i, tr in enumerate(grp):
            adv[g][i] = [_penalised(a[i][t], tn, cfg) for t, tn in enumerate(tr.turns)]
        for k in st:
            st[k] += s[k]
        n_turns += sum(len(tr.turns) for tr in grp)
    return {"gigpo/step_groups": st["step_groups"], "gigpo/clusters": st["clusters"],
            "gigpo/shared_turn_frac": st["shared_turns"] / max(1, n_turns),
            "gigpo/step_adv_abs_mean": st["abs_AS"] / max(1, n_turns)}


# ---------------------------------------------------------------------------------------------
# spo-chain
# ---------------------------------------------------------------------------------------------
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


def spo_chain(groups, adv, run) -> dict:
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
        finals = continue_from(run.agent, envs, starts, N, cfg.temperature, _seed(run, 2, groups))
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
            adv[g][i] = [_penalised(x, tn, cfg) for x, tn in zip(a, tr.turns)]
    return {"spo/eligible": len(todo), "spo/boundaries": n_bounds, "spo/unique_states": len(starts),
            "spo/continuations": len(starts) * N}


# ---------------------------------------------------------------------------------------------
# spo-tree
# ---------------------------------------------------------------------------------------------
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
                                         _seed(run, 3 + d, groups), purpose="verify", keep_states=True,
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


def spo_tree(groups, adv, run) -> dict:
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
                adv[g][i][t] = _penalised(a, e.traj.turns[t], cfg)
            n_edges += 1
            n_zero += a == 0
    return {"spo/eligible": len(todo), "spo/continuations": sum(len(x) for x in extra),
            "spo/edges": n_edges, "spo/zero_edges": n_zero,
            "spo/root_value_mean": sum(tree_value(r) for r in roots) / len(roots) if roots else 0.0}


# ---------------------------------------------------------------------------------------------
# criticsearch
# ---------------------------------------------------------------------------------------------
CRITIC_HEADER = ("# CriticSearch turn labels\n\nEach entry: one eligible group; per trajectory its outcome and, "
                 "per turn, the critic's label (+1/0/−1) and the normalised Â added with weight α "
                 "(--critic-alpha, in config.json). No verification.\n\n")


def critic_advantages(labels: list[list[float]], ok: list[bool]) -> list[list[float]]:
    """Â over all turns of the group's trajectories whose critique parsed (`ok`); others → 0.
    Unbiased std; fewer than two labelled turns, or all equal, → 0."""
    xs = [c for l, o in zip(labels, ok) if o for c in l]
    if len(xs) < 2:
        return [[0.0] * len(l) for l in labels]
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return [[(c - m) / (sd + EPS) if o else 0.0 for c in l] for l, o in zip(labels, ok)]


def criticsearch(groups, adv, run) -> dict:
    cfg, counter = run.cfg, run.agent.counter
    st = {"eligible": 0, "critiques": 0, "dropped": 0, "labels_pos": 0, "labels_neg": 0, "turns": 0}
    report = []
    for g, grp in enumerate(groups):
        if not eligible(grp, cfg.min_success, cfg.max_success):
            continue
        st["eligible"] += 1
        res = [run.judge.critique(tr, gold=None, group=grp) for tr in grp]
        for tr, r in zip(grp, res):
            pt, ct = critique_tokens(tr, r)
            counter["tokens/judge"] += ct
            counter["tokens/judge_prompt"] += pt
        ok = [r.status == "valid" for r in res]
        labels = [list(r.labels) for r in res]
        A = critic_advantages(labels, ok)
        for i, tr in enumerate(grp):
            for t in range(len(tr.turns)):
                adv[g][i][t] += cfg.critic_alpha * A[i][t]
        st["critiques"] += len(res)
        st["dropped"] += len(res) - sum(ok)
        st["labels_pos"] += sum(c > 0 for l, o in zip(labels, ok) if o for c in l)
        st["labels_neg"] += sum(c < 0 for l, o in zip(labels, ok) if o for c in l)
        st["turns"] += sum(len(l) for l in labels)
        report.append(critic_report(run.step, grp, res, A))
    if report:
        rundir.append_segments(run.out, CRITIC_HEADER, ["\n".join(report)])
    return {f"critic/{k}": v for k, v in st.items()}


def critique_tokens(tr: Trajectory, r) -> tuple[int, int]:
    """(prompt, completion) tokens of one critique. The offline stand-ins (builtin, random) call
    no LLM and report 0; like BuiltinJudge.propose for ProVer, we then charge what an LLM critic
    would read and write, by judge.estimate_tokens: its system + user prompt, and a JSON list
    with one label per turn."""
    if r.prompt_tokens or r.completion_tokens:
        return r.prompt_tokens, r.completion_tokens
    return (judge.estimate_tokens(critic.CRITIC_SYSTEM) + judge.estimate_tokens(critic.critic_prompt(tr, None)),
            judge.estimate_tokens(json.dumps([int(c) for c in r.labels])))


def critic_report(step, grp, res, A) -> str:
    tr0 = grp[0]
    lines = [f"## CriticSearch · step {step} · group {tr0.group_id} · task {tr0.task} ({tr0.task_type}) · "
             f"{int(sum(t.success for t in grp))}/{len(grp)} successes\n\nTask: {tr0.task_text}\n"]
    for tr, r, a in zip(grp, res, A):
        head = f"- traj {tr.traj_id} ({'success' if tr.won else 'failure'}, {len(tr.turns)} turns)"
        if r.status != "valid":
            lines.append(f"{head}: critique dropped ({r.reason}); turns neutral")
            continue
        cells = " ".join(f"{t}:`{tn.action[:40]}`{int(c):+d}({x:+.2f})"
                         for t, (tn, c, x) in enumerate(zip(tr.turns, r.labels, a)))
        lines.append(f"{head}: {cells}")
    return "\n".join(lines) + "\n"


METHODS: dict[str, Callable] = {
    "grpo-matched": grpo_matched,
    "gigpo": gigpo,
    "spo-chain": spo_chain,
    "spo-tree": spo_tree,
    "criticsearch": criticsearch,
}
