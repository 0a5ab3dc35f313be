"""The credit lab's metrics: each method's credit scored against the env's ground truth.

In `keydoor` (sims/keydoor.py) the pivotal decisions are known: the env labels the turn that took
the key ("key"), the one that took the trap ("trap") and the `go forward` that left the key behind
("nokey", the failures' decisive mistake) in `info["pivotal"]`, which the rollout keeps in
`Turn.truth`, never shown to the policy or the judge. From it, per update (measured on the policy
that sampled the update's rollouts, before its gradient step; every key in full:
docs/credit_lab.md, "The lab's metrics"):

    lab/p_key_held        the headline speed measure: P(the agent holds the key when it leaves the
                          pivot room), averaged over P fixed pivot-room states, computed exactly by
                          lab/oracle.py's DP at the rollout temperature; lab/p_key_bound: its
                          pruning error bound
    lab/q_key             the policy's exact probability of the pivotal response *as the first
                          action* in the room, from its log-probs, over the same P states:
                              q = mean_p Π_j π(y_j | prompt_p, y_<j),  y = "<action>take key</action>"
    lab/judge_hit         share of the judge's proposals whose segment [ℓ, r] contains a "key" turn
                          of the examined success (ProVer); lab/judge_key_present: share whose
                          examined success took the key at all; lab/proposals: their number
    lab/credit_precision  share of the method's per-turn credit mass on pivotal turns (all three
                          labels):
                              Σ_pivotal |c_t|·n_t / Σ_all |c_t|·n_t,   n_t = the turn's action tokens
                          c_t = A_final − A_GRPO for methods that add to GRPO, A_final for methods
                          that replace it (the method's `credit_kind`); GRPO: no value
    lab/credit_key        mean c_t over "key" turns (its sign says which way the key is pushed);
    lab/credit_trap       the same over "trap" turns (a good method pushes these down)
    lab/credit_nokey      the same over "nokey" turns (a good method pushes these down too)
    lab/judge_hit_fail    lab/judge_hit over the proposals of groups where a failure left the key
                          behind: did the judge name the decision those failures got wrong?

Leaves out: envs without ground truth (every lab/* key is absent there).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo import Row, collate, token_logprobs
from lab import oracle
from methods import METHODS
from rollout import AgentState

PROBE_TASKS = 32


@dataclass
class Probe:
    prompts: list[list[int]]          # P prompt ids at pivot-room states
    response: list[int]               # ids of the pivotal response, up to its closing tag
    pad_id: int
    temperature: float = 1.0          # the rollout temperature: q is the probability rollouts sample with
    states: list = None               # the P AgentStates (with env snapshots) behind the prompts
    env_kw: dict = None               # the keydoor options (for lab/oracle.py's DP)
    agent: object = None              # the rollout Agent (prompts, tokenizer)


def probe_states(spec, env_kw: dict, seed: int, n: int = PROBE_TASKS) -> list[AgentState]:
    """States at the pivot room of `n` held-out tasks, reached by the env's walk action (the
    prompt history is that walk)."""
    walk, pivot = spec.extra["walk_action"], spec.extra["pivot_action"]
    env = spec.make(split=spec.splits[1], seed=seed, **env_kw)
    out = []
    for task in range(min(n, spec.num_tasks(spec.splits[1]) or n)):
        obs, info = env.reset(task)
        hist: tuple = ()
        while pivot not in info["admissible"]:
            nxt, _, done, info = env.step(walk)
            hist, obs = hist + ((obs, walk),), nxt
            if done:
                raise ValueError(f"{spec.name}: walking never reaches the pivot action")
        out.append(AgentState(env.snapshot(), obs, info, hist, len(hist)))
    return out


def make_probe(agent, spec, env_kw: dict, seed: int, temperature: float = 1.0) -> Probe | None:
    """The fixed prompts for lab/q_key, or None for envs without a known pivotal action."""
    if "pivot_action" not in spec.extra:
        return None
    states = probe_states(spec, env_kw, seed)
    prompts = agent.prompts_ids(states)
    tok = agent.tok
    response = tok(spec.response(spec.extra["pivot_action"]), add_special_tokens=False)["input_ids"]
    return Probe(prompts, response, tok.pad_token_id, temperature, states, dict(env_kw), agent)


@torch.no_grad()
def q_key(model, probe: Probe) -> float:
    """mean over the probe prompts of π(response | prompt) (the product of its token probabilities)."""
    # the response ends at its closing tag: the env acts on the first <action>…</action>, so what
    # follows does not matter; only the canonical tokenisation counts (another spelling does not)
    rows = [Row(p, probe.response, [0.0] * len(probe.response), 0.0) for p in probe.prompts]
    ids, attn, mask, _, _ = collate(rows, probe.pad_id)                       # (P, T), (P, T), (P, T-1)
    lp = token_logprobs(model, ids, attn, mask, probe.temperature)      # (P, T-1), zero off the response
    return float(lp.sum(-1).exp().mean())


def p_key_held(model, probe: Probe) -> tuple[float, float]:
    """(mean over the probe states of P(key held on leaving the pivot room), the DP's error bound)."""
    orc = oracle.Oracle(probe.env_kw, oracle.ModelPolicy(model, probe.agent, probe.temperature),
                        history_len=probe.agent.history_len)
    v = orc.values(probe.states, "key_held")
    return sum(v) / len(v), orc.max_bound(probe.states, "key_held")


LABELS = ("key", "trap", "nokey")


def credit_sums(groups, adv_grpo, adv_final, kind: str | None) -> dict:
    """Token-weighted |credit| on pivotal turns and in all, and the signed credit on key / trap / nokey
    turns, over the groups whose advantages the method changed."""
    s = {"on": 0.0, "total": 0.0, **{f"{x}_{y}": 0 for x in LABELS for y in ("sum", "n")}}
    if kind is None:
        return s
    for g in range(min(len(groups), len(adv_grpo))):          # groups a method appended are not credit
        # only the groups the method touched, for every method alike: a "final" method (SPO) leaves
        # most groups at GRPO's advantages, and counting those as its credit measured GRPO's
        if adv_final[g] == adv_grpo[g]:
            continue
        for i, tr in enumerate(groups[g]):
            for t, tn in enumerate(tr.turns):
                c = adv_final[g][i][t] - (adv_grpo[g][i][t] if kind == "added" else 0.0)
                mass = abs(c) * len(tn.action_ids)
                s["total"] += mass
                if tn.truth:
                    s["on"] += mass
                    s[tn.truth + "_sum"] += c
                    s[tn.truth + "_n"] += 1
    return s


def judge_sums(groups, proposals) -> dict:
    """Hits of the judge's proposals (g, sid, start, end, ...) on the examined success's key turn."""
    hits = present = fail_props = fail_hits = hit_cred = miss_cred = 0
    for g, sid, start, end, _delta, applied in proposals:
        turns = groups[g][sid].turns
        key = [t for t, tn in enumerate(turns) if tn.truth == "key"]
        present += bool(key)
        hit = any(start <= t <= end for t in key)
        hits += hit
        hit_cred += hit and applied            # verification's discrimination: credited given pivotal ...
        miss_cred += (not hit) and applied     # ... and given not pivotal
        if any(not tr.won and any(tn.truth == "nokey" for tn in tr.turns) for tr in groups[g]):
            fail_props += 1
            fail_hits += hit
    return {"proposals": len(proposals), "hits": hits, "present": present, "fail_props": fail_props, "fail_hits": fail_hits,
            "hit_cred": hit_cred, "miss_cred": miss_cred}


def step_metrics(probe: Probe | None, model, groups, adv_grpo, adv_final, proposals, method: str) -> dict:
    """This rank's raw sums for one update ({} outside the lab); `merge` turns ranks' sums into lab/*."""
    if probe is None:
        return {}
    pk, bound = p_key_held(model, probe)
    kind = METHODS[method].credit_kind or None     # how the method's credit relates to GRPO's advantages
    return {"q_key": q_key(model, probe), "p_key_held": pk, "p_key_bound": bound, **credit_sums(groups, adv_grpo, adv_final, kind),
            **judge_sums(groups, proposals), "shaped": kind is not None}


def merge(parts: list[dict]) -> dict:
    """lab/* from every rank's sums."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    same = ("q_key", "p_key_held", "p_key_bound", "shaped")     # the same on every rank: the same model
    tot = {k: sum(p.get(k, 0) for p in parts) for k in parts[0] if k not in same}
    out = {"lab/q_key": parts[0]["q_key"]}
    if "p_key_held" in parts[0]:
        out["lab/p_key_held"], out["lab/p_key_bound"] = parts[0]["p_key_held"], parts[0]["p_key_bound"]
    if parts[0]["shaped"] and tot["total"] > 0:
        out["lab/credit_precision"] = tot["on"] / tot["total"]
    if tot["key_n"] and parts[0]["shaped"]:
        out["lab/credit_key"] = tot["key_sum"] / tot["key_n"]
    for x in ("trap", "nokey"):
        if tot.get(f"{x}_n") and parts[0]["shaped"]:
            out[f"lab/credit_{x}"] = tot[f"{x}_sum"] / tot[f"{x}_n"]
    if tot["proposals"]:
        out["lab/judge_hit"] = tot["hits"] / tot["proposals"]
        if tot["hits"]:
            out["lab/credited_pivotal"] = tot["hit_cred"] / tot["hits"]          # P(credited | segment holds the key turn)
        if tot["proposals"] > tot["hits"]:
            out["lab/credited_other"] = tot["miss_cred"] / (tot["proposals"] - tot["hits"])   # P(credited | it does not)
        out["lab/judge_key_present"] = tot["present"] / tot["proposals"]
        out["lab/proposals"] = tot["proposals"]
    if tot.get("fail_props"):
        out["lab/judge_hit_fail"] = tot["fail_hits"] / tot["fail_props"]
    return out


class LabHook:
    """The credit lab's one callback into the training loop (envs with a known pivotal action,
    i.e. keydoor): `make_hook` returns None elsewhere and the loop skips it."""

    def __init__(self, probe: Probe, env_kw: dict, method: str):
        self.probe, self.env_kw, self.method = probe, env_kw, method

    def after_credit(self, model, groups, adv_grpo, adv_final, proposals) -> dict:
        """This rank's raw lab sums for the update (before its gradient step)."""
        return step_metrics(self.probe, model, groups, adv_grpo, adv_final, proposals, self.method)

    def expected_reward(self, traj) -> float:
        """E[R | the episode's decisions] (the door's draw removed), for eval/expected_success."""
        return oracle.expected_reward(traj, self.env_kw)


def make_hook(agent, spec, env_kw: dict, seed: int, temperature: float, method: str) -> LabHook | None:
    probe = make_probe(agent, spec, env_kw, seed, temperature)
    return None if probe is None else LabHook(probe, env_kw, method)
