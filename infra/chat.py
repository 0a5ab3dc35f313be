"""LLM clients: OpenAI-compatible and local HF chat with tool calls, parsing, retries, budgets;
used by ProVer's judge (judge.py) and the CriticSearch critic (critic.py).

What it implements
------------------
* `ChatReply` and the chat-function contract `chat(messages, tools, deadline=None) -> ChatReply`
  (messages and tools in OpenAI format; `deadline` is a `time.monotonic()` instant after which
  the call must give up). A client never raises for anything the other side sends: every
  failure is a `ChatReply(error="key: detail")` and the caller turns it into a counted drop.
* `OpenAIChat`: POST {base_url}/chat/completions with urllib (e.g. `vllm serve`). Timeout per
  socket operation, bounded retries with exponential backoff on timeouts, connection errors, 429
  and 5xx; the response body is read in chunks, capped at `MAX_RESPONSE_BYTES`, and the whole
  attempt runs in a helper thread joined with the remaining budget, so a slow, stalling or
  trickling endpoint costs at most `deadline - now`, never an unbounded wait.
  `_openai_reply` reads the response defensively: a `message` that is not an object is a drop
  (`bad_response`); a tool call that is not an object becomes an `<unparseable>` call (the judge
  gets an error string as its result); list-of-parts `content` is joined; `usage` counts that
  are not finite non-negative numbers fall back to the whitespace estimate.
* `HFChat`: a local transformers model; tools go through `apply_chat_template(tools=...)`, tool
  calls stay in the generated text; the deadline becomes `generate(max_time=...)`.
* Parsing model text in linear time with bounded depth and size (`scan_json`, `loads`):
    1. `<think>` blocks are removed; a reply longer than `MAX_SCAN_CHARS` keeps its tail (the
       final answer comes last).
    2. One pass finds JSON object/array candidates: outside a candidate only `{` and `[` matter
       (quotes in prose are prose); inside, JSON strings and brackets are tokenised by one
       regex, and a bracket stack records every balanced span and its children. A mismatched
       closer or the end of text abandons the open candidates but keeps their finished
       children; a string broken by a newline (invalid JSON) rescans from just after the
       candidate's opening bracket, as a decoder retrying at the next '{' would, within a
       budget of 2x the text so the pass stays linear. Nesting beyond `MAX_DEPTH` is counted,
       not stored, and rejects the whole candidate ("too_deep").
    3. Candidates are decoded outermost first with `json.loads` (inside try/except for
       ValueError and RecursionError); a failure descends into the candidate's children. Number
       literals longer than `MAX_NUMBER_CHARS` reject their value ("huge_number"), NaN/Infinity
       decode as None (no finite number to use), a candidate over `MAX_VALUE_CHARS` is not
       decoded ("too_large"), and all decoding together reads at most 4x the text and tries
       at most `MAX_CANDIDATES` candidates, the last ones first ("budget" otherwise).
  The same limits guard standalone values (`loads`: tool arguments, `<tool_call>` bodies,
  response bodies), whose depth is pre-checked by the same tokeniser before `json.loads`.
  Tag blocks (`<tool_call>`, `<think>`) are cut with `str.find`, not regexes: a lazy `.*?`
  between `\\s*` runs backtracks quadratically on long whitespace.

What it leaves out: streaming responses, HTTP keep-alive and connection pools, proxies beyond
what urllib does itself, JSON5 or other lenient JSON (single quotes, trailing commas, raw
newlines inside strings are all invalid here, as for `json.loads`), and an interruptible HF
generation step (`max_time` is checked between tokens, so one forward pass may overrun).
A timed-out OpenAI attempt leaves its helper thread to finish its own bounded socket
operations in the background; its result is discarded.

Imports no other project module (a leaf: judge.py and critic.py import it, never the reverse).
"""
from __future__ import annotations

import http.client
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

