"""What the judge sees of one rollout group: its prompt, its two tools, and the answer's schema.

    prompt = build_system_prompt(group, success_id)     # τ* in full, failure previews, tools, schema

    tools = GroupTools(group, success_id)
    tools.call("search_trajectory", '{"query": "take key", "top_k": 5}')   # -> JSON text
    tools.call("get_segment", {"traj_id": 3, "start_turn": 2, "end_turn": 4})

* `search_trajectory(query, top_k, field)`: fuzzy search (rapidfuzz WRatio) over the *failed*
  trajectories' turns (observation + action text, or one of them with `field`), best hit per
  failed trajectory first so one looping run cannot fill the results; returns (traj_id, turn,
  score, snippet) rows.
* `get_segment(traj_id, start_turn, end_turn)`: the turns verbatim (observation, action, answer),
  at most `SPAN_CAP` turns, each field cut at `FIELD_CHARS`.
Arguments come from an LLM: any value of any type is accepted or answered with an error string
(never an exception); raw argument strings over `ARGS_CHARS` are refused before parsing, and every
result is cut at `RESULT_CHARS`. `TOOLS` is the OpenAI-style function schema sent to the judge.
`build_system_prompt`: the task, the instruction (ONE recurring failure mode; the SHORTEST
segment of τ*, ≤ MAX_SEGMENT_TURNS turns, ending before its final turn, no error-producing turn),
τ* verbatim, failure previews (length, first/last actions, final observation), `TOOLS`, and
`OUTPUT_SCHEMA` (success_id only when the judge chooses the success, so the paper's prompt is
unchanged token for token).
What it leaves out: semantic (embedding) search; tools over the successes (the judge sees the
examined success in full in its prompt).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from rapidfuzz import fuzz, process, utils

from infra.chat import cut
from infra.jsonscan import loads
from rollout import Trajectory, turn_error

MAX_SEGMENT_TURNS = 4         # paper: a segment has at most four action turns
TOP_K_CAP = 10                # ours: search hits per call
SPAN_CAP = 8                  # ours: turns per get_segment call
QUERY_CHARS = 500             # ours: longest search query accepted
ARGS_CHARS = 2000             # ours: longest raw tool-argument string accepted
FIELD_CHARS = 1200            # ours: per-field cap inside get_segment results
RESULT_CHARS = 8000           # ours: any tool result is cut here
SNIPPET_CHARS = 200           # ours: search snippet length


TOOLS: list[dict] = [
    {"type": "function", "function": {
        "name": "search_trajectory",
        "description": ("Fuzzy text search (rapidfuzz) over the turns of the FAILED trajectories "
                        "of this group. Returns the best-matching turns as JSON: traj_id, turn, "
                        "score (0-100), action and a snippet. Each failed trajectory's best match "
                        "comes first."),
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": QUERY_CHARS,
                      "description": "text to look for, e.g. an action or part of an observation"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": TOP_K_CAP, "default": 5},
            "field": {"type": "string", "enum": ["all", "action", "obs"], "default": "all",
                      "description": "match against observation+action, the action only, or "
                                     "the observation only"}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "get_segment",
        "description": (f"Return turns start_turn..end_turn (inclusive, at most {SPAN_CAP}) of "
                        "any trajectory of this group verbatim: observation, raw output, action, "
                        "env result, and whether the action was error-producing."),
        "parameters": {"type": "object", "properties": {
            "traj_id": {"type": "integer"},
            "start_turn": {"type": "integer", "minimum": 0},
            "end_turn": {"type": "integer", "minimum": 0}},
            "required": ["traj_id", "start_turn", "end_turn"]}}},
]


def _as_int(v: Any) -> int | None:
    """LLMs write 3, 3.0 or "3"; all mean turn 3. Bools are not turn numbers, and nothing past
    18 digits is one either (a 5,000-digit string would make int() raise)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d{1,18}\s*", v):
        v = int(v)
    return v if isinstance(v, int) and abs(v) < 10 ** 18 else None


