"""Fuzz tests: hostile input never raises, hangs or is accepted.

1. 12,000 random judge / critic replies (mixes of braces, brackets, quotes, backslashes, digits,
   `<tool_call>` and `<think>` tags, deep nesting, huge numbers, long whitespace runs, unicode,
   valid proposals, tool calls and label lists embedded in noise) through every parser of
   judge.py, methods/criticsearch.py and infra/chat.py, plus random chat.completion responses through `_openai_reply`: zero
   exceptions, well-typed results, embedded valid answers still found, a bounded total time.
2. 1,200 random requests (methods, paths, versions, headers, Content-Lengths, bodies) over raw
   sockets to a real retrieval server on 127.0.0.1 (port 0): every one answered, every answer a
   2xx/4xx with a JSON body (HEAD: headers only), and the server still answers a valid query.

Fixed seeds, so a failure replays exactly. Run: python -m pytest -q tests/test_fuzz.py
"""
import json
import os
import random
import socket
import sys
import time

import pytest

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from infra import chat  # noqa: E402
from infra import jsonscan  # noqa: E402
import tools as tool_defs  # noqa: E402  (what the judge sees)
from methods import criticsearch  # noqa: E402
import judge  # noqa: E402
from sims import searchqa as S  # noqa: E402
from rollout import Trajectory, Turn  # noqa: E402


# ---------------------------------------------------------------------------------------------
# A small group to validate against (success 1 has turns 0..4; failures 0 and 2)
# ---------------------------------------------------------------------------------------------
def _group() -> list[Trajectory]:
    def tr(tid, acts, won):
        turns = [Turn(t=k, obs=f"room {k}", admissible=[], text=f"<action>{a}</action>", action=a,
                      valid=True, next_obs=f"after {a}", reward=float(won and k == len(acts) - 1),
                      done=k == len(acts) - 1) for k, a in enumerate(acts)]
        return Trajectory(traj_id=tid, group_id=0, task=0, task_text="open the door",
                          task_type="t", turns=turns, won=won, score=float(won))
    return [tr(0, ["go north", "look", "look"], False),
            tr(1, ["go north", "take key", "go south", "unlock door", "open door"], True),
            tr(2, ["go south", "open door"], False)]


GROUP = _group()
REASON_KEYS = {"schema", "traj_id", "bounds", "reversed", "too_long", "terminal", "invalid_action"}

# ---------------------------------------------------------------------------------------------
# Reply generator
# ---------------------------------------------------------------------------------------------
SMALL = ["{", "}", "[", "]", '"', '"', "\\", ":", ",", " ", "  ", "\n", "\t", "\r", "0", "7",
         "-", ".", "e", "E+", "1e999", "NaN", "-Infinity", "true", "null", "x", "word", "é", "😀",
         "\u2028", "\x00", "\udc80", "'", '\\"', "\\u00e9", "\\ud800", '"failure_mode"',
         '"start_turn"', '"end_turn"', '"name"', '"arguments"', '"labels"', "```json", "```"]
TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
BIG = ["9" * 5000, "-" + "1" * 4400 + ".5", "[" * 1500, "{" * 1500, "]" * 1500,
       "[" * 800 + "]" * 800, '{"a":' * 400, '"' * 3001, "\\" * 3000, " " * 20000,
       "<tool_call>" + " " * 8000 + "x", "```" + " " * 8000, "{[" * 2000, '{"a\n' * 500,
       "[]" * 3000, "😀" * 5000]


def _valid_pieces(rng: random.Random) -> list[str]:
    s = rng.randint(0, 3)
    prop = {"failure_mode": rng.choice(["never takes the key", "é 😀", "x" * 50]),
            "start_turn": rng.choice([s, str(s), float(s), -1, 9, True, None, "two"]),
            "end_turn": rng.choice([s, s + 1, 4, "3", 1e300]), "rationale": rng.choice(["r", 5])}
    call = {"name": rng.choice(["get_segment", "search_trajectory", "rm"]),
            "arguments": rng.choice([{"traj_id": 0, "start_turn": 0, "end_turn": 1},
                                     {"query": "door", "top_k": rng.choice([3, 0, "x", 99])},
                                     '{"query": "look"}', "[1]", {}])}
    labels = [rng.choice([1, -1, 0, 0.5, "good", "bad", None, "x"]) for _ in range(rng.randint(0, 6))]
    return [json.dumps(prop), json.dumps(call), json.dumps(labels),
            f"<tool_call>{json.dumps(call)}</tool_call>", json.dumps({"labels": labels})]