# ---------------------------------------------------------------------------------------------
# Limits (all ours; a judge reply is a few KB, so these are far above honest use)
# ---------------------------------------------------------------------------------------------
MAX_DEPTH = 64                # nesting of any JSON value we decode (proposals need 2)
MAX_NUMBER_CHARS = 40         # longest number literal; Python refuses ints over 4,300 digits
MAX_VALUE_CHARS = 100_000     # longest single JSON candidate handed to json.loads
MAX_SCAN_CHARS = 262_144      # longest reply text scanned for JSON (its tail is kept)
MAX_CANDIDATES = 2048         # JSON candidates decoded per reply (the last ones)
MAX_RESPONSE_BYTES = 1 << 20  # longest HTTP response body read from an endpoint
MAX_RAW_CHARS = 2000          # raw text kept for an unparseable tool call
TIMEOUT = "timeout: the call ran out of its wall-time budget (max_seconds)"

REASONS = {                   # reason key -> what it means, for repair and drop messages
    "too_deep": f"JSON nested deeper than {MAX_DEPTH} levels",
    "too_large": f"a JSON value longer than {MAX_VALUE_CHARS} characters (or a reply over "
                 f"{MAX_SCAN_CHARS})",
    "huge_number": f"a number literal longer than {MAX_NUMBER_CHARS} characters",
    "budget": "the JSON decoding budget for this reply ran out",
}


def estimate_tokens(text: str) -> int:
    """Whitespace-split estimate, used where no tokenizer or usage report exists."""
    return len(text.split())


# ---------------------------------------------------------------------------------------------
# Bounded JSON: one decode, and the linear scanner over free text
# ---------------------------------------------------------------------------------------------
class _HugeNumber(ValueError):
    pass


def _parse_int(s: str) -> int:
    if len(s) > MAX_NUMBER_CHARS:         # checked before int(): no 4,300-digit ValueError, and
        raise _HugeNumber(s[:20])         # no quadratic int conversion of a megabyte of digits
    return int(s)


def _parse_float(s: str) -> float | None:
    if len(s) > MAX_NUMBER_CHARS:
        raise _HugeNumber(s[:20])
    f = float(s)
    return f if math.isfinite(f) else None     # 1e999 is no usable number either


# one decoder for every call (json.loads with hooks would build a new one each time)
_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float,
                            parse_constant=lambda _name: None)      # NaN / Infinity -> None


def _decode(s: str) -> tuple[Any, str | None]:
    """json.loads with the number hooks; (value, None) or (None, "key: detail"). The caller has
    bounded depth and size, so the except clauses are a second line of defence, not the plan."""
    try:
        return _DECODER.decode(s), None
    except _HugeNumber:
        return None, f"huge_number: {REASONS['huge_number']}"
    except RecursionError:
        return None, f"too_deep: {REASONS['too_deep']}"
    except json.JSONDecodeError as e:
        return None, f"invalid: {e.msg} at char {e.pos}"
    except (ValueError, TypeError) as e:
        return None, f"invalid: {type(e).__name__}"


# A JSON string (group q set iff it is closed; a raw newline ends it unclosed, since JSON forbids
# one there) or one bracket. Both alternatives start with a distinct character, so no
# backtracking: the regex engine does the per-character work in C.
_TOKEN_RE = re.compile(r'"(?:[^"\\\n]|\\.)*(?P<q>")?|(?P<b>[\[\]{}])')
_OPEN_RE = re.compile(r"[\[{]")
_CLOSER = {"[": "]", "{": "}"}


def _depth_ok(text: str) -> bool:
    """Max bracket nesting outside JSON strings <= MAX_DEPTH. On any prefix json.loads accepts,
    this count equals the decoder's depth, so a value that passes cannot recurse past it."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:     # fast path, C speed
        return True
    depth = 0
    for t in _TOKEN_RE.finditer(text):
        if t.lastgroup != "b":
            continue                       # a string: brackets inside do not count
        depth += 1 if t.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return False
    return True


def loads(text: str | bytes, max_chars: int = MAX_VALUE_CHARS) -> tuple[Any, str | None]:
    """One standalone JSON value, bounded: (value, None) or (None, "key: detail") with key one of
    invalid / too_large / too_deep / huge_number. Never raises."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > 4 * max_chars:
            return None, f"too_large: {len(text)} bytes > {max_chars} characters"
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return None, "invalid: not UTF-8"
    if not isinstance(text, str):
        return None, f"invalid: expected a string, got {type(text).__name__}"
    if len(text) > max_chars:
        return None, f"too_large: {len(text)} characters > {max_chars}"
    if not _depth_ok(text):
        return None, f"too_deep: {REASONS['too_deep']}"
    return _decode(text)


