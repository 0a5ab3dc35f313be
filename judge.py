"""The judge: ProVer's PROPOSE step — one segment of a success that avoids the failures' mistake.

For one mixed group and a successful trajectory τ* (the caller's: the shortest success), the judge
sees τ* in full (every turn's observation and action; error-producing and final turns marked),
previews of the failures, and two tools over the group (tools.py):
    search_trajectory(query, top_k[, field])    fuzzy search over the FAILED runs' turns
    get_segment(traj_id, start_turn, end_turn)   those turns verbatim
and answers `{"failure_mode", "start_turn", "end_turn"[, "rationale"]}`: ONE failure mode that
recurs across the failures and the SHORTEST segment of τ* that solves or avoids it.

`validate_proposal` checks, in order (each failure a reason key): schema; traj_id (if given, τ*'s);
bounds; reversed (start ≤ end); too_long (≤ 4 turns, the paper's cap); terminal (end < last turn:
verification needs the state after it); invalid_action (no error-producing turn inside,
rollout.turn_error). A rejected answer gets a repair turn saying what was wrong, up to 3 (the
paper's); then the group is dropped with the reason key (`JudgeResult.reason_key`, counted).

Backends (`JUDGES`, `make_judge`):
  builtin  offline, uses the two tools and nothing else: for each valid non-terminal turn of τ* it
           searches the failures for the same action; a turn's divergence is the share of failed
           runs that never take it; the proposal is the earliest turn with the highest divergence
           (a 1-turn segment). Tokens: what an LLM judge doing the same
           would read and write (in the policy tokenizer's ids under train.py). Ours: a stand-in for an LLM.
  random   a uniformly random valid segment of τ* (the paper's ablation); 0 tokens.
  hf       a local transformers chat model (infra/chat.py), tool calls parsed from its text.
  openai   any OpenAI-compatible /v1/chat/completions endpoint; exhausted retries or a malformed
           response are a drop ("endpoint timeout", "http 500", ...).
An LLM judge gets at most 8 tool rounds of at most 8 calls and `max_seconds` (600 s) of wall time
per proposal; bad tool calls are answered with an error string, never an exception. Token counts:
hf real tokenizer counts, openai the endpoint's `usage`; prompts are summed over calls (as billed).

`propose(group, sid, choose_success=True)` (the --judge-success judge option) also previews every
success and lets the judge name the one it examines (`JudgeResult.success_id`): agent judges via an
optional "success_id" field (an invalid one gets a repair, then falls back to τ*), builtin picks
the success whose best turn is most distinctive (ties: τ*), random a uniform success.

Our reconstruction (no official code exists): prompt wording, preview format, the search scorer,
size caps and time budgets, the builtin heuristic. Leaves out: multi-segment proposals, caching
across updates, streaming.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from rapidfuzz import fuzz, utils

from infra.chat import MAX_SECONDS, ChatFn, ChatReply, HFChat, OpenAIChat, ask, cut, deadline, estimate_tokens
from infra.jsonscan import parse_text_tool_calls, rejects_note, scan_json, strip_tool_calls
from rollout import Trajectory, turn_error
from tools import (MAX_SEGMENT_TURNS, OUTPUT_SCHEMA, QUERY_CHARS, TOOLS, TOP_K_CAP, GroupTools, _as_int,
                   build_system_prompt)

# ---------------------------------------------------------------------------------------------
# Limits (paper defaults where the paper gives one, our bounds elsewhere)
# ---------------------------------------------------------------------------------------------
MAX_REPAIRS = 3               # paper: up to three repair turns
MAX_TOOL_ROUNDS = 8           # ours: assistant replies carrying tool calls
MAX_CALLS_PER_ROUND = 8       # ours: tool calls run per reply (the rest are not run)
ACTION_MATCH = 100.0          # builtin: same action = equal after rapidfuzz normalisation;
                              # fuzzier would merge "go to cabinet 1" with "go to cabinet 2"


def same_action(a: str, b: str) -> bool:
    return fuzz.ratio(utils.default_process(a), utils.default_process(b)) >= ACTION_MATCH



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
    success_id: int | None = None     # choose_success: the success the judge examined (None: the given one)
    success_note: str | None = None   # choose_success: why the judge's own choice was not used ("success_choice: ...")

    @property
    def reason_key(self) -> str | None:
        """The countable part of `reason` ("terminal", "http 500", ...)."""
        return None if self.reason is None else self.reason.split(":")[0]

    def skipped(self) -> "JudgeResult":
        """This drop's reason for a group not asked at all (the endpoint refused earlier in the update)."""
        return dataclasses.replace(self, reason=f"{self.reason_key}: skipped, the endpoint refused a connection "
                                   "earlier in this update", prompt_tokens=0, completion_tokens=0, transcript=[], tool_calls=0)


