"""LLM chat clients for the judge and the CriticSearch critic: OpenAI-compatible HTTP and local HF.

* `ChatReply` and the chat-function contract `chat(messages, tools, deadline=None) -> ChatReply`
  (messages and tools in OpenAI format; `deadline` is a `time.monotonic()` instant after which
  the call must give up). A client never raises for anything the other side sends: every
  failure is a `ChatReply(error="key: detail")` and the caller turns it into a counted drop.
* `OpenAIChat`: POST {base_url}/chat/completions with urllib (e.g. `vllm serve`). Timeout per
  socket operation, bounded retries with exponential backoff on timeouts, connection errors, 429
  and 5xx; the body is read in chunks, capped at `MAX_RESPONSE_BYTES`, and the whole attempt runs
  in a helper thread joined with the remaining budget, so a stalling endpoint costs at most
  `deadline - now`. `_openai_reply` reads the response defensively (a `message` that is not an
  object is a drop, `bad_response`; a tool call that is not an object becomes an `<unparseable>`
  call; `usage` counts that are not finite fall back to the whitespace estimate).
* `HFChat`: a local transformers model; tools go through `apply_chat_template(tools=...)`, tool
  calls stay in the text (parsed by jsonscan.parse_text_tool_calls); the deadline becomes
  `generate(max_time=...)`.
* `ask`: one call under a wall-time budget (`MAX_SECONDS` per proposal or critique), shared by
  the judge and the critic; `cut` shortens long text for prompts and messages.
Leaves out: streaming, keep-alive and connection pools, an interruptible HF generation step
(`max_time` is checked between tokens). A timed-out OpenAI attempt leaves its helper thread to
finish its own bounded socket operations; its result is discarded.
"""
from __future__ import annotations

import http.client
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from infra.jsonscan import _unparseable, loads

MAX_RESPONSE_BYTES = 1 << 20  # ours: longest HTTP response body read from an endpoint
MAX_SECONDS = 600.0           # ours: wall-time budget of one LLM proposal or critique
TIMEOUT = "timeout: the call ran out of its wall-time budget (max_seconds)"


def estimate_tokens(text: str) -> int:
    """Whitespace-split estimate, used where no tokenizer or usage report exists."""
    return len(text.split())


def cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f"…[+{len(s) - n} chars]"


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


# ---------------------------------------------------------------------------------------------
# One call under a wall-time budget (the judge's proposals, the critic's critiques)
# ---------------------------------------------------------------------------------------------
def deadline(max_seconds: float | None) -> float | None:
    return None if max_seconds is None else time.monotonic() + max_seconds


def ask(chat: ChatFn, msgs: list[dict], tools: list[dict] | None, until: float | None,
        max_seconds: float | None) -> ChatReply:
    """One chat call that ends by `until`. The clients honour the deadline themselves; the checks
    here also cover time spent between calls (tool searches) and a chat function that overran it."""
    late = ChatReply(error=f"timeout: the judge call used its max_seconds={max_seconds} wall-time budget")
    if until is not None and time.monotonic() >= until:
        return late
    reply = chat(msgs, tools, deadline=until)
    if until is not None and time.monotonic() > until and not reply.error:
        late.prompt_tokens, late.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        return late          # it answered, but too late to count: the budget is the bound
    return reply
