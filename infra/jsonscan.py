"""Bounded parsing of model text: JSON values and tool calls, in linear time.

    values, rejects = scan_json(reply_text)        # every JSON object/array in free text
    obj, why = loads(tool_arguments)               # one value, bounded depth and size
    calls = parse_text_tool_calls(reply_text)      # <tool_call>{...}</tool_call> or bare {"name", "arguments"}

1. `<think>` blocks are removed; a reply over `MAX_SCAN_CHARS` keeps its tail (the answer comes last).
2. One pass finds object/array candidates: outside a candidate only `{` and `[` matter (quotes in
   prose are prose); inside, JSON strings and brackets are tokenised by one regex and a bracket
   stack records every balanced span and its children. A mismatched closer or the end of text
   abandons the open candidates but keeps their finished children; a string broken by a newline
   rescans from just after the candidate's opening bracket, within a budget of 2x the text so the
   pass stays linear. Nesting beyond `MAX_DEPTH` rejects the candidate ("too_deep").
3. Candidates are decoded outermost first with `json.loads`; a failure descends into the
   children. Number literals over `MAX_NUMBER_CHARS` ("huge_number"), values over
   `MAX_VALUE_CHARS` ("too_large") and decoding past 4x the text or `MAX_CANDIDATES` candidates
   ("budget") are rejected and counted; NaN/Infinity decode as None.
Tag blocks are cut with `str.find`, not regexes: a lazy `.*?` between `\\s*` runs backtracks
quadratically on long whitespace. Leaves out JSON5 and other lenient JSON (single quotes,
trailing commas, raw newlines in strings are invalid, as for `json.loads`).
Imports no other project module.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

# ---------------------------------------------------------------------------------------------
# Limits (all ours; a judge reply is a few KB, so these are far above honest use)
# ---------------------------------------------------------------------------------------------
MAX_DEPTH = 64                # nesting of any JSON value we decode (proposals need 2)
MAX_NUMBER_CHARS = 40         # longest number literal; Python refuses ints over 4,300 digits
MAX_VALUE_CHARS = 100_000     # longest single JSON candidate handed to json.loads
MAX_SCAN_CHARS = 262_144      # longest reply text scanned for JSON (its tail is kept)
MAX_CANDIDATES = 2048         # JSON candidates decoded per reply (the last ones)
MAX_RAW_CHARS = 2000          # raw text kept for an unparseable tool call

REASONS = {                   # reason key -> what it means, for repair and drop messages
    "too_deep": f"JSON nested deeper than {MAX_DEPTH} levels",
    "too_large": f"a JSON value longer than {MAX_VALUE_CHARS} characters (or a reply over "
                 f"{MAX_SCAN_CHARS})",
    "huge_number": f"a number literal longer than {MAX_NUMBER_CHARS} characters",
    "budget": "the JSON decoding budget for this reply ran out",
}


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