class Judge(Protocol):
    name: str

    def propose(self, group: list[Trajectory], success_id: int, choose_success: bool = False) -> JudgeResult: ...


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


def check_success_choice(obj: dict, group: list[Trajectory], default: int) -> tuple[int, str | None]:
    """(the success the answer names — `default` when it names none —, None) or (default,
    "success_choice: precise message for the repair turn")."""
    raw = obj.get("success_id") if isinstance(obj, dict) else None
    if raw is None:
        return default, None
    i = _as_int(raw)
    ok = [j for j, tr in enumerate(group) if tr.won and len(tr.turns) >= 2]
    if i is None or i not in ok:
        return default, (f"success_choice: success_id {cut(repr(raw), 60)} is not a successful trajectory "
                         f"with a non-terminal turn; choose one of {ok} (or omit success_id to examine "
                         f"trajectory {default})")
    return i, None


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


# ---------------------------------------------------------------------------------------------
# The judge agent loop (hf and openai backends)
# ---------------------------------------------------------------------------------------------
class AgentJudge:
    """An LLM judge: system prompt -> [tool rounds] -> JSON proposal -> validate -> repair, all
    within `max_seconds` of wall time (None: no budget; each chat call still has its own
    timeout and retries)."""

    def __init__(self, chat: ChatFn, name: str = "agent", max_tool_rounds: int = MAX_TOOL_ROUNDS,
                 max_repairs: int = MAX_REPAIRS, max_seconds: float | None = MAX_SECONDS):
        self.chat, self.name, self.max_seconds = chat, name, max_seconds
        self.max_tool_rounds, self.max_repairs = max_tool_rounds, max_repairs

    def _deadline(self) -> float | None:
        return deadline(self.max_seconds)

    def _ask(self, msgs: list[dict], tools: list[dict] | None, until: float | None) -> ChatReply:
        return ask(self.chat, msgs, tools, until, self.max_seconds)

    def propose(self, group: list[Trajectory], success_id: int, choose_success: bool = False) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        deadline = self._deadline()
        tools = GroupTools(group, success_id)
        msgs = [{"role": "system", "content": build_system_prompt(group, success_id, choose_success)},
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
            sid, choice_err = success_id, None
            if obj is not None and choose_success:
                sid, choice_err = check_success_choice(obj, group, success_id)
            if choice_err:
                prop, err = None, choice_err
            else:
                prop, err = (None, err) if obj is None else validate_proposal(obj, group, sid)
            if prop is not None:
                return self._result(prop, None, st, tools, msgs, sid if choose_success else None)
            if st["repairs"] >= self.max_repairs:
                if choice_err:       # the choice never became valid: fall back to the default success
                    rest = {k: v for k, v in obj.items() if k not in ("success_id", "traj_id")}
                    prop, err2 = validate_proposal(rest, group, success_id)
                    return self._result(prop, None if prop else err2, st, tools, msgs, success_id,
                                        choice_err if prop else None)
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
                msgs: list[dict], sid: int | None = None, note: str | None = None) -> JudgeResult:
        helped = st["repairs"] > 0 or tools.errors > 0
        status = "dropped" if prop is None else ("repaired" if helped else "valid")
        return JudgeResult(prop, status, reason, st["repairs"], tools.calls, st["pt"], st["ct"],
                           msgs, tools.errors, sid, note)