class GroupTools:
    """search_trajectory / get_segment over one group. Trajectory ids the judge sees are
    positions in `group` (equal to `Trajectory.traj_id` for groups built by rollout.py).
    Every public method returns a string; bad arguments give an "error: ..." string."""

    def __init__(self, group: list[Trajectory], success_id: int):
        self.group, self.success_id = group, success_id
        self.failed_ids = [i for i, tr in enumerate(group) if not tr.won]
        self.docs = [(i, t) for i in self.failed_ids for t in group[i].turns]
        self.calls, self.errors = 0, 0

    def call(self, name: str, arguments: str | dict) -> str:
        """Dispatch one tool call from the judge (raw JSON string or dict of arguments)."""
        self.calls += 1
        out = self._call(name, arguments)
        if out.startswith("error:"):
            self.errors += 1
        return cut(out, RESULT_CHARS)

    def _call(self, name: str, arguments: str | dict) -> str:
        if name == "<unparseable>":     # a tool call whose JSON did not parse (chat.py)
            return ('error: the tool call is not valid JSON of the form {"name": ..., '
                    f'"arguments": {{...}}}}: {cut(str(arguments), 200)}')
        if not isinstance(name, str) or name not in _TOOL_FNS:
            return (f"error: unknown tool {cut(repr(name), 100)}; available tools: "
                    f"{sorted(_TOOL_FNS)}")
        if not isinstance(arguments, str):          # a dict from a Python caller: measure it
            try:
                arguments = json.dumps(arguments, default=str)
            except (ValueError, TypeError, RecursionError):
                return "error: arguments are not JSON-serialisable"
        if len(arguments) > ARGS_CHARS:
            return f"error: arguments too large ({len(arguments)} chars > {ARGS_CHARS})"
        # bounded decode: 2,000 characters hold 1,000 nested brackets, which json.loads
        # alone answers with RecursionError
        arguments, why = loads(arguments) if arguments.strip() else ({}, None)
        if why:
            return f"error: arguments are not valid JSON ({why})"
        if not isinstance(arguments, dict):
            return "error: arguments must be a JSON object"
        return _TOOL_FNS[name](self, arguments)

    # -- search_trajectory ----------------------------------------------------------------
    def search(self, query: Any, top_k: Any = 5, field: Any = "all") -> list[dict] | str:
        """Structured search; returns hits or an error string."""
        if not isinstance(query, str) or not query.strip():
            return "error: query must be a non-empty string"
        if len(query) > QUERY_CHARS:
            return f"error: query too long ({len(query)} chars > {QUERY_CHARS})"
        k = _as_int(top_k)
        if k is None or k < 1:
            return f"error: top_k must be a positive integer (got {top_k!r})"
        k = min(k, TOP_K_CAP)
        if field not in ("all", "action", "obs"):
            return f"error: field must be 'all', 'action' or 'obs' (got {field!r})"
        if not self.docs:
            return []
        pick = {"all": lambda t: f"{t.obs}\n> {t.action}", "action": lambda t: t.action,
                "obs": lambda t: t.obs}[field]
        scored = process.extract(query, [pick(t) for _, t in self.docs], scorer=fuzz.WRatio,
                                 processor=utils.default_process, limit=None)
        scored.sort(key=lambda r: (-r[1], r[2]))          # score desc, then document order
        # one best hit per failed trajectory first, then the rest: a run that loops on the same
        # action 30 times must not hide the other failures from the judge
        first, rest, seen = [], [], set()
        for _, score, j in scored:
            i = self.docs[j][0]
            (rest if i in seen else first).append((score, j))
            seen.add(i)
        hits = []
        for score, j in (first + rest)[:k]:
            i, t = self.docs[j]
            snip = cut(f"obs: {t.obs} | action: {t.action}", SNIPPET_CHARS)
            hits.append({"traj_id": i, "turn": t.t, "score": round(float(score), 1),
                         "action": t.action, "snippet": snip})
        return hits

    def search_trajectory(self, query: Any, top_k: Any = 5, field: Any = "all") -> str:
        hits = self.search(query, top_k, field)
        return hits if isinstance(hits, str) else json.dumps({"hits": hits})

    # -- get_segment ----------------------------------------------------------------------
    def get_segment(self, traj_id: Any, start_turn: Any, end_turn: Any) -> str:
        i, s, e = _as_int(traj_id), _as_int(start_turn), _as_int(end_turn)
        if i is None or s is None or e is None:
            return "error: traj_id, start_turn and end_turn must be integers"
        if not 0 <= i < len(self.group):
            return f"error: no trajectory {i}; valid ids are 0..{len(self.group) - 1}"
        turns = self.group[i].turns
        if not (0 <= s < len(turns) and 0 <= e < len(turns)):
            return f"error: turns {s}..{e} out of range; trajectory {i} has turns 0..{len(turns) - 1}"
        if s > e:
            return f"error: start_turn {s} > end_turn {e}"
        if e - s + 1 > SPAN_CAP:
            return f"error: at most {SPAN_CAP} turns per call (asked for {e - s + 1})"
        rows = [{"turn": t.t, "observation": cut(t.obs, FIELD_CHARS),
                 "output": cut(t.text, FIELD_CHARS), "action": t.action,
                 "result": cut(t.next_obs, FIELD_CHARS), "error": turn_error(t)}
                for t in turns[s:e + 1]]
        return json.dumps({"traj_id": i, "outcome": "success" if self.group[i].won else "failure",
                           "num_turns": len(turns), "turns": rows})


def _search_tool(tools: GroupTools, args: dict) -> str:
    extra = set(args) - {"query", "top_k", "field"}
    if extra:
        return f"error: unexpected arguments {sorted(extra)} for search_trajectory"
    return tools.search_trajectory(args.get("query"), args.get("top_k", 5), args.get("field", "all"))


