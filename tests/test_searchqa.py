"""Built-in SearchQA: EM normalisation, projection, env loop, expert, vocabulary; the retrieval
server and client together over real HTTP on 127.0.0.1 (ephemeral ports).

Run: python -m pytest -q tests/test_searchqa.py
"""
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import envs  # noqa: E402
from sims import searchqa as S  # noqa: E402


@pytest.fixture(scope="module")
def server():
    index = S.get_world(0, 120, 60, 60, 200)[0]
    srv, url = S.start_server(index)
    yield index, url
    srv.shutdown()
    srv.server_close()


def _post(url, body: bytes, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# ---------------------------------------------------------------------------------------------
def test_normalisation_and_em():
    assert S.normalize_answer("  The  Beatles! ") == "beatles"
    assert S.normalize_answer("A cat's   toy.") == "cats toy"
    assert S.normalize_answer("Eiffel-Tower") == "eiffeltower"        # punctuation deleted, not spaced
    assert S.normalize_answer("theatre an apple") == "theatre apple"  # articles only as whole words
    assert S.em("an Apple.", ["apple", "pear"]) == 1.0 and S.em("apples", ["apple"]) == 0.0
    assert S.em_response("<answer>x</answer> then <answer> The Quillon Foods </answer>", ["Quillon Foods"]) == 1.0
    assert S.em_response("no tags", ["no tags"]) == 0.0


def test_parse_projection():
    assert S.parse("<think>hm</think><search> Lorcan Voss </search> junk") == ("<search>Lorcan Voss</search>", True)
    assert S.parse("<answer>Drassa</answer> and more") == ("<answer>Drassa</answer>", True)
    # Search-R1 cuts after </search> when there is one, so an answer before it makes both kinds
    assert S.parse("<answer>Drassa</answer><search>x</search>") == ("", False)
    assert S.parse("no block") == ("", False)
    assert S.parse("<search>a<answer>b</answer>") == ("", False)             # both kinds
    assert S.parse("<search><search>a</search>") == ("", False)              # repeated tag
    assert S.parse("<action><search>a</search></action>") == ("<search>a</search>", True)


def test_env_loop_formats():
    env = S.make("test")
    obs, info = env.reset(0)
    assert obs == info["task"] and obs.endswith("?") and info["admissible"] == [] and info["task_type"] in S.TASK_TYPES
    anchor = env.q.hops[0]
    obs, r, d, info = env.step(f"<search>{anchor}</search>")
    assert obs.startswith(f'\n\n<information>Doc 1(Title: "{anchor}") {anchor} ') and obs.endswith("</information>\n\n")
    assert obs.count("\nDoc ") == 2 and (r, d) == (0.0, False)
    obs, r, d, info = env.step("what?")
    assert obs == S.INVALID and (r, d) == (0.0, False)
    obs, r, d, info = env.step(f"<answer>{env.q.golden_answers[0].upper()}</answer>")
    assert (r, d, info["won"], info["score"]) == (1.0, True, True, 1.0)
    assert env.step("<answer>x</answer>") == (obs, 0.0, True, info)   # after done


def test_turn_limit_and_wrong_answer():
    env = S.make("test")
    env.reset(1)
    for k in range(3):
        assert env.step("<search>nothing</search>")[2] is False
    obs, r, d, info = env.step("<search>nothing</search>")
    assert d and r == 0.0 and not info["won"]
    env.reset(1)
    assert env.step("<answer>Atlantis</answer>")[1:3] == (0.0, True)


def test_bad_actions_never_raise():
    env = S.make("train")
    for a in ["", "x" * 1_000_000, "<search>" + "word " * 200_000 + "</search>", "<search>ünïcödé 🔍</search>",
              "<search></search>", "<<<search>>>]][[</answer>", "<answer></answer>", None, 5]:
        env.reset(2)
        obs, r, d, info = env.step(a)
        assert isinstance(obs, str) and r in (0.0, 1.0)


def test_snapshot_restore_exact():
    env = S.make("test")
    env.reset(5)
    env.step(env.expert_action())
    snap = env.snapshot()
    acts = [env.expert_action(), "<search>Drassa</search>", env.expert_action()]
    a = [env.step(x) for x in acts]
    env.restore(snap)
    assert [env.step(x) for x in acts] == a


def test_expert_succeeds_on_all_generated_tasks():
    for split in ("test", "train"):
        env = S.make(split)
        assert len(env.questions) >= (200 if split == "test" else 100)
        for t in range(len(env.questions)):
            env.reset(t)
            for _ in range(env.max_steps):
                obs, r, done, info = env.step(env.expert_action())
                if done:
                    break
            assert info["won"] and env.steps <= 3, (split, t, info["task"])


def test_random_detours_are_searches_the_expert_recovers_from():
    """SearchQA has no admissible list, so the warm start's ε-detours come from the env: a search
    for a corpus title or for words of the question. After one detour the expert still wins
    within the 4-turn budget."""
    rng = random.Random(0)
    env = S.make("train")
    titles = set(env.index.title_id)
    for t in range(60):
        env.reset(t)
        a = env.random_action(rng)
        q = re.fullmatch(r"<search>(.*)</search>", a).group(1)
        assert q in titles or set(q.split()) <= set(re.findall(r"[A-Za-z]+", env.q.question))
        obs, r, done, info = env.step(a)
        assert obs.startswith("\n\n<information>") and not done
        while not done:
            obs, r, done, info = env.step(env.expert_action())
        assert info["won"], (t, a)


def test_the_kb_is_the_worlds_not_the_seeds():
    """Every run seed answers world 0's questions over world 0's KB; `--env-opt world=N` picks
    another; the real backend refuses the option."""
    a, b = S.make("test", seed=0), S.make("test", seed=3)
    assert a.index is b.index and [q.question for q in a.questions] == [q.question for q in b.questions]
    assert S.make("train", seed=7).questions[:20] == S.make("train", seed=0).questions[:20]
    kw = envs.parse_env_opts(S.SPEC, ["world=2"])
    c = S.SPEC.make(split="test", seed=0, **kw)
    assert kw == {"world": 2} and c.index is S.make("test", world=2).index and c.index is not a.index
    with pytest.raises(ValueError, match="real backend"):
        S.make("test", backend="real", world=1, data_path="x.jsonl")


def test_vocabulary_covers_everything():
    tok = lambda s: re.findall(r"[A-Za-z]+|[0-9]|[^A-Za-z0-9\s]", s)  # noqa: E731
    vocab = {t for w in S.vocabulary() for t in tok(w)}
    env, rnd, seen = S.make("train", world=2), random.Random(0), set()
    words = [w for w in S.vocabulary() if len(w) < 30]
    for t in range(150):
        obs, info = env.reset(t)
        hist, texts = [], [obs]
        for _ in range(env.max_steps):
            a = env.expert_action() if rnd.random() < 0.6 else f"<search>{' '.join(rnd.sample(words, 2))}</search>"
            nobs, r, done, info = env.step(a)
            hist.append((obs, a))
            obs = nobs
            texts += [a, obs, S.SPEC.compact_prompt(envs.PromptInput(info["task"], obs, [], hist, len(hist)), 2)]
            if done:
                break
        for s in texts:
            seen |= set(tok(s))
    assert seen - vocab == set()


def test_chat_prompt():
    v = envs.PromptInput("Who founded Quorvex Labs", "Who founded Quorvex Labs?", [], [], 0)
    p = S.chat_prompt(v, 4)
    assert p.startswith("Answer the given question.") and p.endswith("Question: Who founded Quorvex Labs?\n")
    v2 = envs.PromptInput(v.task, "\n\n<information>Doc 1(Title: \"X\") y</information>\n\n", [], [(v.obs, "<search>Quorvex Labs</search>")], 1)
    assert S.chat_prompt(v2, 4).endswith("?\n<search>Quorvex Labs</search>\n\n<information>Doc 1(Title: \"X\") y</information>\n\n")
    assert envs.get_spec("searchqa") is S.SPEC


# --------------------------------------------------------------------------------------------- server
def _read_reply(s: socket.socket) -> tuple[int, str, bytes]:
    """Read one HTTP reply to EOF from a raw socket -> (status code, header text, body)."""
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head.decode("latin-1").lower(), body


def _raw(url: str, request: bytes, half_close: bool = True) -> tuple[int, str, bytes]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return _read_reply(s)


def test_client_and_server_agree(server):
    index, url = server
    c = S.SearchClient(url)
    got = c.batch(["Lorcan Voss", "The Crimson Citadel"], topk=3)
    want = [[d for d, _ in index.search(q, 3)] for q in ["Lorcan Voss", "The Crimson Citadel"]]
    assert [[d["contents"] for d in r] for r in got] == [[d["contents"] for d in r] for r in want]
    code, out = _post(url, json.dumps({"queries": ["Lorcan Voss"], "topk": 2, "return_scores": True}).encode())
    item = out["result"][0][0]
    assert code == 200 and set(item) == {"document", "score"} and {"id", "contents", "title", "text"} <= set(item["document"])
    code, out = _post(url, json.dumps({"queries": ["Lorcan Voss"], "topk": None}).encode())   # bare docs, default topk 3
    assert code == 200 and "contents" in out["result"][0][0] and len(out["result"][0]) == 3
    code, out = _post(url, json.dumps({"query": "Lorcan Voss", "topk": 3, "return_scores": True}).encode())  # verl-agent
    assert code == 200 and len(out["result"]) == 1


@pytest.mark.parametrize("body,code", [
    (b"{not json", 400), (b"\xff\xfe", 400), (b"[1, 2]", 400), (b"{}", 400),
    (json.dumps({"queries": "a string"}).encode(), 400), (json.dumps({"queries": [1, 2]}).encode(), 400),
    (json.dumps({"queries": ["a"], "topk": 10 ** 9}).encode(), 400), (json.dumps({"queries": ["a"], "topk": "3"}).encode(), 400),
    (json.dumps({"queries": ["a"], "topk": True}).encode(), 400), (json.dumps({"queries": ["a"], "return_scores": "yes"}).encode(), 400),
    (json.dumps({"queries": ["a"] * 1000}).encode(), 413), (json.dumps({"queries": ["a" * 5000]}).encode(), 413),
    (b"x" * (S.MAX_BODY + 10), 413),
])
def test_server_rejects_bad_requests_and_keeps_serving(server, body, code):
    _, url = server
    got, out = _post(url, body)
    assert got == code and "error" in out
    assert _post(url, json.dumps({"queries": ["Drassa"]}).encode())[0] == 200


def test_server_paths_and_raw_socket(server):
    _, url = server
    base = url.rsplit("/", 1)[0]
    assert _post(base + "/nope", b"{}")[0] == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=5)
    assert e.value.code == 405
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:   # no Content-Length
        s.sendall(b"POST /retrieve HTTP/1.0\r\n\r\n")
        assert b" 411 " in s.recv(1000)
    with socket.create_connection((host, int(port)), timeout=5) as s:   # garbage request line
        s.sendall(b"\x00\x01garbage\r\n\r\n")
        code, headers, body = _read_reply(s)      # a status line and JSON, not bare HTTP/0.9 HTML
        assert code == 400 and "application/json" in headers and "error" in json.loads(body)
    assert _post(url, json.dumps({"queries": ["Drassa"]}).encode())[0] == 200