# ---------------------------------------------------------------------------------------------
# Built-in contrastive judge (offline default)
# ---------------------------------------------------------------------------------------------
class BuiltinJudge:
    """Contrastive judge over the two tools (see the module docstring). It reads the success as
    the prompt shows it and the failures only through `GroupTools`, so it never sees more than
    an LLM judge would. `count_tokens(text)`: how its tokens are counted (train.py passes the
    policy tokenizer's, so judge and policy tokens share one unit; default a whitespace count)."""
    name = "builtin"

    def __init__(self, count_tokens: Callable[[str], int] = estimate_tokens):
        self.count_tokens = count_tokens

    def propose(self, group: list[Trajectory], success_id: int, choose_success: bool = False) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        tools, log = GroupTools(group, success_id), []
        n_fail = len(tools.failed_ids)
        if n_fail == 0:
            return _dropped("no_failures: the group has no failed trajectory to contrast with")
        seen: dict = {}                 # action -> divergence score (one search per distinct action)
        default = success_id
        if choose_success:              # the success with the most distinctive action (module docstring)
            best = {i: self._best_turn(tools, log, group[i], seen, n_fail)[1]
                    for i, tr in enumerate(group) if tr.won and len(tr.turns) >= 2}
            success_id = max(best, key=lambda i: (best[i], i == default, -len(group[i].turns), -i))
        succ = group[success_id]
        pivot, top = self._best_turn(tools, log, succ, seen, n_fail)
        if pivot is None:
            return _dropped("no_segment: every non-terminal turn of the success is error-producing")
        if top <= 0.0:
            return _dropped("no_divergence: every action of the success also occurs in every "
                            "failed run", tool_calls=tools.calls, transcript=log)
        obj = self._proposal_json(tools, log, succ, pivot, top, n_fail, success_id)
        prop, err = validate_proposal(obj, group, success_id)
        assert prop is not None, err          # valid by construction; a bug if not
        log.append({"role": "assistant", "content": json.dumps(obj)})
        sys_prompt = build_system_prompt(group, default, choose_success)
        pt = self.count_tokens(sys_prompt) + sum(self.count_tokens(m["content"]) for m in log
                                               if m["role"] == "tool")
        ct = sum(self.count_tokens(m["content"]) for m in log if m["role"] == "assistant")
        return JudgeResult(prop, "valid", None, 0, tools.calls, pt, ct, log, tools.errors,
                           success_id if choose_success else None)

    def _best_turn(self, tools: GroupTools, log: list[dict], succ: Trajectory, seen: dict,
                   n_fail: int) -> tuple[int | None, float]:
        """(earliest valid non-terminal turn with the highest divergence score, that score); the
        score of an action is the share of failed runs that never take it (cached in `seen`)."""
        cands = [t.t for t in succ.turns[:-1] if turn_error(t) is None]
        if not cands:
            return None, -1.0
        score = {}
        for t in cands:             # share of failed runs that never take this turn's action
            a = succ.turns[t].action
            if a not in seen:
                hits = self._search(tools, log, a, TOP_K_CAP, "action")
                seen[a] = 1.0 - len({h["traj_id"] for h in hits if same_action(a, h["action"])}) / n_fail
            score[t] = seen[a]
        pivot = max(cands, key=lambda t: (score[t], -t))    # most distinctive, earliest on ties
        return pivot, score[pivot]

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


class RandomJudge:
    """Uniform over the success's valid segments; same validation path as every judge."""
    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def propose(self, group: list[Trajectory], success_id: int, choose_success: bool = False) -> JudgeResult:
        bad = _check_group(group, success_id)
        if bad:
            return _dropped(bad)
        if choose_success:              # uniform over the successes that have a valid segment
            ok = [i for i, tr in enumerate(group) if tr.won and valid_segments(tr)]
            if ok:
                success_id = self.rng.choice(ok)
        segs = valid_segments(group[success_id])
        if not segs:
            return _dropped("no_segment: the success has no valid non-terminal segment")
        s, e = self.rng.choice(segs)
        obj = {"failure_mode": "random segment (ablation)", "start_turn": s, "end_turn": e,
               "rationale": "uniformly random valid segment"}
        prop, err = validate_proposal(obj, group, success_id)
        assert prop is not None, err
        return JudgeResult(prop, "valid", None, 0, 0, 0, 0, [], 0, success_id if choose_success else None)


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------
def _agent(client: Callable[..., ChatFn], name: str) -> Callable[..., AgentJudge]:
    def make(**kw) -> AgentJudge:       # the agent loop's settings; the rest go to the client
        loop = {k: kw.pop(k) for k in ("max_tool_rounds", "max_repairs", "max_seconds") if k in kw}
        return AgentJudge(client(**kw), name=name, **loop)
    return make


def _lab(ref: str) -> Callable[..., Judge]:
    """A judge of the credit lab ("module:Class", in a module that imports this one: imported when
    built). It reads the env's truth labels, so it needs a lab env (envs.EnvSpec.lab)."""
    def make(**kw) -> Judge:
        module, name = ref.split(":")
        return getattr(importlib.import_module(module), name)(**kw)
    make.lab = True
    return make


# name -> factory(**kw): the only list of --judge values (--help, config validation, set-up)
JUDGES: dict[str, Callable[..., Judge]] = {
    "builtin": lambda **kw: BuiltinJudge(**kw), "random": lambda **kw: RandomJudge(**kw),
    "hf": _agent(HFChat, "hf"), "openai": _agent(OpenAIChat, "openai"),
    "truth": _lab("lab.truth_judge:TruthJudge"),     # the credit lab: the labelled key turn (perfect selection)
}


def make_judge(name: str, **kw) -> Judge:
    """builtin | random(seed=) | hf(model=, tokenizer=, max_new_tokens=, temperature=) |
    openai(base_url=, model=, api_key=, timeout=, retries=, backoff=, ...); the agent judges
    also take max_tool_rounds=, max_repairs= and max_seconds= (wall-time budget per call)."""
    if name not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; choose one of {sorted(JUDGES)}")
    return JUDGES[name](**kw)