def random_reply(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 60)):
        r = rng.random()
        if r < 0.88:
            parts.append(rng.choice(SMALL))
        elif r < 0.95:
            parts.append(rng.choice(TAGS))
        else:
            parts.append(rng.choice(_valid_pieces(rng)))
    if rng.random() < 0.06:                   # one in ~16 replies carries a huge piece
        parts.insert(rng.randint(0, len(parts)), rng.choice(BIG))
    return "".join(parts)


def mild_noise(rng: random.Random, n: int) -> str:
    """Noise without tags or huge pieces: an answer after it on its own line must be found."""
    return "".join(rng.choice(SMALL) for _ in range(rng.randint(0, n)))


def tail_noise(rng: random.Random, n: int) -> str:
    """Noise that can neither open nor close a JSON value."""
    return "".join(rng.choice([c for c in SMALL if not any(b in c for b in "{}[]")])
                   for _ in range(rng.randint(0, n)))


def random_response(rng: random.Random, depth: int = 0):
    """A random chat.completion-like object: right shape, wrong types, or junk."""
    junk = [None, "s", 5, -1, 1.5, float("nan"), float("inf"), True, [], {}, [1, "a"], 10 ** 30]
    if depth > 2 or rng.random() < 0.2:
        return rng.choice(junk)
    msg = rng.choice([
        {"content": rng.choice([random_reply(rng), None, [{"type": "text", "text": "hi"}, 3],
                                {"text": "x"}, 7])},
        {"content": None, "tool_calls": rng.choice([
            [{"id": rng.choice(["c", 5, None]), "function": {"name": rng.choice(["get_segment", 5]),
                                                              "arguments": rng.choice(["{}", {"a": 1}, 5, None])}}],
            ["str", 5, None], {"function": {}}, "x"])},
        "a string", random_response(rng, depth + 1)])
    resp = {"choices": rng.choice([[{"message": msg}], [msg], [], "x", [None], {"message": msg}])}
    if rng.random() < 0.7:
        resp["usage"] = rng.choice([{"prompt_tokens": rng.choice(junk), "completion_tokens": rng.choice(junk)},
                                    "x", None, []])
    return resp if rng.random() < 0.9 else random_response(rng, depth + 1)


def _check_reply(text: str, tools: judge.GroupTools, run_tools: bool):
    vals = jsonscan.json_values(text)
    assert isinstance(vals, list) and all(isinstance(v, (dict, list)) for v in vals)
    obj, why = judge.find_proposal(text)
    assert (obj is None) != (why is None)
    if obj is not None:
        prop, err = judge.validate_proposal(obj, GROUP, 1)
        assert (prop is None) != (err is None)
        if prop is not None:
            assert 0 <= prop.start_turn <= prop.end_turn < 4 and prop.end_turn - prop.start_turn < 4
        else:
            assert err.split(":")[0] in REASON_KEYS, err
    calls = jsonscan.parse_text_tool_calls(text)
    assert all(isinstance(c["name"], str) and isinstance(c["arguments"], str) for c in calls)
    if run_tools:
        for c in calls[:judge.MAX_CALLS_PER_ROUND]:
            out = tools.call(c["name"], c["arguments"])
            assert isinstance(out, str) and len(out) <= tool_defs.RESULT_CHARS + 40
    labels, reason = criticsearch.parse_labels(text, 4)
    assert len(labels) == 4 and set(labels) <= {-1.0, 0.0, 1.0}
    assert reason is None or labels == [0.0] * 4
    v, err = chat.loads(text[:3000])
    assert (err is None) or (v is None and err.split(":")[0] in
                             {"invalid", "too_large", "too_deep", "huge_number"})
    assert isinstance(jsonscan.strip_tool_calls(text), str)