def _segment_tool(tools: GroupTools, args: dict) -> str:
    missing = [k for k in ("traj_id", "start_turn", "end_turn") if k not in args]
    if missing:
        return f"error: get_segment needs {missing}"
    return tools.get_segment(args["traj_id"], args["start_turn"], args["end_turn"])


_TOOL_FNS: dict[str, Callable[[GroupTools, dict], str]] = {"search_trajectory": _search_tool, "get_segment": _segment_tool}


# ---------------------------------------------------------------------------------------------
# The answer's schema
# ---------------------------------------------------------------------------------------------
OUTPUT_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "failure_mode": {"type": "string", "description": "the recurring failure, one sentence"},
        "start_turn": {"type": "integer", "description": "first turn of the segment (inclusive)"},
        "end_turn": {"type": "integer", "description": "last turn of the segment (inclusive)"},
        "rationale": {"type": "string", "description": "why this segment avoids it"},
        "traj_id": {"type": "integer", "description": "optional; must be the successful one"},
        "success_id": {"type": "integer", "description": "optional, read only when the judge is asked to choose "
                                                         "the success: the successful trajectory the segment is from"}},
    "required": ["failure_mode", "start_turn", "end_turn"],     # the paper's output: mode + (ℓ, r)
}


def _schema(choose: bool) -> dict:
    """The schema the prompt shows: success_id only when the judge chooses (so the paper's prompt
    is unchanged, token for token)."""
    if choose:
        return OUTPUT_SCHEMA
    return {**OUTPUT_SCHEMA, "properties": {k: v for k, v in OUTPUT_SCHEMA["properties"].items() if k != "success_id"}}


# ---------------------------------------------------------------------------------------------
# Prompt text
# ---------------------------------------------------------------------------------------------
def _success_text(tr: Trajectory, idx: int) -> str:
    lines = [f"Trajectory {idx} SUCCEEDED in {len(tr.turns)} turns (shown in full):"]
    last = len(tr.turns) - 1
    for t in tr.turns:
        why = turn_error(t)
        flag = (f"  [ERROR: {why}]" if why else "") + ("  [FINAL TURN]" if t.t == last else "")
        lines.append(f"[turn {t.t}] observation: {cut(t.obs, FIELD_CHARS)}\n"
                     f"[turn {t.t}] action: {t.action}{flag}")
    lines.append(f"[end] result of turn {last}: {cut(tr.turns[-1].next_obs, FIELD_CHARS)}")
    return "\n".join(lines)


def _preview(tr: Trajectory, idx: int, head: int = 6, tail: int = 3) -> str:
    """One line: the outcome, the first `head` and last `tail` actions; a failure's final observation."""
    acts = [t.action for t in tr.turns]
    shown = acts if len(acts) <= head + tail else acts[:head] + ["…"] + acts[-tail:]
    n_err = sum(turn_error(t) is not None for t in tr.turns)
    line = (f"- trajectory {idx} {'SUCCEEDED' if tr.won else 'FAILED'} ({len(acts)} turns, {n_err} "
            f"error-producing): {' → '.join(shown)}")
    return line if tr.won else line + f"; final observation: {cut(tr.turns[-1].next_obs if tr.turns else '', 160)!r}"


def build_system_prompt(group: list[Trajectory], success_id: int, choose: bool = False) -> str:
    """The judge's system prompt; `choose`: it also previews every success and may name the one
    it examines (success_id) — `success_id` is then the default, shown in full."""
    task = group[success_id].task_text
    fails = [_preview(tr, i) for i, tr in enumerate(group) if not tr.won]
    parts = [
        "You are a credit-assignment judge for a reinforcement-learning agent. Below is one group "
        f"of attempts at the same task: {task}",
        "Your job: (1) diagnose ONE failure mode that recurs across the FAILED runs; (2) return "
        f"the SHORTEST segment of the successful trajectory {success_id} — at most "
        f"{MAX_SEGMENT_TURNS} consecutive action turns, ending BEFORE its final turn — whose "
        "actions solve or avoid that failure mode. Exclude malformed or error-producing actions "
        "(marked [ERROR]) even if recovering from them helped.",
        _success_text(group[success_id], success_id)]
    if choose:
        wins = [_preview(tr, i) for i, tr in enumerate(group) if tr.won]
        parts.append("You may examine another successful trajectory instead if its decisive actions "
                     "contrast better with the failures: read it with get_segment and put its id in "
                     f"\"success_id\" (omit it to examine trajectory {success_id}). Successful "
                     "trajectories (previews):\n" + "\n".join(wins))
    parts += [
        "Failed trajectories (previews; inspect them with the tools):\n" + "\n".join(fails),
        "Tools (OpenAI function schemas):\n" + json.dumps(TOOLS),
        "When done, reply with ONLY a JSON object matching this schema (traj_id is implied):\n"
        + json.dumps(_schema(choose)),
    ]
    return "\n\n".join(parts)
