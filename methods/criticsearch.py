"""CriticSearch (baseline): a frozen critic labels every turn +1/0/−1 in hindsight; A += α·Â.

For each eligible group (ProVer's regime, 1..3 successes of 8) the critic reviews each trajectory
with privileged information — the whole trajectory, its outcome and, when given, the gold answer —
and labels every turn c_{i,t} ∈ {+1 (moved toward the goal), 0 (unknown), −1 (mistake or wasted)}:
    Â = (c − mean) / (std + 1e-6)  over all labelled turns of the group (unbiased std)
    A_{i,t} ← A_{i,t} + α·Â_{i,t}   (α = --critic-alpha, 0.25)
No verification, no extra rollouts. A critique that does not parse is dropped: its turns are
neutral (Â = 0) and left out of the statistics.

Critics (`make_critic(name)`, the same backend names as the judge):
  hf / openai  `AgentCritic`: one chat call (infra/chat.py) within `max_seconds`; the reply's last
               JSON list (or {"labels": [...]}) counts; numbers become their sign, "good"/"bad"/
               "neutral" ±1/0; a wrong length or non-label is a drop.
  builtin      our heuristic: error-producing turns −1; with the group, a success's turns whose
               action no failure takes +1, a failure's turns whose action no success takes −1.
  random       uniform ±1 per turn.
The offline critics call no LLM; `critique_tokens` charges what an LLM critic would read and write.

From the CriticSearch paper (abstract): a frozen critic, per-turn retrospective labels with
privileged information, a hybrid advantage with GRPO, no extra rollouts. Ours (a
reconstruction): the label format and its lenient readings, the group-wise normalisation, α =
0.25, labelling only ProVer-eligible groups, the prompt and caps. Leaves out: repair turns,
tool-using critics (the LLM critic ignores the group), caching across updates.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from infra import rundir
from infra.chat import MAX_SECONDS, ChatFn, ChatReply, HFChat, OpenAIChat, ask, cut, deadline, estimate_tokens
from infra.jsonscan import rejects_note, scan_json
from judge import same_action
from prover import eligible
from rollout import Trajectory, turn_error

OBS_CHARS = 1200              # ours: observation cut in the critic prompt
NEXT_OBS_CHARS = 300          # ours: env-result cut in the critic prompt
EPS = 1e-6


@dataclass
class CritiqueResult:
    labels: list[float]               # one per turn: +1 good, -1 bad, 0 unknown/neutral
    status: str                       # "valid" | "dropped" (neutral labels)
    reason: str | None
    prompt_tokens: int
    completion_tokens: int
    transcript: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Prompt and label parsing
# ---------------------------------------------------------------------------------------------
CRITIC_SYSTEM = ("You are a critic reviewing an agent's finished episode turn by turn. You know "
                 "the outcome and, when given, the gold answer.")


def critic_prompt(traj: Trajectory, gold: str | None) -> str:
    lines = [f"Task: {traj.task_text}",
             f"Outcome: {'SUCCESS' if traj.won else 'FAILURE'} (score {traj.score:.2f})"]
    if gold is not None:
        lines.append(f"Gold answer: {gold}")
    for t in traj.turns:
        lines.append(f"[turn {t.t}] observation: {cut(t.obs, OBS_CHARS)}\n"
                     f"[turn {t.t}] action: {t.action}\n"
                     f"[turn {t.t}] result: {cut(t.next_obs, NEXT_OBS_CHARS)}")
    lines.append(f"Label every turn: 1 if it moved the agent toward the goal, -1 if it was a "
                 f"mistake or wasted. Reply with ONLY a JSON list of exactly {len(traj.turns)} "
                 f"numbers, one per turn in order, e.g. [1, -1, 1].")
    return "\n".join(lines)


def _label(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else -1.0
    if isinstance(v, (int, float)):
        return float((v > 0) - (v < 0))
    if isinstance(v, str):
        s = v.strip().lower()
        return {"good": 1.0, "+1": 1.0, "1": 1.0, "bad": -1.0, "-1": -1.0, "0": 0.0,
                "neutral": 0.0}.get(s)
    return None


def parse_labels(text: str, n: int) -> tuple[list[float], str | None]:
    """(labels, None) or (n neutral zeros, reason). The last list (or {"labels": [...]}) in the
    reply counts; chat.scan_json bounds the parse (depth, size, numbers, time)."""
    values, rejects = scan_json(text)
    for v in reversed(values):
        if isinstance(v, dict):
            v = v.get("labels")
        if not isinstance(v, list):
            continue
        labels = [_label(x) for x in v]
        if any(x is None for x in labels):
            return [0.0] * n, "bad_labels: labels must be numbers or 'good'/'bad'"
        if len(labels) != n:
            return [0.0] * n, f"wrong_length: {len(labels)} labels for {n} turns"
        return labels, None
    return [0.0] * n, "not_json: no JSON list of labels in the reply" + rejects_note(rejects)


# ---------------------------------------------------------------------------------------------
# Critics
# ---------------------------------------------------------------------------------------------
class AgentCritic:
    """An LLM critic (hf / openai): one chat call within `max_seconds` of wall time (None: no
    budget; each chat call still has its own timeout and retries)."""

    def __init__(self, chat: ChatFn, name: str = "agent", max_seconds: float | None = MAX_SECONDS):
        self.chat, self.name, self.max_seconds = chat, name, max_seconds

    def _deadline(self) -> float | None:
        return deadline(self.max_seconds)

    def _ask(self, msgs: list[dict], tools: list[dict] | None, until: float | None) -> ChatReply:
        return ask(self.chat, msgs, tools, until, self.max_seconds)

    def critique(self, traj: Trajectory, gold: str | None = None,
                 group: list[Trajectory] | None = None) -> CritiqueResult:
        """One call, the critic sees the whole trajectory, its outcome and the gold answer
        (`group` is ignored: the critic judges one trajectory at a time)."""
        msgs = [{"role": "system", "content": CRITIC_SYSTEM},
                {"role": "user", "content": critic_prompt(traj, gold)}]
        reply = self._ask(msgs, None, self._deadline())
        msgs.append({"role": "assistant", "content": reply.content})
        n = len(traj.turns)
        labels, reason = ([0.0] * n, reply.error) if reply.error else parse_labels(reply.content, n)
        return CritiqueResult(labels, "dropped" if reason else "valid", reason,
                              reply.prompt_tokens, reply.completion_tokens, msgs)


class BuiltinCritic:
    """Our heuristic stand-in for an LLM critic (see the module docstring)."""

    def critique(self, traj: Trajectory, gold: str | None = None,
                 group: list[Trajectory] | None = None) -> CritiqueResult:
        """Error-producing turns are -1; with `group`, a success's turns whose action no failed
        run takes are +1 and a failure's turns whose action no successful run takes are -1;
        everything else is 0."""
        others = [o for o in (group or []) if o is not traj and o.won != traj.won]
        other_actions = {t.action for o in others for t in o.turns}
        labels = []
        for t in traj.turns:
            if turn_error(t):
                labels.append(-1.0)
            elif others and not any(same_action(t.action, a) for a in other_actions):
                labels.append(1.0 if traj.won else -1.0)
            else:
                labels.append(0.0)
        return CritiqueResult(labels, "valid", None, 0, 0)


class RandomCritic:
    """Uniform ±1 per turn, from its own seeded `rng`."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def critique(self, traj: Trajectory, gold: str | None = None,
                 group: list[Trajectory] | None = None) -> CritiqueResult:
        return CritiqueResult([self.rng.choice((1.0, -1.0)) for _ in traj.turns], "valid", None, 0, 0)


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