@pytest.mark.slow
def test_fuzz_judge_and_critic_parsers():
    rng = random.Random(20261201)
    tools = judge.GroupTools(GROUP, 1)
    t0 = time.monotonic()
    for i in range(10_000):                   # random replies
        _check_reply(random_reply(rng), tools, run_tools=i % 10 == 0)
    for _ in range(1_000):                    # a valid proposal after noise, on its own line
        s = rng.randint(0, 3)
        want = {"failure_mode": "m", "start_turn": s, "end_turn": s, "rationale": "r"}
        text = mild_noise(rng, 40) + "\n" + json.dumps(want) + "\n" + tail_noise(rng, 40)
        _check_reply(text, tools, run_tools=False)
        assert judge.find_proposal(text)[0] == want, text
        prop, err = judge.validate_proposal(judge.find_proposal(text)[0], GROUP, 1)
        assert prop is not None and (prop.start_turn, prop.end_turn) == (s, s), err
    for _ in range(500):                      # a tool call after noise
        call = {"name": "get_segment", "arguments": {"traj_id": 0, "start_turn": 0, "end_turn": 1}}
        text = tail_noise(rng, 30) + f"<tool_call>{json.dumps(call)}</tool_call>" + mild_noise(rng, 30)
        calls = jsonscan.parse_text_tool_calls(text)
        assert calls[0]["name"] == "get_segment" and json.loads(calls[0]["arguments"])["end_turn"] == 1
    for _ in range(500):                      # a label list after noise
        want = [rng.choice([1, -1, 0]) for _ in range(4)]
        text = mild_noise(rng, 40) + "\n" + json.dumps(want) + "\n" + tail_noise(rng, 40)
        assert criticsearch.parse_labels(text, 4) == ([float(x) for x in want], None), text
    for _ in range(2_000):                    # random endpoint responses
        reply = chat._openai_reply(random_response(rng), [{"role": "user", "content": "hi"}])
        assert isinstance(reply, chat.ChatReply) and isinstance(reply.content, str)
        assert isinstance(reply.prompt_tokens, int) and reply.prompt_tokens >= 0
        assert isinstance(reply.completion_tokens, int) and reply.completion_tokens >= 0
        assert reply.error is None or reply.error.startswith("bad_response")
        assert all(isinstance(c["arguments"], str) and isinstance(c["id"], str) for c in reply.tool_calls)
    for _ in range(1_000):                    # random bytes as a response body
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        v, err = chat.loads(raw)
        assert err is None or (v is None and err.split(":")[0] in {"invalid", "too_deep", "huge_number"})
    assert time.monotonic() - t0 < 60.0


# ---------------------------------------------------------------------------------------------
# Retrieval server fuzz
# ---------------------------------------------------------------------------------------------
def _random_text(rng: random.Random) -> str:
    alphabet = "abc xyz Drassa Lorcan Voss é😀\u2028\x00\"\\{}[]"
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 20, 200, 1200])))


