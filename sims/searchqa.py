"""SearchQA, built in: multi-hop questions over a fictional knowledge base, Search-R1's interaction
format, a BM25 index, a Search-R1-compatible retrieval server and its HTTP client.

What this implements (facts from Search-R1 and its retrieval server; our code)
-----------------------------------------------------------------------------
In full, with the server's request format and error rules: docs/simulators.md ("SearchQA").
* A fictional KB (~300 entities: people, cities, countries, companies, films), one document per
  entity in wiki-18's format, and 2-hop questions of 6 kinds (the task types), e.g. "Where was the
  founder of Quorvex Labs born?"; the relations are drawn, so an answer takes two searches.
* One fixed KB and question list per `world` (`--env-opt world=N`, default 0), never a function
  of the run's `--seed` (Search-R1's corpus and datasets are fixed), so a warm start shared by
  every seed (`--bc-seed 0`) was cloned in the KB it is trained and evaluated on.
* Search-R1's loop: the first `<(search|answer)>(.*?)</\\1>` of an action is executed. search ->
  the top-3 documents inside <information>...</information>; answer -> the episode ends with
  reward EM; anything else -> Search-R1's "My previous action is invalid. ..." message.
  4 turns by default (the paper's max_turns); no answer by then = reward 0.
* Exact match (`qa_em.py`): lowercase, drop punctuation and articles, collapse whitespace;
  EM = 1 if the normalised prediction equals any normalised gold answer; on a whole response the
  prediction is the LAST <answer>...</answer>.
* A Search-R1-compatible retrieval server (`POST /retrieve`; standard library only, 127.0.0.1 by
  default) that answers every malformed request with a JSON 4xx and keeps serving, and
  `SearchClient` for any such server (timeouts, bounded retries, a malformed response is a ValueError).
* `backend="real"`: the client against $SEARCH_URL (default http://127.0.0.1:8000/retrieve) plus
  QA data from a jsonl/parquet file with `question` and `golden_answers` (FlashRAG format).

What it simplifies
------------------
* BM25 (bm25s, our own lowercase alphanumeric tokenizer, no stemming) instead of E5 dense
  retrieval over wiki-18; queries are cut to 1,000 characters (E5 truncates at 256 tokens).
* The built-in KB is small and templated; questions are only 2-hop "compositional" ones.
* The train split cycles through its question pool (index modulo pool size); test is fixed (200).

Run: `python -m sims.searchqa serve --port 8000` (built-in corpus; `--corpus file.jsonl` for your
own {"id", "contents"} corpus); tests: `python -m pytest -q tests/test_searchqa.py`.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import string
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

import envs

# ---------------------------------------------------------------------------------------------
# Fixed name lists (seed-independent, so vocabulary() is finite; relations are what is random)
# ---------------------------------------------------------------------------------------------
FIRST = ["Ardel", "Brisa", "Corvin", "Dalia", "Emrys", "Fenna", "Galen", "Hesper", "Ilsa", "Joren",
         "Kaela", "Lorcan", "Mirela", "Nestor", "Orla", "Perrin", "Quilla", "Rowan", "Sabine", "Tamsin",
         "Ulric", "Vesna", "Wendel", "Xaria", "Yorick", "Zelda", "Alaric", "Bettina", "Cassian", "Delphine"]
LAST = ["Voss", "Harrow", "Kettleby", "Marchetti", "Osterlund", "Pellworth", "Quint", "Ravensdale",
        "Strand", "Thorne", "Ulvaeus", "Varga", "Whitlock", "Ysander", "Zorn", "Abernath", "Brackley",
        "Castellan", "Dunmore", "Eskildsen", "Fairbrook", "Grayling", "Holloway", "Ingram", "Jessup",
        "Kirkland", "Lindqvist", "Merriweather", "Northcott", "Orsini"]
CITIES = ["Drassa", "Velmora", "Kessington", "Orvane", "Talreth", "Brinmoor", "Caldera Rock", "Eastmere",
          "Fallowdeep", "Gorsica", "Halvik", "Ironbay", "Juniper Falls", "Korvath", "Lunthorpe", "Marrowick",
          "Nettlecombe", "Ostwick", "Pelaro", "Quarry Hill", "Rivenlow", "Saltmarch", "Tyrnau", "Umbrell",
          "Vantrell", "Westerhold", "Yarrowby", "Zennor Bay", "Ashgrove", "Brightwater",
          "Coldharbour", "Dunmarsh", "Elderfield", "Frostholm", "Glimmerdale", "Hollowmere",
          "Ivybridge", "Kingsreach", "Larkspur", "Mistral Point"]
COUNTRIES = ["Arvenia", "Belastra", "Corundia", "Dravonia", "Estmark", "Fellandria", "Galvoria",
             "Hesperin", "Istoria", "Jorvania", "Kestrelia", "Lunaris"]
COMPANY_STEMS = ["Quorvex", "Altima", "Brightforge", "Cindral", "Dynamo", "Everlink", "Ferrovia",
                 "Glintwell", "Helixa", "Ionara", "Jadestone", "Kinetra", "Lumora", "Meridian",
                 "Nordhaven", "Omnivale", "Pyxis", "Quillon", "Runeworks", "Solvane"]
COMPANY_SUFFIX = ["Labs", "Systems", "Foods", "Motors", "Media"]
FILM_ADJ = ["Silent", "Crimson", "Hollow", "Endless", "Broken", "Golden", "Frozen", "Distant",
            "Burning", "Quiet", "Wandering", "Velvet"]
FILM_NOUN = ["Harbor", "Lantern", "Orchard", "Meridian", "Tide", "Archive", "Compass", "Garden",
             "Signal", "Voyage", "Citadel", "Echo"]
PROFESSIONS = ["painter", "engineer", "novelist", "chemist", "architect", "violinist", "economist",
               "photographer", "surgeon", "historian"]
INDUSTRIES = ["software", "shipping", "food", "energy", "textile", "aerospace", "media", "mining"]
GENRES = ["drama", "comedy", "thriller", "documentary", "western", "musical"]

# question kind -> (template, anchor entity type); each needs two lookups (anchor doc, bridge doc)
QUESTIONS = {
    "founder_birthplace": ("Where was the founder of {x} born?", "company"),
    "hq_country": ("In which country is {x} headquartered?", "company"),
    "director_employer": ("Which company does the director of {x} work for?", "film"),
    "director_birthplace": ("In which city was the director of {x} born?", "film"),
    "birth_country": ("In which country was {x} born?", "person"),
    "employer_founder": ("Who founded the company that {x} works for?", "person"),
}
TASK_TYPES = tuple(QUESTIONS)
MAX_QUERY_CHARS = 1000          # env-side cut of search queries (and the server's 4xx limit below)
INVALID = ("\nMy previous action is invalid. If I want to search, I should put the query between <search> "
           "and </search>. If I want to give the final answer, I should put the answer between <answer> "
           "and </answer>. Let me try again.\n")
PREFIX = ("Answer the given question. You must conduct reasoning inside <think> and </think> first every "
          "time you get new information. After reasoning, if you find you lack some knowledge, you can call "
          "a search engine by <search> query </search> and it will return the top searched results between "
          "<information> and </information>. You can search as many times as your want. If you find no "
          "further external knowledge needed, you can directly provide the answer inside <answer> and "
          "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
          "Question: {question}\n")


# ---------------------------------------------------------------------------------------------
# Exact match (Search-R1 qa_em.py)
# ---------------------------------------------------------------------------------------------
def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em(prediction: str, golds: list[str]) -> float:
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in golds))


def em_response(response: str, golds: list[str]) -> float:
    """EM of a whole response: the LAST <answer>...</answer> is the prediction (0 if none)."""
    m = re.findall(r"<answer>(.*?)</answer>", response, re.DOTALL)
    return em(m[-1].strip(), golds) if m else 0.0


# ---------------------------------------------------------------------------------------------
# The fictional KB and its corpus
# ---------------------------------------------------------------------------------------------
@dataclass
class Question:
    question: str
    golden_answers: list[str]
    kind: str                       # task type
    hops: tuple[str, str] = ("", "")   # (anchor doc title, bridge doc title): what the expert searches


def build_kb(world: int = 0, n_people: int = 120, n_companies: int = 60, n_films: int = 60):
    """-> (docs [{"id", "contents"}], questions [Question]). Deterministic in the arguments."""
    rng = np.random.default_rng([world, 77])
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    people = [f"{FIRST[i // len(LAST)]} {LAST[i % len(LAST)]}"
              for i in rng.choice(len(FIRST) * len(LAST), size=n_people, replace=False)]
    companies = [f"{COMPANY_STEMS[i // len(COMPANY_SUFFIX)]} {COMPANY_SUFFIX[i % len(COMPANY_SUFFIX)]}"
                 for i in rng.choice(len(COMPANY_STEMS) * len(COMPANY_SUFFIX), size=n_companies, replace=False)]
    films = [f"The {FILM_ADJ[i // len(FILM_NOUN)]} {FILM_NOUN[i % len(FILM_NOUN)]}"
             for i in rng.choice(len(FILM_ADJ) * len(FILM_NOUN), size=n_films, replace=False)]
    country_of = {c: pick(COUNTRIES) for c in CITIES}
    born = {p: pick(CITIES) for p in people}
    works = {p: pick(companies) for p in people}
    founder = {c: pick(people) for c in companies}
    hq = {c: pick(CITIES) for c in companies}
    director = {f: pick(people) for f in films}
    docs = []

    def add(title: str, text: str):
        docs.append({"id": str(len(docs)), "contents": f'"{title}"\n{text}'})

    for p in people:
        add(p, f"{p} is a {pick(PROFESSIONS)} who was born in {born[p]}. {p} works for {works[p]}.")
    for c in CITIES:
        add(c, f"{c} is a city in {country_of[c]}. {c} has about {int(rng.integers(2, 10))}0 thousand inhabitants.")
    for k in COUNTRIES:
        caps = [c for c in CITIES if country_of[c] == k]
        add(k, f"{k} is a country." + (f" Its largest city is {caps[0]}." if caps else ""))
    for c in companies:
        add(c, f"{c} is a {pick(INDUSTRIES)} company founded by {founder[c]} in 19{int(rng.integers(10, 100))}. "
               f"{c} is headquartered in {hq[c]}.")
    for f in films:
        add(f, f"{f} is a 19{int(rng.integers(10, 100))} {pick(GENRES)} film directed by {director[f]}.")
    qs = []
    for c in companies:
        qs.append(Question(QUESTIONS["founder_birthplace"][0].format(x=c), [born[founder[c]]], "founder_birthplace", (c, founder[c])))
        qs.append(Question(QUESTIONS["hq_country"][0].format(x=c), [country_of[hq[c]]], "hq_country", (c, hq[c])))
    for f in films:
        qs.append(Question(QUESTIONS["director_employer"][0].format(x=f), [works[director[f]]], "director_employer", (f, director[f])))
        qs.append(Question(QUESTIONS["director_birthplace"][0].format(x=f), [born[director[f]]], "director_birthplace", (f, director[f])))
    for p in people:
        qs.append(Question(QUESTIONS["birth_country"][0].format(x=p), [country_of[born[p]]], "birth_country", (p, born[p])))
        qs.append(Question(QUESTIONS["employer_founder"][0].format(x=p), [founder[works[p]]], "employer_founder", (p, works[p])))
    return docs, qs


# ---------------------------------------------------------------------------------------------
# BM25 index (bm25s) and Search-R1's passage formatting
# ---------------------------------------------------------------------------------------------
def _terms(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class BM25Index:
    """BM25 over {"id", "contents"} documents. Thread-safe (the server answers from threads)."""

    def __init__(self, docs: list[dict]):
        import bm25s
        self.docs = docs
        self.bm25 = bm25s.BM25()
        self.bm25.index([_terms(d["contents"]) for d in docs], show_progress=False)
        self.lock = threading.Lock()
        self.title_id = {d["contents"].split("\n", 1)[0].strip('"'): i for i, d in enumerate(docs)}

    def search(self, query: str, topk: int = 3) -> list[tuple[dict, float]]:
        """Top-k (document, score) with positive score, best first; ties by corpus order."""
        known = [t for t in _terms(query[:MAX_QUERY_CHARS]) if t in self.bm25.vocab_dict]
        if not known or topk <= 0:
            return []
        with self.lock:
            s = np.asarray(self.bm25.get_scores(known))
        order = np.argsort(-s, kind="stable")[:topk]
        return [(self.docs[i], float(s[i])) for i in order if s[i] > 0]


def passages_to_string(docs: list[dict]) -> str:
    """Search-R1's `_passages2string`: title = first line of contents (quotes kept)."""
    out = ""
    for i, d in enumerate(docs):
        title, _, text = d["contents"].partition("\n")
        out += f"Doc {i + 1}(Title: {title}) {text}\n"
    return out