def _spans(text: str, rejects: Counter) -> list[tuple]:
    """The one-pass candidate finder (step 2 of the module docstring). Returns top-level nodes
    (start, end, children), children in the same form, in text order."""
    top, pos, n, search = [], 0, len(text), _TOKEN_RE.search
    rescan_left = 2 * n + 1024        # total characters re-read after broken strings
    while True:
        m = _OPEN_RE.search(text, pos)
        if m is None:
            return top
        start = m.start()
        stack = [(start, _CLOSER[m.group()], [])]     # (start, expected closer, finished kids)
        over, deep, p, why = 0, False, start + 1, None
        while stack:
            t = search(text, p)
            if t is None:
                why, p = "unclosed", n
                break
            p = t.end()
            g = t.lastgroup                     # "q": a closed string, None: an unclosed one,
            if g == "q":                        # "b": a bracket (the last character)
                continue
            if g is None:
                why = "string"
                break
            b = text[p - 1]
            if b in "[{":
                if len(stack) >= MAX_DEPTH or over:         # count, never store, the excess
                    over, deep = over + 1, True
                else:
                    stack.append((t.start(), _CLOSER[b], []))
            elif over:                                      # closing an uncounted level; the
                over -= 1                                   # candidate is rejected anyway
            elif b == stack[-1][1]:
                s0, _, kids = stack.pop()
                node = (s0, p, kids)
                if stack:
                    stack[-1][2].append(node)
            else:
                why = "mismatch"
                break
        if why is None:                                     # the outermost bracket closed
            if deep:
                rejects["too_deep"] += 1
            else:
                top.append(node)
            pos = p
            continue
        if why == "string" and p - start <= rescan_left:    # retry from the next character:
            rescan_left -= p - start                        # the quote may have been prose
            pos = start + 1
            continue
        if deep:
            rejects["too_deep"] += 1
        else:                       # no start inside can close past here: keep finished kids
            for _, _, kids in stack:
                top.extend(kids)
        pos = p


def scan_json(text: str) -> tuple[list[Any], Counter]:
    """(every decodable JSON object/array in `text`, outermost first and in text order;
    Counter of rejection keys). Bare JSON, JSON in prose and in ```json fences alike (the
    scanner finds the value inside a fence like any other). Never raises; linear time."""
    rejects: Counter = Counter()
    text = strip_think(text if isinstance(text, str) else "")
    if len(text) > MAX_SCAN_CHARS:
        rejects["too_large"] += 1
        text = text[-MAX_SCAN_CHARS:]
    # Decode from the end (the answer comes last), so a budget that runs out costs the head.
    values, budget, tries = [], 4 * len(text) + 4096, MAX_CANDIDATES
    todo = _spans(text, rejects)               # a stack: pop() yields the last span first
    while todo:
        s, e, kids = todo.pop()
        if e - s > MAX_VALUE_CHARS:
            rejects["too_large"] += 1
            todo.extend(kids)
            continue
        budget, tries = budget - (e - s), tries - 1
        if budget < 0 or tries < 0:            # 100,000 "[]" would be 100,000 json.loads calls
            rejects["budget"] += 1
            break
        v, why = _decode(text[s:e])
        if why is None:
            values.append(v)
        else:
            rejects[why.split(":")[0]] += 1
            todo.extend(kids)                  # e.g. "{see {"a": 1}}": the inner one decodes
    return values[::-1], rejects


def json_values(text: str) -> list[Any]:
    """Every JSON object/array found in `text` (see `scan_json`)."""
    return scan_json(text)[0]


def rejects_note(rejects: Counter) -> str:
    """The hostile-input part of a scan's rejections, for a drop or repair message ("" if none:
    prose in braces failing to decode is not worth reporting)."""
    keys = [k for k in REASONS if rejects.get(k)]
    return "; rejected: " + ", ".join(f"{k} ({REASONS[k]})" for k in keys) if keys else ""