def _random_body(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.45:
        req = {"queries": [_random_text(rng) for _ in range(rng.choice([0, 1, 2, 5, 70]))],
               "topk": rng.choice([None, 1, 3, 100, 0, -1, 101, "3", True, 2.5, 10 ** 30]),
               "return_scores": rng.choice([True, False, "yes", None])}
        for k in list(req):
            if rng.random() < 0.2:
                del req[k]
        if rng.random() < 0.1:
            req = {"query": _random_text(rng)}
        return json.dumps(req, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if r < 0.6:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
    if r < 0.7:
        n = rng.choice([40, 1000, 100_000])
        return (rng.choice([b"[", b"{\"a\":"]) * n) + rng.choice([b"", b"]" * n])
    if r < 0.8:
        return rng.choice([b"", b"null", b"[]", b"{}", b"NaN", b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}",
                           b'{"queries": ["a"], "topk": 1e999}', b'\xef\xbb\xbf{"queries": ["a"]}',
                           b'{"queries": ["\\ud800"]}', b'{"queries": ["a"]} trailing'])
    if r < 0.81:
        return b"x" * (S.MAX_BODY + 1)
    return json.dumps({"queries": [rng.choice(["Drassa", "Lorcan Voss", "The Crimson Citadel"])],
                       "topk": rng.randint(1, 5)}).encode()


def _random_request(rng: random.Random) -> tuple[bytes, bool, str]:
    """-> (bytes to send, whether to half-close after sending, method)."""
    method = rng.choice(["POST"] * 8 + ["GET", "GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS",
                                       "TRACE", "CONNECT", "FOO", "post", "G\x00T", "PO ST"])
    path = rng.choice(["/retrieve"] * 8 + ["/retrieve/", "/health", "/", "/nope", "/retrieve?x=1",
                                           "/%00%ff", "*", "/" + "a" * rng.randint(1, 2000)])
    version = rng.choice(["HTTP/1.1"] * 6 + ["HTTP/1.0"] * 3 + ["HTTP/2.0", "HTTP/x", "HTTP/1.1.1",
                                                                "HTTP/0.9", "FOO/1.0", ""])
    line = f"{method} {path} {version}".rstrip() if rng.random() > 0.02 else rng.choice(
        ["", "   ", "\x00\x01garbage", "GET", "a b c d e"])
    body = _random_body(rng) if method != "GET" or rng.random() < 0.2 else b""
    headers, half_close = [], True
    r = rng.random()
    if r < 0.72:
        headers.append(f"Content-Length: {len(body)}")
    elif r < 0.76:
        headers.append(f"Content-Length: -{len(body) + 1}")
    elif r < 0.80:
        headers.append(rng.choice(["Content-Length: abc", "Content-Length: 1_0", "Content-Length: +1",
                                   "Content-Length: ", "Content-Length: 99999999999999999999"]))
    elif r < 0.84:
        headers.append(f"Content-Length: {len(body) + rng.randint(1, 50)}")        # short body
        half_close = rng.random() < 0.8       # else the server waits for it: a 408
    elif r < 0.88:
        headers.append(f"Content-Length: {max(0, len(body) - rng.randint(1, 10))}")  # extra bytes
    elif r < 0.91:
        headers += [f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"]
    elif r < 0.93:
        headers.append("Transfer-Encoding: chunked")
    for h in rng.sample(["Content-Type: application/json", "Connection: keep-alive", "Connection: close",
                         "Expect: 100-continue", "X-\xff: \x01\x7f", "no colon here", "Host: " + "h" * 300,
                         "X-Long: " + "y" * rng.choice([10, 70_000]), "Accept: */*"], rng.randint(0, 3)):
        headers.append(h)
    if rng.random() < 0.01:
        headers += ["X: y"] * 120                                             # too many headers
    head = (line + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode("latin-1", "replace")
    return head + body, half_close, method


def _exchange(port: int, data: bytes, half_close: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass            # the server may answer and close before a bogus body is all sent
        out = b""
        while True:
            try:
                chunk = s.recv(1 << 16)
            except OSError:     # reset: whatever arrived is all there is (checked by the caller)
                break
            if not chunk:
                return out
            out += chunk
        return out


def test_fuzz_retrieval_server():
    rng = random.Random(7)
    index = S.get_world(0, 120, 60, 60, 200)[0]
    srv, url = S.start_server(index, timeout=0.3)       # a stalled body costs 0.3 s, not 10
    port = srv.server_address[1]
    codes, t0 = {}, time.monotonic()
    try:
        for i in range(1_200):
            data, half_close, method = _random_request(rng)
            out = _exchange(port, data, half_close)
            assert out.startswith(b"HTTP/1.0 "), (i, data[:120], out[:120])     # answered
            head, _, body = out.partition(b"\r\n\r\n")
            code = int(head.split(b" ", 2)[1])
            codes[code] = codes.get(code, 0) + 1
            assert 200 <= code < 300 or 400 <= code < 500, (i, data[:120], out[:200])
            assert b"content-type: application/json" in head.lower(), (i, data[:120], head)
            if body or method != "HEAD":
                json.loads(body)                           # every body is JSON
        ok = S.SearchClient(url).search("Drassa")          # and it still serves
        assert ok and "Drassa" in ok[0]["contents"]
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(codes) >= 6 and codes.get(200, 0) > 20 and codes.get(400, 0) > 100, codes
    assert time.monotonic() - t0 < 120
