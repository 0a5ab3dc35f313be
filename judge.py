"""Judge: ProVer's segment proposer, with its two tools (the CriticSearch critic is critic.py).

What it implements
------------------
ProVer's *Propose* step (reference/prover_paper.md). For one mixed-outcome rollout group the caller
picks the shortest successful trajectory (`success_id`, see `shortest_success`). The judge sees

  * that successful trajectory in full (every turn's observation and action, error-producing
    turns and the final turn marked),
  * compact previews of the failed trajectories (length, first/last actions, final observation),
  * two tools over the group (OpenAI function-calling schemas in `TOOLS`):
      search_trajectory(query, top_k[, field]) — rapidfuzz search over the FAILED trajectories'
          turns (observation + action text) -> [{traj_id, turn, score, action, snippet}]
      get_segment(traj_id, start_turn, end_turn) — those turns verbatim (any trajectory),
  * the output schema `{"failure_mode", "start_turn", "end_turn"[, "rationale"]}`: the paper
    asks for one failure mode and a segment (ℓ, r), so those three are required; a rationale is
    optional (a string when given); traj_id of the success is implied (an explicit one is
    accepted and checked).

It is asked to name ONE failure mode that recurs across the failed runs and return the SHORTEST
non-terminal segment (start_turn..end_turn, inclusive, at most 4 action turns) of the successful
run that solves or avoids it, excluding malformed / error-producing actions.

Validation (`validate_proposal`), in this order, each failure with a short reason key:
    schema          JSON object with every field of OUTPUT_SCHEMA["required"]: failure_mode
                    (non-empty str), start_turn, end_turn (ints); rationale a str if present
    traj_id         explicit traj_id must be the success's
    bounds          0 <= start_turn, end_turn <= last turn
    reversed        start_turn <= end_turn
    too_long        end_turn - start_turn + 1 <= 4 action turns
    terminal        end_turn < last turn (verification needs the state *after* end_turn)
    invalid_action  no error-producing turn inside (critic.turn_error: output without action
                    tags, an action outside a non-empty admissible list, or the env answering
                    "Nothing happens.")
A rejected answer gets a repair turn that says precisely what was wrong (up to 3); after that the
proposal is dropped and the reason key is reported (`JudgeResult.reason_key`) so it can be counted.
Answers may be bare JSON, JSON inside prose, or a ```json fence; `<think>` blocks are ignored.
All parsing is chat.py's (linear time; nesting over 64, number literals over 40 characters and
oversized values are rejected, and a `not_json` drop names which). Bad tool calls (unknown tool,
oversized or malformed arguments, out-of-range turns) never raise: the judge gets an error string
as the tool result. At most 8 tool rounds (a 9th is a drop) of at most 8 calls (the rest are not
run; the judge is told). Each LLM proposal or critique has a wall-time budget (`max_seconds`,
600 s by default): once spent, the call is a drop with reason key "timeout", so a slow or
stalling endpoint costs one group, never an unbounded wait.

Backends (`make_judge(name, **kw)`, explicit dict `JUDGES`)
-----------------------------------------------------------
  builtin  offline contrastive judge that uses the two tools programmatically and nothing else
           (never env internals or experts): for each valid non-terminal turn of the success it
           searches the failures for the same action (field="action"); the divergence score of a
           turn is the share of failed runs that never take that action; the proposal is the
           earliest turn with the highest score (a 1-turn window, the shortest valid one); the
           failure mode is phrased from what the failures did in the most similar observations.
  random   a uniformly random valid segment of the success (the paper's ablation).
  hf       a local transformers chat model (chat.HFChat), tool calls parsed from its text.
  openai   any OpenAI-compatible /v1/chat/completions endpoint (chat.OpenAIChat); exhausted
           retries or a malformed response are a drop ("endpoint timeout", "http 500", ...).

CriticSearch (`Judge.critique`, per-turn labels): each judge class extends critic.py's matching
critic (AgentCritic, BuiltinCritic, RandomCritic), so one `make_judge` object serves both methods.

Token accounting (`tokens/judge`): hf counts real tokenizer tokens (prompt length of every call,
new tokens generated); openai uses the endpoint's `usage` and falls back to a whitespace-split
estimate; builtin reports the whitespace estimate of what an LLM judge doing the same work would
read (system prompt + tool results) and write (tool arguments + final JSON); random reports 0.
Every call re-sends the whole conversation, so prompt tokens are summed over calls (as billed).

Our reconstruction (no official code exists): the prompt wording, the preview format, the
search scorer (rapidfuzz WRatio, with one best hit per failed trajectory first so a single looping
run cannot fill the results), the optional `field` argument of search_trajectory, all size caps
and time budgets, and the builtin judge's heuristic. Not covered: multi-segment proposals,
judge-side caching across iterations, streaming responses.

Run the tests: `python -m pytest -q tests/test_judge.py tests/test_fuzz.py`.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from rapidfuzz import fuzz, process, utils

from chat import (ChatFn, ChatReply, HFChat, OpenAIChat, estimate_tokens,  # noqa: F401  (re-
                  json_values, loads, parse_text_tool_calls, rejects_note,  # exported: callers
                  scan_json, strip_tool_calls)                              # use judge.X)
from critic import (MAX_SECONDS, AgentCritic, BuiltinCritic, CritiqueResult, RandomCritic, cut,
                    same_action, turn_error)
from rollout import Trajectory, shortest_success  # noqa: F401  (re-exported)

# ---------------------------------------------------------------------------------------------
# Limits (paper defaults where the paper gives one, our bounds elsewhere)
# ---------------------------------------------------------------------------------------------
MAX_SEGMENT_TURNS = 4         # paper: at most four action turns
MAX_REPAIRS = 3               # paper: up to three repair turns
MAX_TOOL_ROUNDS = 8           # ours: assistant replies carrying tool calls
MAX_CALLS_PER_ROUND = 8       # ours: tool calls run per reply (the rest are not run)
TOP_K_CAP = 10                # ours: search hits per call
SPAN_CAP = 8                  # ours: turns per get_segment call
QUERY_CHARS = 500             # ours: longest search query accepted
ARGS_CHARS = 2000             # ours: longest raw tool-argument string accepted
FIELD_CHARS = 1200            # ours: per-field cap inside get_segment results
RESULT_CHARS = 8000           # ours: any tool result is cut here
SNIPPET_CHARS = 200           # ours: search snippet length


# ---------------------------------------------------------------------------------------------
# Typed results
# ---------------------------------------------------------------------------------------------
@dataclass
class Proposal:
    traj_id: int                      # Trajectory.traj_id of the successful run
    start_turn: int                   # inclusive, 0-based
    end_turn: int                     # inclusive, < last turn
    failure_mode: str
    rationale: str


@dataclass
class JudgeResult:
    """status: "valid" (accepted without feedback), "repaired" (accepted after at least one
    proposal repair or tool-error message), "dropped" (no proposal; `reason` says why)."""
    proposal: Proposal | None
    status: str
    reason: str | None
    repairs: int                      # proposal repair turns used (<= MAX_REPAIRS)
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    transcript: list[dict] = field(default_factory=list)
    tool_errors: int = 0              # tool calls answered with an error string

    @property
    def reason_key(self) -> str | None:
        """The countable part of `reason` ("terminal", "http 500", ...)."""
        return None if self.reason is None else self.reason.split(":")[0]


class Judge(Protocol):
    name: str

    def propose(self, group: list[Trajectory], success_id: int) -> JudgeResult: ...

    def critique(self, traj: Trajectory, gold: str | None = None,
                 group: list[Trajectory] | None = None) -> CritiqueResult: ...


def _dropped(reason: str, **kw) -> JudgeResult:
    base = dict(proposal=None, status="dropped", reason=reason, repairs=0, tool_calls=0,
                prompt_tokens=0, completion_tokens=0)
    base.update(kw)
    return JudgeResult(**base)


def _check_group(group: list[Trajectory], success_id: int) -> str | None:
    """Caller mistakes become a typed drop, not an exception in the middle of a run."""
    if not isinstance(success_id, int) or not 0 <= success_id < len(group):
        return f"bad_input: success_id {success_id!r} is not an index into a group of {len(group)}"
    if not group[success_id].won:
        return f"bad_input: group[{success_id}] is not a successful trajectory"
    if len(group[success_id].turns) < 2:
        return "no_segment: the success has a single turn, so no non-terminal segment exists"
    return None


# ---------------------------------------------------------------------------------------------
# The two tools
# ---------------------------------------------------------------------------------------------
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

OUTPUT_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "failure_mode": {"type": "string", "description": "the recurring failure, one sentence"},
        "start_turn": {"type": "integer", "description": "first turn of the segment (inclusive)"},
        "end_turn": {"type": "integer", "description": "last turn of the segment (inclusive)"},
        "rationale": {"type": "string", "description": "why this segment avoids it"},
        "traj_id": {"type": "integer", "description": "optional; must be the successful one"}},
    "required": ["failure_mode", "start_turn", "end_turn"],     # the paper's output: mode + (ℓ, r)
}


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


_TOOL_FNS: dict[str, Callable[[GroupTools, dict], str]] = {
    "search_trajectory": lambda tools, args: _search_tool(tools, args),
    "get_segment": lambda tools, args: _segment_tool(tools, args),
}


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
def validate_proposal(obj: Any, group: list[Trajectory], success_id: int
                      ) -> tuple[Proposal | None, str | None]:
    """(Proposal, None) or (None, "key: precise message for the repair turn")."""
    if not isinstance(obj, dict):
        return None, f"schema: expected a JSON object, got {type(obj).__name__}"
    missing = [k for k in OUTPUT_SCHEMA["required"] if k not in obj]   # one list for both
    if missing:
        return None, f"schema: missing field(s) {missing}; required: {OUTPUT_SCHEMA['required']}"
    fm, rat = obj["failure_mode"], obj.get("rationale", "")
    if not isinstance(fm, str) or not fm.strip():
        return None, "schema: failure_mode must be a non-empty string"
    if not isinstance(rat, str):
        return None, "schema: rationale must be a string"
    s, e = _as_int(obj["start_turn"]), _as_int(obj["end_turn"])
    if s is None or e is None:
        return None, (f"schema: start_turn and end_turn must be integers (got "
                      f"{cut(repr(obj['start_turn']), 60)}, {cut(repr(obj['end_turn']), 60)})")
    if "traj_id" in obj and obj["traj_id"] is not None and _as_int(obj["traj_id"]) != success_id:
        return None, (f"traj_id: traj_id {cut(repr(obj['traj_id']), 60)} is not the successful "
                      "trajectory; "
                      f"the segment must come from trajectory {success_id} (or omit traj_id)")
    turns = group[success_id].turns
    last = len(turns) - 1
    if not (0 <= s <= last and 0 <= e <= last):
        return None, (f"bounds: turns {s}..{e} out of range; the successful trajectory has turns "
                      f"0..{last}")
    if s > e:
        return None, f"reversed: start_turn {s} > end_turn {e}; give start_turn <= end_turn"
    if e - s + 1 > MAX_SEGMENT_TURNS:
        return None, (f"too_long: turns {s}..{e} are {e - s + 1} action turns; at most "
                      f"{MAX_SEGMENT_TURNS} are allowed (prefer the shortest)")
    if e == last:
        return None, (f"terminal: end_turn {e} is the final turn; the segment must end at turn "
                      f"<= {last - 1} so the state after it can be verified")
    for t in turns[s:e + 1]:
        why = turn_error(t)
        if why:
            return None, (f"invalid_action: turn {t.t} is error-producing ({why}); choose a "
                          f"segment that excludes it")
    return Proposal(group[success_id].traj_id, s, e, fm.strip(), rat.strip()), None


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


def _failure_preview(tr: Trajectory, idx: int, head: int = 6, tail: int = 3) -> str:
    acts = [t.action for t in tr.turns]
    shown = acts if len(acts) <= head + tail else acts[:head] + ["…"] + acts[-tail:]
    n_err = sum(turn_error(t) is not None for t in tr.turns)
    final = tr.turns[-1].next_obs if tr.turns else ""
    return (f"- trajectory {idx} FAILED ({len(acts)} turns, {n_err} error-producing): "
            f"{' → '.join(shown)}; final observation: {cut(final, 160)!r}")


def build_system_prompt(group: list[Trajectory], success_id: int) -> str:
    task = group[success_id].task_text
    fails = [_failure_preview(tr, i) for i, tr in enumerate(group) if not tr.won]
    return "\n\n".join([
        "You are a credit-assignment judge for a reinforcement-learning agent. Below is one group "
        f"of attempts at the same task: {task}",
        "Your job: (1) diagnose ONE failure mode that recurs across the FAILED runs; (2) return "
        f"the SHORTEST segment of the successful trajectory {success_id} — at most "
        f"{MAX_SEGMENT_TURNS} consecutive action turns, ending BEFORE its final turn — whose "
        "actions solve or avoid that failure mode. Exclude malformed or error-producing actions "
        "(marked [ERROR]) even if recovering from them helped.",
        _success_text(group[success_id], success_id),
        "Failed trajectories (previews; inspect them with the tools):\n" + "\n".join(fails),
        "Tools (OpenAI function schemas):\n" + json.dumps(TOOLS),
        "When done, reply with ONLY a JSON object matching this schema (traj_id is implied):\n"
        + json.dumps(OUTPUT_SCHEMA),
    ])


USER_KICKOFF = ("Investigate the failures with the tools if useful, then answer with the JSON "
                "object.")


def _repair_message(error: str) -> str:
    return (f"Your answer was rejected: {error}. Reply with ONLY the corrected JSON object "
            f"{{\"failure_mode\": str, \"start_turn\": int, \"end_turn\": int, \"rationale\": str "
            f"(optional)}}.")


def find_proposal(text: str) -> tuple[dict | None, str | None]:
    """(the proposal object in a reply: the last object with turn fields, else the last object;
    None with a not_json reason when there is none, naming any hostile-input rejection)."""
    values, rejects = scan_json(text)
    objs = [v for v in values if isinstance(v, dict)]
    with_turns = [o for o in objs if "start_turn" in o or "end_turn" in o]
    obj = (with_turns or objs or [None])[-1]
    return obj, None if obj is not None else ("not_json: no JSON object found in the reply"
                                              + rejects_note(rejects))


def parse_proposal(text: str) -> dict | None:
    return find_proposal(text)[0]


# ---------------------------------------------------------------------------------------------
# The judge agent loop (hf and openai backends)
# ---------------------------------------------------------------------------------------------
class AgentJudge(AgentCritic):
    """An LLM judge: system prompt -> [tool rounds] -> JSON proposal -> validate -> repair, all
    within `max_seconds` of wall time (None: no budget; each chat call still has its own
    timeout and retries). The budgeted chat call `_ask` and `critique` are AgentCritic's."""

    def __init__(self, chat: ChatFn, name: str = "agent", max_tool_rounds: int = MAX_TOOL_ROUNDS,
                 max_repairs: int = MAX_REPAIRS, max_seconds: float | None = MAX_SECONDS):
        super().__init__(chat, name, max_seconds)
        self.max_tool_rounds, self.max_repairs = max_tool_rounds, max_repairs

    def propose(self, group: list[Trajectory], success_id: int) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        deadline = self._deadline()
        tools = GroupTools(group, success_id)
        msgs = [{"role": "system", "content": build_system_prompt(group, success_id)},
                {"role": "user", "content": USER_KICKOFF}]
        st = {"pt": 0, "ct": 0, "rounds": 0, "repairs": 0}
        while True:         # terminates: every pass uses a tool round or a repair, both capped
            reply = self._ask(msgs, TOOLS, deadline)
            st["pt"] += reply.prompt_tokens
            st["ct"] += reply.completion_tokens
            if reply.error:
                return self._result(None, reply.error, st, tools, msgs)
            if not reply.tool_calls:     # servers without a tool parser leave calls in the text
                reply.tool_calls = parse_text_tool_calls(reply.content)
            if reply.tool_calls:
                st["rounds"] += 1
                if st["rounds"] > self.max_tool_rounds:
                    return self._result(None, f"tool_rounds: more than {self.max_tool_rounds} "
                                              "tool rounds without an answer", st, tools, msgs)
                self._run_tools(reply, tools, msgs, last=st["rounds"] == self.max_tool_rounds)
                continue
            msgs.append({"role": "assistant", "content": reply.content})
            obj, err = find_proposal(reply.content)
            prop, err = (None, err) if obj is None else validate_proposal(obj, group, success_id)
            if prop is not None:
                return self._result(prop, None, st, tools, msgs)
            if st["repairs"] >= self.max_repairs:
                return self._result(None, err, st, tools, msgs)
            st["repairs"] += 1
            msgs.append({"role": "user", "content": _repair_message(err)})

    def _run_tools(self, reply: ChatReply, tools: GroupTools, msgs: list[dict], last: bool):
        calls = reply.tool_calls[:MAX_CALLS_PER_ROUND]     # a reply of 10,000 calls runs 8
        msgs.append({"role": "assistant", "content": strip_tool_calls(reply.content),
                     "tool_calls": [{"id": c["id"], "type": "function",
                                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                                    for c in calls]})
        for k, c in enumerate(calls):
            out = tools.call(c["name"], c["arguments"])
            if k == len(calls) - 1 and len(reply.tool_calls) > len(calls):
                out += (f"\n(note: {len(reply.tool_calls) - len(calls)} further tool calls of that "
                        f"reply were not run; at most {MAX_CALLS_PER_ROUND} per reply)")
            if last:
                out += "\n(note: that was your last tool round; reply with the final JSON now)"
            msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["name"],
                         "content": out})

    def _result(self, prop: Proposal | None, reason: str | None, st: dict, tools: GroupTools,
                msgs: list[dict]) -> JudgeResult:
        helped = st["repairs"] > 0 or tools.errors > 0
        status = "dropped" if prop is None else ("repaired" if helped else "valid")
        return JudgeResult(prop, status, reason, st["repairs"], tools.calls, st["pt"], st["ct"],
                           msgs, tools.errors)