def test_server_deeply_nested_body_is_a_400(server):
    _, url = server
    code, out = _post(url, b"[" * 100_000 + b"]" * 100_000)           # 200 KB: RecursionError before
    assert code == 400 and "nested deeper" in out["error"]
    code, out = _post(url, b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}")
    assert code == 400 and "malformed JSON" in out["error"]            # no 4,300-digit ValueError
    assert _post(url, json.dumps({"queries": ["Drassa"]}).encode())[0] == 200


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "post"])
def test_server_other_methods_get_json_405(server, method):
    _, url = server
    code, headers, body = _raw(url, f"{method} /retrieve HTTP/1.1\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    assert code == 405 and "application/json" in headers and "allow: get, head, post" in headers
    assert "not allowed" in json.loads(body)["error"]


@pytest.mark.parametrize("headers,body,code", [
    ("Content-Length: -5", b"{}", 400), ("Content-Length: 1_0", b"{}", 400),
    ("Content-Length: +2", b"{}", 400), ("Content-Length: 2\r\nContent-Length: 3", b"{}", 400),
    ("Content-Length: 50", b'{"queries": ["a"]}', 400),                  # shorter than declared
    ("Content-Length: 99999999999", b"{}", 413), ("Transfer-Encoding: chunked", b"2\r\n{}\r\n0\r\n\r\n", 411),
    ("Content-Length: 2", b"{}", 400),
], ids=["negative", "underscore", "plus", "conflicting", "short", "huge", "chunked", "empty_object"])
def test_server_bad_content_length_is_a_json_4xx(server, headers, body, code):
    _, url = server
    got, h, raw = _raw(url, f"POST /retrieve HTTP/1.1\r\n{headers}\r\n\r\n".encode() + body)
    assert got == code and "application/json" in h and json.loads(raw)["error"]
    assert _post(url, json.dumps({"queries": ["Drassa"]}).encode())[0] == 200


def test_server_http_server_errors_are_json(server):
    _, url = server
    for req, code in [(b"POST /retrieve HTTP/x\r\n\r\n", 400), (b"GET /health HTTP/2.0\r\n\r\n", 400),
                      (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
                      (b"GET /health HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", 431),
                      (b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431)]:
        got, headers, body = _raw(url, req)
        assert got == code and "application/json" in headers and "error" in json.loads(body), req[:40]
    got, headers, body = _raw(url, b"HEAD /health HTTP/1.1\r\n\r\n")
    assert got == 200 and "application/json" in headers and body == b""


def test_server_stalled_body_gets_408():
    index = S.get_world(0, 120, 60, 60, 200)[0]
    srv, url = S.start_server(index, timeout=0.3)
    try:
        t0 = time.monotonic()       # 10 bytes of 50 declared, connection left open
        got, _, body = _raw(url, b"POST /retrieve HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"queries\"", half_close=False)
        assert got == 408 and "not received" in json.loads(body)["error"] and time.monotonic() - t0 < 3
    finally:
        srv.shutdown()
        srv.server_close()


def test_server_client_disconnect_is_one_line_no_traceback(capsys):
    index = S.get_world(0, 120, 60, 60, 200)[0]
    srv, url = S.start_server(index)
    host, port = url.split("//")[1].split("/")[0].split(":")
    big = json.dumps({"queries": ["Drassa Velmora Lorcan Voss"] * 64, "topk": 100, "return_scores": True}).encode()
    try:
        for _ in range(3):     # send, then reset the connection before reading the large answer
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        deadline = time.monotonic() + 5
        while srv.RequestHandlerClass.stats["disconnects"] + srv.RequestHandlerClass.stats[200] < 3 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _post(url, json.dumps({"queries": ["Drassa"]}).encode())[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    gone = srv.RequestHandlerClass.stats["disconnects"]
    assert gone >= 1 and err.count("client gone") == gone


def _stub(body: bytes):
    """A server that answers every POST with `body` (for client tests)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/retrieve"


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000, b'{"result": [[{"document": {"id": ' + b"9" * 5000 + b"}}]]}",
    b"\xff\xfe", b"{}", b'{"result": "abc"}', b'{"result": [[], []]}', b"null",
], ids=["deep", "huge_int", "not_utf8", "no_result", "result_string", "wrong_count", "null"])
@pytest.mark.slow
def test_client_rejects_malformed_responses(body):
    srv, url = _stub(body)
    try:
        with pytest.raises(ValueError, match="malformed response"):
            S.SearchClient(url, retries=0).search("x")
    finally:
        srv.shutdown()
        srv.server_close()


def test_client_skips_unusable_documents():
    srv, url = _stub(json.dumps({"result": [[{"document": "junk"}, 5, {"id": 1, "contents": '"T"\nt'}]]}).encode())
    try:
        assert S.SearchClient(url, retries=0).search("x") == [{"id": "1", "contents": '"T"\nt'}]
    finally:
        srv.shutdown()
        srv.server_close()


def test_client_errors(server):
    _, url = server
    with pytest.raises(ValueError, match="rejected"):
        S.SearchClient(url).search("a" * 5000)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/retrieve"
    s.close()
    with pytest.raises(RuntimeError, match="unreachable"):
        S.SearchClient(dead, timeout=1, retries=1, backoff=0.01).search("x")


def test_real_backend_against_server(server, tmp_path):
    _, url = server
    f = tmp_path / "test.jsonl"
    f.write_text(json.dumps({"question": "Who directed The Crimson Citadel", "golden_answers": ["Lorcan Voss"],
                             "data_source": "demo"}) + "\n")
    env = S.make("test", backend="real", data_path=str(tmp_path / "{split}.jsonl"), search_url=url)
    obs, info = env.reset(0)
    assert obs == "Who directed The Crimson Citadel?" and info["task_type"] == "demo"
    obs, *_ = env.step("<search>The Crimson Citadel</search>")
    assert 'Doc 1(Title: "The Crimson Citadel")' in obs
    assert env.step("<search>" + "z" * 5000 + "</search>")[0].startswith("\n\n<information>")  # cut, never raises
    assert env.step("<answer>lorcan voss</answer>")[1] == 1.0
    with pytest.raises(FileNotFoundError):
        S.make("test", backend="real", data_path=str(tmp_path / "missing.jsonl"), search_url=url)
    with pytest.raises(ValueError, match="data_path"):
        S.make("test", backend="real")


def test_serve_command(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "0", "contents": '"Zed"\nZed is a test.'}) + "\n")
    p = subprocess.Popen([sys.executable, "-m", "sims.searchqa", "serve", "--port", "0", "--corpus", str(corpus)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = p.stdout.readline()
        url = line.split(" at ")[1].strip()
        assert S.SearchClient(url).search("zed")[0]["contents"] == '"Zed"\nZed is a test.'
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_train_max_steps_sets_the_turn_budget():
    """train.py's --max-steps reaches SearchQA as its turn budget (a turn is a step here), as for the
    other benchmarks; without it the paper's 4 turns."""
    from sims import searchqa
    assert searchqa.make("train", seed=0, max_steps=8).max_steps == 8
    assert searchqa.make("train", seed=0).max_steps == 4
