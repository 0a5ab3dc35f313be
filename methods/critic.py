"""Critic: the CriticSearch critic — per-turn +1/0/−1 labels from an LLM (or the built-in / random
stand-ins), parsed and validated; used by baselines.criticsearch.

What it implements
------------------
CriticSearch's frozen critic (arXiv 2511.12159; reference/baselines.md §4): it reviews one
finished trajectory retrospectively, with privileged information — the full trajectory, its
outcome and, when given, the gold answer — and labels every turn +1 (moved the agent toward the
goal), −1 (a mistake or wasted) or 0 (unknown / neutral). baselines.criticsearch turns the labels
into a hybrid advantage; nothing here knows about advantages.

Procedure (`AgentCritic.critique`, the hf and openai backends)
  1. PROMPT  `CRITIC_SYSTEM` + `critic_prompt(traj, gold)`: the task, the outcome and score, the
             gold answer if any, every turn's observation (cut at `OBS_CHARS`), action and env
             result (cut at `NEXT_OBS_CHARS`), then the instruction to reply with ONLY a JSON list
             of exactly n numbers, one per turn.
  2. ASK     one chat call, no tools, within the wall-time budget `max_seconds` (600 s by
             default; `_ask` also catches a chat function that overran it: reason "timeout").
  3. PARSE   `parse_labels(reply, n)`: the last JSON list in the reply, or the last
             {"labels": [...]} object, counts. A number becomes its sign, a bool ±1, a string one
             of "good"/"+1"/"1" (1), "bad"/"-1" (−1), "neutral"/"0" (0). Anything else — a
             non-label element ("bad_labels"), a list of the wrong length ("wrong_length"), no
             list at all ("not_json", naming any hostile-input rejection) or an endpoint error
             ("http 500", "timeout", ...) — is a drop: n neutral zeros, status "dropped" and the
             reason. All parsing is chat.scan_json's (linear time, bounded depth and size).

Stand-ins (no LLM; they report 0 tokens and baselines.critique_tokens charges the estimate)
  BuiltinCritic  our heuristic (not from any paper): error-producing turns (`turn_error`) are −1;
                 with `group`, a success's turns whose action no failed run takes are +1 and a
                 failure's turns whose action no successful run takes are −1 (`same_action`);
                 everything else is 0.
  RandomCritic   uniform ±1 per turn, from the object's own `rng`.

These are mixins: judge.py's AgentJudge / BuiltinJudge / RandomJudge extend them with ProVer's
`propose`, so `judge.make_judge(name)` gives one object that serves both ProVer and CriticSearch
(the `judge.Judge` protocol). The per-turn primitives both need — `turn_error`, `same_action`,
`cut` and the budgeted chat call `AgentCritic._ask` — live here, as judge.py imports this module
and never the reverse.

Our reconstruction: the prompt wording, the label format and its lenient readings, the caps, the
time budget and the builtin heuristic. Left out: repair turns for an unparseable label list (it
is dropped instead), multi-call or tool-using critics (the LLM critic ignores `group` and judges
one trajectory at a time), caching critiques across iterations, and streaming responses.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz, utils

from infra.chat import ChatFn, ChatReply, rejects_note, scan_json
from rollout import Trajectory, Turn

MAX_SECONDS = 600.0           # ours: wall-time budget of one LLM proposal or critique
OBS_CHARS = 1200              # ours: observation cut in the critic prompt (= judge.FIELD_CHARS)
NEXT_OBS_CHARS = 300          # ours: env-result cut in the critic prompt
NOTHING_HAPPENS = "Nothing happens."
ACTION_MATCH = 100.0          # builtin: same action = equal after rapidfuzz normalisation;
                              # fuzzier would merge "go to cabinet 1" with "go to cabinet 2"


@dataclass
class CritiqueResult:
    labels: list[float]               # one per turn: +1 good, -1 bad, 0 unknown/neutral
    status: str                       # "valid" | "dropped" (neutral labels)
    reason: str | None
    prompt_tokens: int
    completion_tokens: int
    transcript: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Per-turn primitives (shared with judge.py)
# ---------------------------------------------------------------------------------------------
def cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f"…[+{len(s) - n} chars]"


def turn_error(turn: Turn) -> str | None:
    """Why a turn counts as a malformed / error-producing action, or None. The paper excludes
    these from segments even when recovering from them helped."""
    if not turn.valid:
        return "the output had no <action> tags (format-invalid)"
    if turn.admissible and turn.action not in turn.admissible:
        return f"action {turn.action!r} is not in that turn's admissible list"
    if turn.next_obs.strip() == NOTHING_HAPPENS:
        return f"the env answered {NOTHING_HAPPENS!r}"
    return None


def same_action(a: str, b: str) -> bool:
    return fuzz.ratio(utils.default_process(a), utils.default_process(b)) >= ACTION_MATCH


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
# Critics (mixins of judge.py's judges)
# ---------------------------------------------------------------------------------------------
class AgentCritic:
    """An LLM critic (hf / openai): one chat call within `max_seconds` of wall time (None: no
    budget; each chat call still has its own timeout and retries)."""

    def __init__(self, chat: ChatFn, name: str = "agent", max_seconds: float | None = MAX_SECONDS):
        self.chat, self.name, self.max_seconds = chat, name, max_seconds

    def _deadline(self) -> float | None:
        return None if self.max_seconds is None else time.monotonic() + self.max_seconds

    def _ask(self, msgs: list[dict], tools: list[dict] | None, deadline: float | None) -> ChatReply:
        """One chat call under the budget. The clients honour `deadline` themselves; the checks
        here also cover the time spent between calls (tool searches) and any chat function that
        overran it."""
        late = ChatReply(error=f"timeout: the judge call used its max_seconds={self.max_seconds} "
                               "wall-time budget")
        if deadline is not None and time.monotonic() >= deadline:
            return late
        reply = self.chat(msgs, tools, deadline=deadline)
        if deadline is not None and time.monotonic() > deadline and not reply.error:
            late.prompt_tokens, late.completion_tokens = reply.prompt_tokens, reply.completion_tokens
            return late          # it answered, but too late to count: the budget is the bound
        return reply

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
    """Uniform ±1 per turn. `rng` is shared with whatever else the object draws (RandomJudge's
    proposals), so one seed fixes the whole stream."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def critique(self, traj: Trajectory, gold: str | None = None,
                 group: list[Trajectory] | None = None) -> CritiqueResult:
        return CritiqueResult([self.rng.choice((1.0, -1.0)) for _ in traj.turns], "valid", None, 0, 0)