def credit(groups, adv, run) -> dict:
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
    would read and write, by chat.estimate_tokens: its system + user prompt, and a JSON list
    with one label per turn."""
    if r.prompt_tokens or r.completion_tokens:
        return r.prompt_tokens, r.completion_tokens
    return (estimate_tokens(CRITIC_SYSTEM) + estimate_tokens(critic_prompt(tr, None)),
            estimate_tokens(json.dumps([int(c) for c in r.labels])))


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


def _agent(client: Callable[..., ChatFn]) -> Callable[..., AgentCritic]:
    def make(**kw) -> AgentCritic:      # the budget is the critic's; the rest go to the client
        budget = {k: kw.pop(k) for k in ("max_seconds",) if k in kw}
        kw.pop("max_tool_rounds", None), kw.pop("max_repairs", None)
        return AgentCritic(client(**kw), **budget)
    return make


CRITICS: dict[str, Callable[..., Any]] = {
    "builtin": lambda **kw: BuiltinCritic(), "random": lambda seed=0, **kw: RandomCritic(seed),
    "hf": _agent(HFChat), "openai": _agent(OpenAIChat)}


def make_critic(name: str, **kw):
    """builtin | random(seed=) | hf(model=, tokenizer=, ...) | openai(base_url=, model=, timeout=, ...)."""
    if name not in CRITICS:
        raise ValueError(f"unknown critic {name!r}; choose one of {sorted(CRITICS)}")
    return CRITICS[name](**kw)