# ---------------------------------------------------------------------------------------------
# Built-in contrastive judge (offline default)
# ---------------------------------------------------------------------------------------------
class BuiltinJudge(BuiltinCritic):
    """Contrastive judge over the two tools (see the module docstring). It reads the success as
    the prompt shows it and the failures only through `GroupTools`, so it never sees more than
    an LLM judge would. Its `critique` is BuiltinCritic's."""
    name = "builtin"

    def propose(self, group: list[Trajectory], success_id: int) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        tools, log = GroupTools(group, success_id), []
        succ = group[success_id]
        n_fail = len(tools.failed_ids)
        if n_fail == 0:
            return _dropped("no_failures: the group has no failed trajectory to contrast with")
        cands = [t.t for t in succ.turns[:-1] if turn_error(t) is None]
        if not cands:
            return _dropped("no_segment: every non-terminal turn of the success is error-producing")
        score, seen = {}, {}
        for t in cands:             # share of failed runs that never take this turn's action
            a = succ.turns[t].action
            if a not in seen:
                hits = self._search(tools, log, a, TOP_K_CAP, "action")
                seen[a] = 1.0 - len({h["traj_id"] for h in hits if same_action(a, h["action"])}) / n_fail
            score[t] = seen[a]
        pivot = max(cands, key=lambda t: (score[t], -t))    # most distinctive, earliest on ties
        if score[pivot] <= 0.0:
            return _dropped("no_divergence: every action of the success also occurs in every "
                            "failed run", tool_calls=tools.calls, transcript=log)
        obj = self._proposal_json(tools, log, succ, pivot, score[pivot], n_fail, success_id)
        prop, err = validate_proposal(obj, group, success_id)
        assert prop is not None, err          # valid by construction; a bug if not
        log.append({"role": "assistant", "content": json.dumps(obj)})
        sys_prompt = build_system_prompt(group, success_id)
        pt = estimate_tokens(sys_prompt) + sum(estimate_tokens(m["content"]) for m in log
                                               if m["role"] == "tool")
        ct = sum(estimate_tokens(m["content"]) for m in log if m["role"] == "assistant")
        return JudgeResult(prop, "valid", None, 0, tools.calls, pt, ct, log, tools.errors)

    @staticmethod
    def _search(tools: GroupTools, log: list[dict], query: str, k: int, fld: str) -> list[dict]:
        args = json.dumps({"query": query[:QUERY_CHARS], "top_k": k, "field": fld})
        out = tools.call("search_trajectory", args)
        log += [{"role": "assistant", "content": f"search_trajectory({args})"},
                {"role": "tool", "content": out}]
        return [] if out.startswith("error:") else json.loads(out)["hits"]

    def _proposal_json(self, tools: GroupTools, log: list[dict], succ: Trajectory, p: int,
                       dist: float, n_fail: int, sid: int) -> dict:
        turn = succ.turns[p]
        # what did the failures do in the most similar states? (observation search)
        hits = self._search(tools, log, turn.obs, TOP_K_CAP, "obs")
        near = [h for h in hits if h["score"] >= 90.0] or hits[:3]     # near-identical states
        alts = Counter(h["action"] for h in near if not same_action(turn.action, h["action"]))
        n_took = round((1.0 - dist) * n_fail)
        mode = f"the failed runs do not '{turn.action}' ({n_fail - n_took}/{n_fail} never do)"
        if alts:
            mode += f"; in similar states they '{alts.most_common(1)[0][0]}' instead"
        args = json.dumps({"traj_id": sid, "start_turn": p, "end_turn": p})
        log += [{"role": "assistant", "content": f"get_segment({args})"},
                {"role": "tool", "content": tools.call("get_segment", args)}]
        return {"failure_mode": mode, "start_turn": p, "end_turn": p,
                "rationale": f"turn {p} is the earliest turn of the success whose action is "
                             f"absent from the most failed runs (same action after normalisation)"}