def information(docs: list[dict]) -> str:
    return f"\n\n<information>{passages_to_string(docs).strip()}</information>\n\n"


# ---------------------------------------------------------------------------------------------
# Retrieval server (Search-R1 compatible, standard library only)
# ---------------------------------------------------------------------------------------------
MAX_BODY = 1 << 20            # 1 MiB request body
MAX_QUERIES = 64              # queries per request
MAX_TOPK = 100
MAX_BODY_DEPTH = 32           # JSON nesting accepted in a body (a valid request needs 2)
MAX_INT_CHARS = 20            # longest integer literal (json.loads raises past 4,300 digits)
LINGER_S = 2.0                # after an error reply: drain the unread body at most this long
ALLOW = "GET, HEAD, POST"


class _BadRequest(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


# a JSON string or one bracket (strings first, so brackets inside them are skipped)
_JSON_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def _too_deep(text: str) -> bool:
    """Bracket nesting outside strings > MAX_BODY_DEPTH: checked before json.loads, whose C
    decoder raises RecursionError around depth 1,000 (200 KB of '[' is plenty)."""
    if text.count("[") + text.count("{") <= MAX_BODY_DEPTH:
        return False
    depth = 0
    for m in _JSON_TOKEN_RE.finditer(text):
        t = m.group()
        if t in "[{":
            depth += 1
            if depth > MAX_BODY_DEPTH:
                return True
        elif t in "]}":
            depth -= 1
    return False


def _small_int(s: str) -> int:
    if len(s) > MAX_INT_CHARS:
        raise ValueError(f"integer literal of {len(s)} characters")
    return int(s)


def _parse_request(raw: bytes) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body -> (queries, topk, return_scores), or raise _BadRequest(4xx).
    Never raises anything else, whatever the bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadRequest(400, f"malformed JSON: body is not UTF-8 ({e.reason})")
    if _too_deep(text):
        raise _BadRequest(400, f"malformed JSON: nested deeper than {MAX_BODY_DEPTH} levels")
    try:
        req = json.loads(text, parse_int=_small_int)
    except (ValueError, RecursionError) as e:     # JSONDecodeError is a ValueError
        raise _BadRequest(400, f"malformed JSON: {str(e)[:200]}")
    if not isinstance(req, dict):
        raise _BadRequest(400, "body must be a JSON object")
    if "queries" in req:
        queries = req["queries"]
    elif "query" in req:             # verl-agent's client sends one query
        queries = [req["query"]]
    else:
        raise _BadRequest(400, "missing field 'queries'")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise _BadRequest(400, "'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise _BadRequest(413, f"too many queries ({len(queries)} > {MAX_QUERIES})")
    if any(len(q) > MAX_QUERY_CHARS for q in queries):
        raise _BadRequest(413, f"query longer than {MAX_QUERY_CHARS} characters")
    topk = req.get("topk", 3)
    topk = 3 if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise _BadRequest(400, f"'topk' must be an integer in [1, {MAX_TOPK}] or null")
    rs = req.get("return_scores", False)
    if not isinstance(rs, bool):
        raise _BadRequest(400, "'return_scores' must be a boolean")
    return queries, topk, rs


def _doc_out(d: dict) -> dict:
    title, _, text = d["contents"].partition("\n")
    return {"id": d["id"], "contents": d["contents"], "title": title.strip('"'), "text": text}


def _content_length(headers) -> int:
    """The declared body size, or _BadRequest: 411 missing, 400 not a plain decimal (negative,
    '1_0', '+5', ...) or conflicting duplicates, 413 over MAX_BODY."""
    values = headers.get_all("Content-Length") or []
    if not values:
        raise _BadRequest(411, "Content-Length required (chunked bodies are not accepted)")
    if len({v.strip() for v in values}) > 1:
        raise _BadRequest(400, f"conflicting Content-Length headers {values[:4]!r}")
    v = values[0].strip()
    if not re.fullmatch(r"[0-9]{1,15}", v):      # int() would take '-5', '+5', '1_0', ' ٣ '
        raise _BadRequest(400, f"bad Content-Length {v[:40]!r}: must be a non-negative integer")
    if int(v) > MAX_BODY:
        raise _BadRequest(413, f"body larger than {MAX_BODY} bytes")
    return int(v)


def make_handler(index: BM25Index, verbose: bool = False, timeout: float = 10.0):
    """The request handler class. `Handler.stats` counts requests by outcome (status codes,
    "bad", "disconnects") over the server's life, for tests and monitoring."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        stats: Counter = Counter()

        def setup(self):
            self.timeout = timeout       # a stalled client only ties up its own thread, briefly
            super().setup()
            self._unread = True          # until a body is read in full, input may be pending

        def _count(self, key):
            with lock:
                self.stats[key] += 1

        def _send(self, code: int, obj: dict, extra: tuple = ()):
            body = json.dumps(obj).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                if getattr(self, "command", None) != "HEAD":   # a HEAD answer: headers only
                    self.wfile.write(body)
                self._count(code)
            except (ConnectionError, TimeoutError) as e:
                self._gone(e)

        def _bad(self, code: int, msg: str, extra: tuple = ()):
            """Every rejected request: one log line, a JSON error, the connection closed."""
            self._count("bad")
            self.log_error("%r -> %d %s", getattr(self, "requestline", "")[:200], code, msg[:300])
            self.close_connection = True
            self._send(code, {"error": msg}, extra)

        def _gone(self, e: BaseException):
            self._count("disconnects")
            self.close_connection = True
            self.log_error("client gone: %s", type(e).__name__)

        def send_error(self, code, message=None, explain=None):
            """http.server's own rejections (bad request line, unsupported method, oversized
            headers, ...) as JSON instead of HTML; an unsupported method is 405, not 501. A
            request line too broken to name its version would get a bare HTTP/0.9 body: give
            it a status line."""
            if self.request_version == "HTTP/0.9":
                self.request_version = "HTTP/1.0"
            if code == HTTPStatus.NOT_IMPLEMENTED:
                code, message = 405, f"method {str(self.command)[:40]!r} not allowed; use POST /retrieve"
            elif code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:   # a malformed request: a 4xx
                code, message = 400, f"{message}; use HTTP/1.0 or HTTP/1.1"
            self._bad(int(code), message or HTTPStatus(code).phrase,
                      (("Allow", ALLOW),) if code == 405 else ())

        def parse_request(self):
            """http.server's parser, plus: a blank request line gets a 400 (it would close
            silently), headers that stop arriving a 408 (they would close silently too), and
            every answer has a status line (HTTP/0.9 answers have none; no client speaks it)."""
            if not str(self.raw_requestline, "iso-8859-1").strip():
                self.request_version, self.command, self.requestline = "HTTP/1.0", None, ""
                self.send_error(400, "empty request line")
                return False
            try:
                ok = super().parse_request()
            except TimeoutError:
                self.send_error(408, f"request headers not received within {timeout:g} s")
                return False
            if self.request_version == "HTTP/0.9":
                self.request_version = "HTTP/1.0"
            return ok

        def handle(self):
            try:
                super().handle()
            except (ConnectionError, TimeoutError) as e:    # e.g. reset mid-request line
                self._gone(e)

        def finish(self):
            super().finish()
            if self._unread:          # closing with unread input (a GET with a body, an error
                self._linger()        # before the body) makes the kernel send RST, which can
                                      # destroy our answer before the client has read it

        def _linger(self):
            sock, left, end = self.connection, 16 * MAX_BODY, time.monotonic() + LINGER_S
            try:
                sock.shutdown(socket.SHUT_WR)           # the answer is complete: EOF for the peer
                while left > 0 and time.monotonic() < end:
                    sock.settimeout(max(0.01, end - time.monotonic()))
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        return
                    left -= len(chunk)
            except OSError:
                pass

        def do_GET(self):
            if self.path.rstrip("/") == "/health":
                self._send(200, {"status": "ok", "documents": len(index.docs)})
            elif self.path.rstrip("/") == "/retrieve":
                self._bad(405, "use POST /retrieve", (("Allow", "POST"),))
            else:
                self._bad(404, f"unknown path {self.path[:200]!r}; use POST /retrieve")

        do_HEAD = do_GET

        def do_POST(self):
            try:
                if self.path.rstrip("/") != "/retrieve":
                    raise _BadRequest(404, f"unknown path {self.path[:200]!r}; use POST /retrieve")
                n = _content_length(self.headers)
                try:
                    raw = self.rfile.read(n)
                except TimeoutError:
                    raise _BadRequest(408, f"body not received within {timeout:g} s")
                if len(raw) < n:
                    raise _BadRequest(400, f"body shorter than Content-Length ({len(raw)} < {n})")
                self._unread = False
                queries, topk, rs = _parse_request(raw)
            except _BadRequest as e:
                return self._bad(e.code, str(e))
            except ConnectionError as e:
                return self._gone(e)
            try:
                result = [[{"document": _doc_out(d), "score": s} if rs else _doc_out(d)
                           for d, s in index.search(q, topk)] for q in queries]
            except Exception as e:  # a retrieval bug is a 500 for this request, not a dead server
                self.log_error("retrieval failed: %r", e)
                return self._send(500, {"error": f"retrieval failed: {e!r}"})
            self._send(200, {"result": result})

        def log_request(self, code="-", size="-"):
            if verbose:                  # access lines only when asked
                super().log_request(code, size)

        def log_message(self, fmt, *args):     # errors (log_error) always, one line each
            sys.stderr.write(f"searchqa server {self.address_string()}: {fmt % args}\n")

    return Handler


def start_server(index: BM25Index, host: str = "127.0.0.1", port: int = 0, verbose: bool = False,
                 timeout: float = 10.0):
    """Serve in a daemon thread -> (server, url). port=0 picks a free port; server.shutdown() stops.
    `timeout`: seconds a client may stall mid-request before its thread gives up on it."""
    srv = ThreadingHTTPServer((host, port), make_handler(index, verbose, timeout))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://{host}:{srv.server_address[1]}/retrieve"


# ---------------------------------------------------------------------------------------------
# Client for any Search-R1-compatible server
# ---------------------------------------------------------------------------------------------
MAX_RESPONSE = 32 << 20       # client: longest response body read (64 queries x 100 docs fit)


class SearchClient:
    def __init__(self, url: str | None = None, timeout: float = 10.0, retries: int = 3, backoff: float = 0.5):
        self.url = url or os.environ.get("SEARCH_URL", "http://127.0.0.1:8000/retrieve")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff

    def batch(self, queries: list[str], topk: int = 3) -> list[list[dict]]:
        """-> per query, a list of {"id", "contents"} documents (best first). Raises RuntimeError
        when no server answers, ValueError when it refuses the request (4xx) or answers with
        something that is not a bounded, well-formed {"result": [[doc, ...] per query]}."""
        data = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    raw = r.read(MAX_RESPONSE + 1)      # bounded: a runaway server cannot fill memory
                break
            except urllib.error.HTTPError as e:
                if e.code < 500:   # our request is wrong: retrying will not help
                    raise ValueError(f"retrieval server {self.url} rejected the request: {e.code} {e.read(200)!r}")
                last = e
            except (urllib.error.URLError, TimeoutError, ConnectionError, socket.timeout,
                    http.client.HTTPException) as e:
                last = e
        else:
            raise RuntimeError(f"retrieval server {self.url} unreachable after {self.retries + 1} tries ({last!r}); "
                               "start one with `python -m sims.searchqa serve --port 8000` or Search-R1's retrieval_server.py, "
                               "or set SEARCH_URL")
        return self._results(raw, len(queries))

    def _results(self, raw: bytes, n: int) -> list[list[dict]]:
        def bad(why: str):
            return ValueError(f"retrieval server {self.url} sent a malformed response: {why}")
        if len(raw) > MAX_RESPONSE:
            raise bad(f"body larger than {MAX_RESPONSE} bytes")
        try:
            text = raw.decode("utf-8")
            if _too_deep(text):
                raise ValueError(f"nested deeper than {MAX_BODY_DEPTH} levels")
            out = json.loads(text, parse_int=_small_int)
        except (ValueError, RecursionError) as e:      # UnicodeDecodeError is a ValueError
            raise bad(str(e)[:200])
        res = out.get("result") if isinstance(out, dict) else None
        if not isinstance(res, list) or len(res) != n or not all(isinstance(r, list) for r in res):
            raise bad(f"expected {{\"result\": [list of documents] x {n}}}")
        return [[d for d in map(self._doc, r) if d is not None] for r in res]

    @staticmethod
    def _doc(item: Any) -> dict | None:
        """{"document": {...}, "score"} or a bare document -> {"id", "contents"}; None if unusable."""
        d = item.get("document", item) if isinstance(item, dict) else None
        if not isinstance(d, dict):
            return None
        contents = d.get("contents") or f'"{d.get("title", "")}"\n{d.get("text", "")}'
        return {"id": str(d.get("id", "")), "contents": contents if isinstance(contents, str) else str(contents)}

    def search(self, query: str, topk: int = 3) -> list[dict]:
        return self.batch([query], topk)[0]


# ---------------------------------------------------------------------------------------------
# QA data files (real backend)
# ---------------------------------------------------------------------------------------------
def load_qa(path: str) -> list[Question]:
    """jsonl or parquet rows with `question` and `golden_answers` (FlashRAG / Search-R1 raw);
    `data_source` (if present) becomes the task type."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"QA file {path!r} not found (expected jsonl/parquet with 'question' and 'golden_answers')")
    if path.endswith(".parquet"):
        try:
            import pandas as pd
        except ImportError as e:
            raise RuntimeError("reading parquet needs pandas + pyarrow: pip install pandas pyarrow") from e
        rows = pd.read_parquet(path).to_dict("records")
    else:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    qs = []
    for i, r in enumerate(rows):
        if "question" not in r or "golden_answers" not in r:
            raise ValueError(f"{path}: row {i} lacks 'question' or 'golden_answers'")
        golds = r["golden_answers"]
        golds = [golds] if isinstance(golds, str) else [str(g) for g in list(golds)]
        q = str(r["question"]).strip()
        qs.append(Question(q if q.endswith("?") else q + "?", golds, str(r.get("data_source", "qa"))))
    return qs


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------
_WORLDS: dict[tuple, tuple] = {}
_ACT_RE = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)