# ---------------------------------------------------------------------------------------------
# Tags in model text: <think> and <tool_call> blocks (str.find, linear)
# ---------------------------------------------------------------------------------------------
def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], str]:
    """(inner text of every open..close block, stripped; the text with the blocks removed). An
    unclosed last block runs to the end of the text, as a model cut off mid-block leaves it."""
    inner, rest, pos = [], [], 0
    while True:
        i = text.find(open_tag, pos)
        if i < 0:
            rest.append(text[pos:])
            return inner, "".join(rest)
        rest.append(text[pos:i])
        j = text.find(close_tag, i + len(open_tag))
        end = len(text) if j < 0 else j
        inner.append(text[i + len(open_tag):end].strip())
        pos = len(text) if j < 0 else j + len(close_tag)


def strip_think(text: str) -> str:
    return _blocks(text or "", "<think>", "</think>")[1]


def strip_tool_calls(text: str) -> str:
    """The reply text without its `<tool_call>` blocks (the calls travel in tool_calls)."""
    return _blocks(text or "", "<tool_call>", "</tool_call>")[1].strip()


def _unparseable(k: int, why: str, raw: str) -> dict:
    """A call the tool layer answers with an error string (name "<unparseable>")."""
    return {"id": f"call_{k}", "name": "<unparseable>",
            "arguments": f"[{why}] {raw[:MAX_RAW_CHARS]}"}


def _call_from_obj(obj: Any, k: int, raw: str, why: str | None = None) -> dict:
    if why is not None or not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return _unparseable(k, why or "not an object with a string 'name'", raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    # depth <= MAX_DEPTH (bounded decode), so json.dumps cannot recurse too deep
    return {"id": f"call_{k}", "name": obj["name"],
            "arguments": args if isinstance(args, str) else json.dumps(args)}


def parse_text_tool_calls(text: str) -> list[dict]:
    """Tool calls written as text: `<tool_call>{"name":..,"arguments":..}</tool_call>` (Qwen /
    Hermes templates) or a plain JSON object with "name" and "arguments". Arguments are returned
    as a JSON string, as the OpenAI API does; a broken call keeps (the head of) its raw text and
    the reason, so the tool layer answers with an error string."""
    text = strip_think(text if isinstance(text, str) else "")
    blocks = _blocks(text, "<tool_call>", "</tool_call>")[0]
    calls = []
    for k, raw in enumerate(blocks):
        obj, why = loads(raw)
        calls.append(_call_from_obj(obj, k, raw, why))
    if blocks:
        return calls
    objs = [v for v in json_values(text) if isinstance(v, dict)
            and "name" in v and "arguments" in v and "start_turn" not in v]
    return [_call_from_obj(o, k, json.dumps(o)) for k, o in enumerate(objs)]


# ---------------------------------------------------------------------------------------------
# Chat backends: messages (OpenAI format) + tools -> ChatReply
# ---------------------------------------------------------------------------------------------
@dataclass
class ChatReply:
    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)   # [{"id", "name", "arguments": str}]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None          # "endpoint timeout", "http 500", "timeout", ... -> a drop