# ---------------------------------------------------------------------------------------------
# Random judge (the paper's ablation)
# ---------------------------------------------------------------------------------------------
def valid_segments(traj: Trajectory) -> list[tuple[int, int]]:
    """Every (start, end) that passes `validate_proposal` on this trajectory."""
    n, ok = len(traj.turns), [turn_error(t) is None for t in traj.turns]
    return [(s, e) for s in range(n - 1) for e in range(s, min(s + MAX_SEGMENT_TURNS, n - 1))
            if all(ok[s:e + 1])]


class RandomJudge(RandomCritic):
    """Uniform over the success's valid segments; same validation path as every judge."""
    name = "random"

    def propose(self, group: list[Trajectory], success_id: int) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        segs = valid_segments(group[success_id])
        if not segs:
            return _dropped("no_segment: the success has no valid non-terminal segment")
        s, e = self.rng.choice(segs)
        obj = {"failure_mode": "random segment (ablation)", "start_turn": s, "end_turn": e,
               "rationale": "uniformly random valid segment"}
        prop, err = validate_proposal(obj, group, success_id)
        assert prop is not None, err
        return JudgeResult(prop, "valid", None, 0, 0, 0, 0, [])


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------
def _agent(client: Callable[..., ChatFn], name: str) -> Callable[..., AgentJudge]:
    def make(**kw) -> AgentJudge:       # the agent loop's settings; the rest go to the client
        loop = {k: kw.pop(k) for k in ("max_tool_rounds", "max_repairs", "max_seconds") if k in kw}
        return AgentJudge(client(**kw), name=name, **loop)
    return make


JUDGES: dict[str, Callable[..., Judge]] = {         # name -> factory(**kw)
    "builtin": lambda **kw: BuiltinJudge(**kw), "random": lambda **kw: RandomJudge(**kw),
    "hf": _agent(HFChat, "hf"), "openai": _agent(OpenAIChat, "openai")}


def make_judge(name: str, **kw) -> Judge:
    """builtin | random(seed=) | hf(model=, tokenizer=, max_new_tokens=, temperature=) |
    openai(base_url=, model=, api_key=, timeout=, retries=, backoff=, ...); the agent judges
    also take max_tool_rounds=, max_repairs= and max_seconds= (wall-time budget per call)."""
    if name not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; choose one of {sorted(JUDGES)}")
    return JUDGES[name](**kw)