def get_world(world: int, n_people: int, n_companies: int, n_films: int, n_test: int):
    """(index, test questions, train questions), built once per process per knob setting."""
    key = (world, n_people, n_companies, n_films, n_test)
    if key not in _WORLDS:
        docs, qs = build_kb(world, n_people, n_companies, n_films)
        order = np.random.default_rng([world, 5]).permutation(len(qs))
        qs = [qs[i] for i in order]
        _WORLDS[key] = (BM25Index(docs), qs[:n_test], qs[n_test:])
    return _WORLDS[key]


class SearchQAEnv:
    name = "searchqa"

    def __init__(self, split: str = "train", seed: int = 0, backend: str = "builtin", max_turns: int = 4,
                 topk: int = 3, n_people: int = 120, n_companies: int = 60, n_films: int = 60, n_test: int = 200,
                 data_path: str | None = None, search_url: str | None = None, timeout: float = 10.0, retries: int = 3,
                 world: int = 0):
        # `seed` is accepted for the env protocol and deliberately unused: the KB is the world's
        # (module docstring, docs/simulators.md); the episode's randomness is the rollout's sampling
        self.split, self.max_steps, self.topk = split, max_turns, topk
        if backend == "builtin":
            self.index, test, train = get_world(world, n_people, n_companies, n_films, n_test)
            self.questions = train if split == "train" else test
            self.retrieve = lambda q: [d for d, _ in self.index.search(q, self.topk)]
        elif backend == "real":
            if not data_path:
                raise ValueError("searchqa real backend needs data_path= (jsonl/parquet with 'question' and "
                                 "'golden_answers'; '{split}' in the path is replaced by the split name)")
            self.questions = load_qa(data_path.replace("{split}", split))
            self.client = SearchClient(search_url, timeout=timeout, retries=retries)
            self.client.search("test", topk)   # fail now, clearly, if no server answers
            self.retrieve = self._remote
        else:
            raise ValueError(f"searchqa backend must be 'builtin' or 'real', got {backend!r}")
        self.num_tasks = len(self.questions)
        self.task, self.q = 0, self.questions[0]
        self.steps, self.done, self.reward, self.obs, self.seen = 0, False, 0.0, "", frozenset()

    def _remote(self, query: str) -> list[dict]:
        try:
            return self.client.search(query, self.topk)
        except ValueError:   # the server refused this query (4xx): nothing found, as for junk
            return []

    def _info(self) -> dict:
        return {"task": self.q.question, "task_type": self.q.kind, "admissible": [],
                "won": bool(self.done and self.reward >= 1.0), "score": float(self.reward)}

    def reset(self, task: int) -> tuple[str, dict]:
        self.task = int(task)
        self.q = self.questions[self.task % len(self.questions)]
        self.steps, self.done, self.reward, self.seen = 0, False, 0.0, frozenset()
        self.obs = self.q.question
        return self.obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.done:   # after the episode: the last observation again, no more reward
            return self.obs, 0.0, True, self._info()
        self.steps += 1
        m = _ACT_RE.search(action) if isinstance(action, str) else None
        reward = 0.0
        if m is None:
            self.obs = INVALID
        elif m.group(1) == "answer":
            self.reward = reward = em(m.group(2).strip(), self.q.golden_answers)
            self.done, self.obs = True, ""
        else:
            docs = self.retrieve(m.group(2).strip()[:MAX_QUERY_CHARS])
            self.seen = self.seen | {d["contents"].split("\n", 1)[0].strip('"') for d in docs}
            self.obs = information(docs)
        if self.steps >= self.max_steps:
            self.done = True
        return self.obs, reward, self.done, self._info()

    def snapshot(self) -> Any:
        return (self.task, self.steps, self.done, self.reward, self.obs, self.seen)

    def restore(self, snap: Any) -> None:
        self.task, self.steps, self.done, self.reward, self.obs, self.seen = snap
        self.q = self.questions[self.task % len(self.questions)]

    def random_action(self, rng) -> str:
        """A detour for the warm start's ε-noisy demos (SearchQA has no admissible list): a search
        for a random page title of the built-in corpus, or for 1-3 random words of the question."""
        if hasattr(self, "index") and rng.random() < 0.7:
            d = self.index.docs[rng.randrange(len(self.index.docs))]
            return f"<search>{d['contents'].split(chr(10), 1)[0].strip(chr(34))}</search>"
        words = re.findall(r"[A-Za-z]+", self.q.question)
        return f"<search>{' '.join(rng.sample(words, min(len(words), rng.randint(1, 3))))}</search>"

    def expert_action(self) -> str:
        """Search the question's entity, then the bridge entity its page names, then answer.
        Replans from the documents actually shown so far (`seen`)."""
        anchor, bridge = self.q.hops
        if not anchor or bridge in self.seen:   # real data has no hops: answer what the data says
            return f"<answer>{self.q.golden_answers[0]}</answer>"
        if anchor in self.seen:
            return f"<search>{bridge}</search>"
        return f"<search>{anchor}</search>"