ChatFn = Callable[..., ChatReply]     # chat(messages, tools, deadline=None) -> ChatReply


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class OpenAIChat:
    """POST {base_url}/chat/completions with urllib. base_url includes /v1, as OPENAI_BASE_URL
    does by convention (e.g. http://localhost:8000/v1 for `vllm serve`)."""

    def __init__(self, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, timeout: float = 120.0, retries: int = 3,
                 backoff: float = 2.0, temperature: float = 0.0, max_tokens: int = 1024):
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/")
        self.model = model or os.environ.get("JUDGE_MODEL")
        if not self.base_url or not self.model:
            raise ValueError("judge 'openai' needs a base URL and a model: pass base_url=/model= "
                             "or set OPENAI_BASE_URL (e.g. http://localhost:8000/v1) and JUDGE_MODEL")
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.temperature, self.max_tokens = temperature, max_tokens

    def _post(self, data: bytes, timeout: float, deadline: float | None
              ) -> tuple[dict | None, str | None, bool]:
        """One HTTP attempt -> (response, error, retriable)."""
        req = urllib.request.Request(
            self.base_url + "/chat/completions", data=data, method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw, err = _read_capped(r, deadline)
        except urllib.error.HTTPError as e:
            return None, f"http {e.code}", e.code >= 500 or e.code == 429
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(e, TimeoutError) or isinstance(reason, TimeoutError):
                return None, "endpoint timeout", True
            return None, f"connection error: {reason}", True
        except http.client.HTTPException as e:    # bad status line, broken chunking, ...
            return None, f"connection error: {type(e).__name__}", True
        if err:
            return None, err, False
        resp, why = loads(raw, max_chars=MAX_RESPONSE_BYTES)
        if why:
            return None, f"bad_response: body is not usable JSON ({why})", False
        if not isinstance(resp, dict):
            return None, f"bad_response: body is a JSON {type(resp).__name__}, not an object", False
        return resp, None, False

    def _attempt(self, data: bytes, deadline: float | None) -> tuple[dict | None, str | None, bool]:
        """`_post`, bounded by the deadline: the socket timeout alone bounds each read, not a
        server that trickles a byte per timeout, so the attempt runs in a thread we stop
        waiting for when the budget is spent."""
        if deadline is None:
            return self._post(data, self.timeout, None)
        left = max(0.01, deadline - time.monotonic())
        box: list = []

        def run():
            try:
                box.append(self._post(data, min(self.timeout, left), deadline))
            except Exception as e:    # a client bug is this call's drop, not the run's crash
                box.append((None, f"client_error: {type(e).__name__}: {e}", False))
        th = threading.Thread(target=run, name="chat-http", daemon=True)
        th.start()
        th.join(left)
        return box[0] if box else (None, TIMEOUT, False)

    def __call__(self, messages: list[dict], tools: list[dict] | None,
                 deadline: float | None = None) -> ChatReply:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        if tools:
            body["tools"], body["tool_choice"] = tools, "auto"
        try:
            data = json.dumps(body).encode()
        except (TypeError, ValueError, RecursionError) as e:
            return ChatReply(error=f"bad_request: messages are not JSON ({type(e).__name__})")
        resp, err, attempt = None, None, 0
        for attempt in range(self.retries + 1):
            left = _left(deadline)
            if left is not None and left <= 0:
                return ChatReply(error=TIMEOUT + (f" (last error: {err})" if err else ""))
            resp, err, retriable = self._attempt(data, deadline)
            if resp is not None or not retriable:
                break
            if attempt < self.retries:
                pause = self.backoff * 2 ** attempt              # exponential backoff
                if left is not None and pause >= _left(deadline):
                    return ChatReply(error=f"{TIMEOUT} (last error: {err})")
                time.sleep(pause)
        if resp is None:
            if err.startswith("timeout"):
                return ChatReply(error=err)
            return ChatReply(error=f"{err}: after {attempt + 1} attempt(s), timeout {self.timeout}s")
        return _openai_reply(resp, messages)


def _read_capped(r: Any, deadline: float | None) -> tuple[bytes | None, str | None]:
    """The body in chunks (read1: one socket read each), at most MAX_RESPONSE_BYTES, stopping
    at the deadline -> (body, None) or (None, error)."""
    try:
        declared = int(r.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_RESPONSE_BYTES:
        return None, f"bad_response: body of {declared} bytes > {MAX_RESPONSE_BYTES}"
    chunks, size = [], 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            return None, TIMEOUT
        chunk = r.read1(1 << 16)
        if not chunk:
            return b"".join(chunks), None
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            return None, f"bad_response: body larger than {MAX_RESPONSE_BYTES} bytes"
        chunks.append(chunk)


def _count(v: Any) -> int | None:
    """A usage count, if it is one: a finite, non-negative, not absurd number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return int(v) if 0 <= v < 1e12 else None


def _content_text(c: Any) -> str:
    """`content` as text: a string, a list of parts ({"type": "text", "text": ...} or strings,
    as newer OpenAI-style servers send), or nothing."""
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    parts = c if isinstance(c, list) else [c]
    out = [p if isinstance(p, str) else p.get("text") if isinstance(p, dict) else None
           for p in parts]
    return "".join(s for s in out if isinstance(s, str))


def _openai_reply(resp: Any, messages: list[dict]) -> ChatReply:
    """Read one chat.completion response; malformed parts are drops or error-string calls."""
    choices = resp.get("choices") if isinstance(resp, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    msg = first.get("message") if isinstance(first, dict) else None
    if not isinstance(msg, dict):
        return ChatReply(error=f"bad_response: choices[0].message is "
                               f"{'missing' if msg is None else type(msg).__name__}, not an object")
    raw_calls = msg.get("tool_calls") or []
    calls = []
    for k, tc in enumerate(raw_calls if isinstance(raw_calls, list) else [raw_calls]):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            calls.append(_unparseable(k, "tool call is not {\"function\": {\"name\": str, ...}}",
                                      json.dumps(tc) if isinstance(tc, (dict, list)) else str(tc)))
            continue
        args = fn.get("arguments", "")
        cid = tc.get("id")
        calls.append({"id": cid if isinstance(cid, str) and cid else f"call_{k}",
                      "name": fn["name"],
                      "arguments": args if isinstance(args, str) else json.dumps(args)})
    content = _content_text(msg.get("content"))
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    pt, ct = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if pt is None:      # no (usable) usage report: estimate what was sent and received
        pt = sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
    if ct is None:
        ct = estimate_tokens(content) + sum(estimate_tokens(c["arguments"]) for c in calls)
    return ChatReply(content=content, tool_calls=calls, prompt_tokens=pt, completion_tokens=ct)


class HFChat:
    """A local transformers chat model. Tools are rendered by the tokenizer's chat template
    (`apply_chat_template(tools=...)`); tool calls are parsed from the generated text."""

    def __init__(self, model: Any, tokenizer: Any = None, max_new_tokens: int = 384,
                 temperature: float = 0.0, max_context: int | None = None):
        if isinstance(model, (str, os.PathLike)) or isinstance(tokenizer, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM, AutoTokenizer   # optional extra
        if isinstance(model, (str, os.PathLike)):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        elif isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        if tokenizer is None:
            raise ValueError("judge 'hf' needs a tokenizer when `model` is a model object")
        self.model, self.tok = model.eval(), tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", None)

    def _render(self, messages: list[dict], tools: list[dict] | None) -> str:
        msgs = []
        for m in messages:    # HF templates want tool-call arguments as dicts, not JSON strings
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{"type": "function", "id": c["id"], "function": {
                    "name": c["function"]["name"], "arguments": _loads_or_raw(c["function"]["arguments"])}}
                    for c in m["tool_calls"]]
            msgs.append(m)
        kw = {"tools": tools} if tools else {}
        return self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kw)

    def __call__(self, messages: list[dict], tools: list[dict] | None,
                 deadline: float | None = None) -> ChatReply:
        import torch
        left = _left(deadline)
        if left is not None and left <= 0:
            return ChatReply(error=TIMEOUT)
        try:
            prompt = self._render(messages, tools)
        except Exception as e:   # jinja errors depend on the data; a typed drop, never a crash
            return ChatReply(error=f"template: {type(e).__name__}: {e}")
        enc = self.tok(prompt, return_tensors="pt", add_special_tokens=False)
        n = enc["input_ids"].shape[1]                                    # prompt length
        if self.max_context and n + self.max_new_tokens > self.max_context:
            return ChatReply(error=f"context: prompt {n} + {self.max_new_tokens} new tokens "
                                   f"> {self.max_context}", prompt_tokens=n)
        gen = dict(max_new_tokens=self.max_new_tokens, do_sample=self.temperature > 0,
                   pad_token_id=self.tok.pad_token_id if self.tok.pad_token_id is not None
                   else self.tok.eos_token_id)
        if self.temperature > 0:
            gen["temperature"] = self.temperature
        if left is not None:
            gen["max_time"] = max(0.01, _left(deadline))   # generate stops between tokens
        if getattr(self.model.generation_config, "eos_token_id", None) is None:
            gen["eos_token_id"] = self.tok.eos_token_id
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model.generate(**{k: v.to(device) for k, v in enc.items()}, **gen)
        new = out[0, n:]                                                 # (new tokens,)
        text = self.tok.decode(new, skip_special_tokens=False)
        for sp in {self.tok.eos_token, self.tok.pad_token, "<|im_end|>", "<|endoftext|>"} - {None}:
            text = text.replace(sp, "")
        # tool calls stay in the text; the judge parses them like any text-only server's
        return ChatReply(content=text.strip(), prompt_tokens=int(n),
                         completion_tokens=int(new.numel()))


def _loads_or_raw(s: Any) -> Any:
    if not isinstance(s, str):
        return s
    v, why = loads(s)
    return {"raw": s} if why else v