# ---------------------------------------------------------------------------------------------
# Spec: make, vocabulary, prompts, parse
# ---------------------------------------------------------------------------------------------
def make(split: str = "train", seed: int = 0, backend: str = "builtin", **kw) -> SearchQAEnv:
    if backend == "real" and "world" in kw:   # as webshop.make: the option names a built-in world
        raise ValueError("searchqa --env-opt world= picks a built-in KB; the real backend reads data_path and a server")
    if "max_steps" in kw:                     # train.py's --max-steps: here a turn is a step
        kw["max_turns"] = kw.pop("max_steps")
    return SearchQAEnv(split, seed, backend, **kw)


def num_tasks(split: str) -> int | None:
    return None if split == "train" else 200


def vocabulary() -> list[str]:
    words = set(FIRST + LAST + CITIES + COUNTRIES + COMPANY_STEMS + COMPANY_SUFFIX + FILM_ADJ + FILM_NOUN
                + PROFESSIONS + INDUSTRIES + GENRES) | {t for t, _ in QUESTIONS.values()}
    words |= set(string.punctuation) | set(string.digits)
    words |= {"The is a who was born in works for city has about thousand inhabitants country Its largest",
              "company founded by headquartered film directed", INVALID, PREFIX, "Doc Title",
              "<search> </search> <answer> </answer> <information> </information> <think> </think>",
              "search answer information think task obs act actions Question"}
    return sorted(words)


def parse(text: str) -> tuple[str, bool]:
    """verl-agent's search projection: cut after the first </search> or </answer>; the action is
    `<search>q</search>` or `<answer>a</answer>`; invalid ("" is sent, which the env answers with
    the invalid-action message) if there is no block, both kinds, or a repeated tag."""
    if not isinstance(text, str):
        return "", False
    for close in ("</search>", "</answer>"):
        if close in text:
            text = text.split(close, 1)[0] + close
            break
    s = re.findall(r"<search>(.*?)</search>", text, re.DOTALL)
    a = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if len(s) + len(a) != 1 or text.count("<search>") + text.count("<answer>") != 1:
        return "", False
    return (f"<search>{s[0].strip()}</search>" if s else f"<answer>{a[0].strip()}</answer>"), True


def chat_prompt(v: envs.PromptInput, history_len: int = 4) -> str:
    """Search-R1's base prompt with the question, then the rollout so far (actions and
    <information> blocks, the last `history_len` turns), as Search-R1 feeds its model."""
    q = v.task if v.task.endswith("?") else v.task + "?"
    parts = []
    k0 = max(0, len(v.history) - history_len) if history_len else len(v.history)
    for k, (o, a) in enumerate(v.history):
        if k >= k0:
            parts += ([o] if k > 0 else []) + [a]
    if v.step > 0 and v.history:
        parts.append(v.obs)
    return PREFIX.format(question=q) + "".join(parts)


SPEC = envs.EnvSpec(
    name="searchqa", make=make, splits=("train", "test"), num_tasks=num_tasks, vocabulary=vocabulary,
    chat_prompt=chat_prompt, compact_prompt=envs.compact_prompt, parse=parse, task_types=TASK_TYPES,
    backend=lambda b: envs.builtin_or_real("searchqa", b),
    response=lambda a: a,  # actions are already `<search>q</search>` / `<answer>a</answer>`
    options={"world": envs.EnvOption(int, 0, lambda v: None if v >= 0 else "must be >= 0",
                                     "which generated KB and questions; --seed never changes it")},
    # episodes are <= 4 short turns: more updates are affordable, and SPO's boundaries go every turn
    # (every 5 turns, or tree depths 3 and 6, would never or rarely fall inside an episode, which
    # would make spo-chain GRPO under another name); the warm start stops at a fixed BC step
    defaults={"bc_steps": 320, "bc_target": 0.0, "iters": 600, "spo_interval": 1, "spo_tree_depths": "1,2"})


# ---------------------------------------------------------------------------------------------
# CLI: python -m sims.searchqa serve --port 8000
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Search-R1-compatible BM25 retrieval server")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve POST /retrieve")
    s.add_argument("--host", default="127.0.0.1", help="bind address (127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--world", type=int, default=0, help="built-in KB to serve (must match the env's --env-opt world, default 0)")
    s.add_argument("--corpus", default=None, help='jsonl with {"id", "contents"} per line instead of the built-in KB')
    s.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.corpus:
        with open(args.corpus, encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()]
        index = BM25Index(docs)
    else:
        index = get_world(args.world, 120, 60, 60, 200)[0]
    srv = ThreadingHTTPServer((args.host, args.port), make_handler(index, args.verbose))
    srv.daemon_threads = True
    print(f"serving {len(index.docs)} documents at http://{args.host}:{srv.server_address[1]}/retrieve", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
