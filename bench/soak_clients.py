"""The soak benchmark's clients (bench/soak_bench.py): one coroutine per kind of item in the mix.

Every item records exactly one outcome per logical request it makes into a Tally (a WebSocket
session with three turns is three requests, a batch of four items is four). Outcomes:

  accepted     completed         answered with finish_reason stop or length
               cancelled         answered with finish_reason cancelled (admin cancel, WS cancel)
               refused_429       a clear 429 / queue_full error
               refused_4xx       a clear 4xx error to a valid request (code recorded)
               rejected          malformed input got the error (status, code or close code) it must
               client_disconnect we dropped the connection mid-stream: no answer is owed
               client_abort      we gave up on a non-streamed request before its answer
               admin_*           an admin cancel: was_live true / false, or nothing to cancel
  failures     no_answer         nothing (a timeout, or the stream ended without its end marker)
               double_answer     two end markers, data after [DONE], frames after `done`, ...
               http_5xx          a 5xx status, a mid-stream internal_error, or a 1011 close
               bad_answer        an answer of the wrong shape (unclear error, wrong close code)
               transport_error   the server dropped the connection without answering

What "exactly once" means per surface: SSE: exactly one finish_reason (or one error event) and
exactly one `data: [DONE]`, which ends the body. Non-streamed HTTP: one response per request;
malformed requests go over raw sockets with `Connection: close`, and any byte after the first
response is a second answer. WebSocket: per id exactly one `done` or `error`, and no frame for
that id after it. Batch: one result per item, in input order.
"""
from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import aiohttp

import workloads

ACCEPTED = ("completed", "cancelled", "refused_429", "refused_4xx", "rejected",
            "client_disconnect", "client_abort", "admin_cancelled_live", "admin_not_live",
            "admin_nothing_running")
FAILURES = ("no_answer", "double_answer", "http_5xx", "bad_answer", "transport_error")
LIVE_PHASES = ("prefill", "decode")


# ----------------------------------------------------------------------------- bookkeeping

class Tally:
    """Outcome counts per kind, refusal codes, latencies and the first failures in detail."""

    def __init__(self, max_examples: int = 40):
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.codes: collections.Counter = collections.Counter()
        self.latency_s: dict[str, list[float]] = collections.defaultdict(list)
        self.examples: list[dict] = []
        self.max_examples = max_examples
        self.inflight = 0
        self.items_done = 0

    def record(self, kind: str, outcome: str, detail: str = "", code: str = "",
               latency_s: Optional[float] = None):
        assert outcome in ACCEPTED or outcome in FAILURES, outcome
        self.counts[kind][outcome] += 1
        if code:
            self.codes[f"{kind}:{outcome}:{code}"] += 1
        if latency_s is not None and outcome == "completed":
            self.latency_s[kind].append(latency_s)
        if outcome in FAILURES and len(self.examples) < self.max_examples:
            self.examples.append({"t": time.strftime("%H:%M:%S"), "kind": kind,
                                  "outcome": outcome, "detail": detail[:500]})

    def totals(self) -> collections.Counter:
        out = collections.Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def num_failures(self) -> int:
        t = self.totals()
        return sum(t[f] for f in FAILURES)


@dataclass
class Ctx:
    """What every item needs: where the server is, the sessions, the admin link and the tally."""
    host: str
    port: int
    model: str
    keepalive: aiohttp.ClientSession      # pooled keep-alive connections
    oneshot: aiohttp.ClientSession        # a fresh connection per request (connection churn)
    admin: "AdminLink"
    tally: Tally
    request_timeout: float
    max_body_bytes: int
    ws_max_message_bytes: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session(self, rng: random.Random) -> aiohttp.ClientSession:
        return self.keepalive if rng.random() < 0.6 else self.oneshot


# ----------------------------------------------------------------------------- request bodies

def prompt_text(rng: random.Random) -> str:
    """20-180 words of workloads.WORDS: one token each on /v1/completions (SmolLM2), plus the
    chat template's ~30 tokens on the chat surfaces."""
    return workloads.words(rng, rng.randint(20, 180))


def sampling(rng: random.Random) -> dict:
    out = {"max_tokens": rng.randint(8, 64), "temperature": rng.choice([0.0, 0.7, 1.0])}
    if out["temperature"]:
        out["seed"] = rng.randint(0, 1 << 30)
    if rng.random() < 0.5:
        out["ignore_eos"] = True
    return out


def completion_body(ctx: Ctx, rng: random.Random, chat: bool, stream: bool) -> tuple[str, dict]:
    body = {"model": ctx.model, "stream": stream, **sampling(rng)}
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if chat:
        msgs = [{"role": "user", "content": prompt_text(rng)}]
        if rng.random() < 0.3:
            msgs.insert(0, {"role": "system", "content": "You are a terse assistant."})
        body["messages"] = msgs
        return "/v1/chat/completions", body
    body["prompt"] = prompt_text(rng)
    return "/v1/completions", body


def error_of(body: bytes) -> Optional[dict]:
    """The OpenAI-shaped error object of a response body, or None if it has none."""
    try:
        js = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    err = js.get("error") if isinstance(js, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str) and err.get("message"):
        return err
    return None


def classify_refusal(status: int, body: bytes, expected: bool = False) -> tuple[str, str]:
    """(outcome, code) for a non-200 answer. `expected`: the request was malformed on purpose."""
    if status >= 500:
        return "http_5xx", str(status)
    err = error_of(body)
    if not 400 <= status < 500 or err is None:
        return "bad_answer", f"HTTP {status}: {body[:200]!r}"
    code = str(err.get("code") or err.get("type") or status)
    if expected:
        return "rejected", code
    return ("refused_429" if status == 429 else "refused_4xx"), code


def finish_outcome(reason: Optional[str]) -> str:
    if reason == "cancelled":
        return "cancelled"
    if reason in ("stop", "length"):
        return "completed"
    return "bad_answer"


def transport_outcome(e: BaseException) -> tuple[str, str]:
    if isinstance(e, asyncio.TimeoutError):
        return "no_answer", "timeout"
    return "transport_error", f"{type(e).__name__}: {e}"


# ----------------------------------------------------------------------------- SSE

class SseCheck:
    """Follows one SSE body and decides whether it was answered exactly once."""

    def __init__(self):
        self.done = 0
        self.after_done = 0
        self.finishes: collections.Counter = collections.Counter()   # choice index -> count
        self.reasons: list[str] = []
        self.errors: list[dict] = []
        self.content_chunks = 0
        self.bad = ""

    def feed(self, raw: bytes):
        line = raw.strip()
        if not line or line.startswith(b":"):
            return
        if self.done:
            self.after_done += 1
            return
        if not line.startswith(b"data:"):
            self.bad = self.bad or f"non-data line {line[:80]!r}"
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done += 1
            return
        try:
            msg = json.loads(data)
        except ValueError:
            self.bad = self.bad or f"bad JSON chunk {data[:80]!r}"
            return
        if "error" in msg:
            self.errors.append(msg["error"] if isinstance(msg["error"], dict) else {})
            return
        for ch in msg.get("choices") or []:
            if (ch.get("delta") or {}).get("content") or ch.get("text"):
                self.content_chunks += 1
            if ch.get("finish_reason"):
                self.finishes[ch.get("index", 0)] += 1
                self.reasons.append(ch["finish_reason"])

    def verdict(self) -> tuple[str, str]:
        ends = sum(self.finishes.values()) + len(self.errors)
        if self.after_done or ends > 1 or any(n > 1 for n in self.finishes.values()):
            return "double_answer", (f"after_done={self.after_done} finishes={dict(self.finishes)} "
                                     f"errors={self.errors}")
        if not self.done:
            return "no_answer", f"stream ended without [DONE] ({ends} end events)"
        if self.bad:
            return "bad_answer", self.bad
        if self.errors:
            code = str(self.errors[0].get("code", ""))
            if code == "internal_error":
                return "http_5xx", f"mid-stream {self.errors[0]}"
            return ("refused_429" if code == "queue_full" else "refused_4xx"), code
        if ends == 0:
            return "bad_answer", "[DONE] without a finish_reason"
        return finish_outcome(self.reasons[0]), self.reasons[0]


async def sse_item(ctx: Ctx, rng: random.Random, kind: str = "sse",
                   disconnect_after: Optional[int] = None):
    """A streamed chat or text completion, read to its end or dropped after some chunks."""
    path, body = completion_body(ctx, rng, chat=rng.random() < 0.5, stream=True)
    t0 = time.perf_counter()
    check = SseCheck()
    try:
        async with ctx.session(rng).post(ctx.url + path, json=body, timeout=aiohttp.ClientTimeout(
                total=ctx.request_timeout)) as resp:
            if resp.status != 200:
                outcome, code = classify_refusal(resp.status, await resp.read())
                return ctx.tally.record(kind, outcome, code, code)
            async for line in resp.content:
                check.feed(line)
                if disconnect_after is not None and check.content_chunks >= disconnect_after \
                        and not check.done:
                    resp.close()   # drops the connection: the server must cancel and free
                    return ctx.tally.record(kind, "client_disconnect")
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        outcome, detail = transport_outcome(e)
        return ctx.tally.record(kind, outcome, f"{path}: {detail}; {check.content_chunks} chunks")
    outcome, detail = check.verdict()
    code = detail if outcome in ("refused_429", "refused_4xx") else ""
    ctx.tally.record(kind, outcome, f"{path}: {detail}", code, time.perf_counter() - t0)


# ----------------------------------------------------------------------------- non-streamed

def check_completion_json(body: bytes) -> tuple[str, str]:
    try:
        js = json.loads(body)
        choices = js["choices"]
    except (ValueError, KeyError, TypeError):
        return "bad_answer", f"not a completion: {body[:200]!r}"
    if len(choices) != 1:
        return "bad_answer", f"{len(choices)} choices"
    reason = choices[0].get("finish_reason")
    return finish_outcome(reason), str(reason)


async def nonstream_item(ctx: Ctx, rng: random.Random, kind: str = "nonstream",
                         abort_after_s: Optional[float] = None):
    """A non-streamed completion; with `abort_after_s` the client gives up after that long."""
    path, body = completion_body(ctx, rng, chat=rng.random() < 0.5, stream=False)
    t0 = time.perf_counter()

    async def call():
        async with ctx.session(rng).post(ctx.url + path, json=body, timeout=aiohttp.ClientTimeout(
                total=ctx.request_timeout)) as resp:
            return resp.status, await resp.read()
    try:
        if abort_after_s is None:
            status, data = await call()
        else:
            status, data = await asyncio.wait_for(call(), abort_after_s)
    except asyncio.TimeoutError:
        if abort_after_s is not None and time.perf_counter() - t0 < ctx.request_timeout:
            return ctx.tally.record(kind, "client_abort")
        return ctx.tally.record(kind, "no_answer", f"{path}: timeout")
    except aiohttp.ClientError as e:
        return ctx.tally.record(kind, *transport_outcome(e))
    if status != 200:
        outcome, code = classify_refusal(status, data)
        return ctx.tally.record(kind, outcome, code, code)
    outcome, detail = check_completion_json(data)
    ctx.tally.record(kind, outcome, detail, latency_s=time.perf_counter() - t0)


# ----------------------------------------------------------------------------- batch

def batch_lines(ctx: Ctx, rng: random.Random) -> tuple[list[str], list[bool]]:
    """2-4 JSONL items; in one batch of three, one item is bad (a bad field or broken JSON)."""
    n = rng.randint(2, 4)
    bad_at = rng.randrange(n) if rng.random() < 1 / 3 else -1
    lines, bad = [], []
    for i in range(n):
        path, body = completion_body(ctx, rng, chat=rng.random() < 0.5, stream=False)
        body.pop("stream")
        if i == bad_at:
            if rng.random() < 0.5:
                lines.append('{"custom_id": "broken", "body": {')
                bad.append(True)
                continue
            body["temperature"] = 9
        lines.append(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": path,
                                 "body": body}))
        bad.append(i == bad_at)
    return lines, bad


def batch_results(text: str, jsonl: bool) -> list[dict]:
    if jsonl:
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    return json.loads(text)["data"]


def batch_item_outcome(result: dict, expect_bad: bool) -> tuple[str, str]:
    resp = result.get("response")
    if resp is None:
        err = result.get("error")
        if isinstance(err, dict) and err.get("message"):
            return ("rejected" if expect_bad else "refused_4xx"), str(err.get("code"))
        return "bad_answer", f"item without response or error: {str(result)[:200]}"
    status = resp.get("status_code")
    body = json.dumps(resp.get("body")).encode()
    if status == 200:
        return check_completion_json(body) if not expect_bad else ("bad_answer", "bad item got 200")
    return classify_refusal(status or 0, body, expected=expect_bad)


async def batch_item(ctx: Ctx, rng: random.Random, kind: str = "batch_item"):
    """POST /v1/batch (JSONL or {"requests": [...]}); one outcome per item."""
    lines, bad = batch_lines(ctx, rng)
    jsonl = rng.random() < 0.5 or any(x.startswith('{"custom_id": "broken"') for x in lines)
    if jsonl:
        data, headers = "\n".join(lines).encode(), {"Content-Type": "application/jsonl"}
    else:
        data = json.dumps({"requests": [json.loads(x) for x in lines]}).encode()
        headers = {"Content-Type": "application/json"}
    try:
        async with ctx.session(rng).post(ctx.url + "/v1/batch", data=data, headers=headers,
                                         timeout=aiohttp.ClientTimeout(
                                             total=ctx.request_timeout)) as resp:
            status, text = resp.status, await resp.read()
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        outcome, detail = transport_outcome(e)
        for _ in lines:
            ctx.tally.record(kind, outcome, f"batch: {detail}")
        return
    if status != 200:
        outcome, code = classify_refusal(status, text)
        for _ in lines:
            ctx.tally.record(kind, outcome, code, code)
        return
    try:
        results = batch_results(text.decode(), jsonl)
    except (ValueError, KeyError, TypeError) as e:
        for _ in lines:
            ctx.tally.record(kind, "bad_answer", f"batch body: {e}: {text[:200]!r}")
        return
    if len(results) != len(lines):
        for _ in lines:
            ctx.tally.record(kind, "double_answer" if len(results) > len(lines) else "no_answer",
                             f"{len(results)} results for {len(lines)} items")
        return
    for i, (result, expect_bad) in enumerate(zip(results, bad)):
        outcome, code = batch_item_outcome(result, expect_bad)
        if not expect_bad and result.get("custom_id") != f"c{i}":
            outcome, code = "bad_answer", f"item {i} came back as {result.get('custom_id')!r}"
        ctx.tally.record(kind, outcome, code, code if outcome in ("rejected", "refused_4xx",
                                                                  "refused_429") else "")


# ----------------------------------------------------------------------------- WebSocket chat

@dataclass
class WsGen:
    """One generation on a socket: its frames, its end (done or error) and anything after it."""
    sent: float
    deltas: int = 0
    text: str = ""
    ends: list = field(default_factory=list)
    after_end: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)


class WsChat:
    """A soak WebSocket session: frames are dispatched by id; strays are failures."""

    def __init__(self, ctx: Ctx, kind: str):
        self.ctx, self.kind = ctx, kind
        self.gens: dict[str, WsGen] = {}
        self.strays: list[str] = []
        self.ws = None
        self.reader = None
        self.closed_by_server = ""
        self.activity = asyncio.Event()   # set on every frame and when the socket ends

    async def open(self, rng: random.Random):
        url = self.ctx.url.replace("http://", "ws://") + "/v1/chat/ws"
        self.ws = await self.ctx.session(rng).ws_connect(url, heartbeat=None, max_msg_size=0,
                                                         timeout=aiohttp.ClientWSTimeout(ws_close=5))
        self.reader = asyncio.create_task(self._read())

    async def _read(self):
        try:
            await self._dispatch()
        finally:
            self.closed_by_server = self.closed_by_server or f"closed ({self.ws.close_code})"
            for gen in self.gens.values():
                gen.event.set()
            self.activity.set()

    async def _dispatch(self):
        async for m in self.ws:
            self.activity.set()
            if m.type != aiohttp.WSMsgType.TEXT:
                self.strays.append(f"frame type {m.type}")
                continue
            msg = json.loads(m.data)
            gen = self.gens.get(msg.get("id"))
            if gen is None:
                self.strays.append(m.data[:200])
                continue
            if gen.ends:
                gen.after_end += 1
            elif msg.get("type") == "delta":
                gen.deltas += 1
                gen.text += msg.get("text", "")
            elif msg.get("type") in ("done", "error"):
                gen.ends.append(msg)
                gen.event.set()
            else:
                self.strays.append(m.data[:200])

    async def send_chat(self, gen_id: str, messages: list, rng: random.Random) -> WsGen:
        gen = WsGen(sent=time.perf_counter())
        self.gens[gen_id] = gen
        await self.ws.send_str(json.dumps({"type": "chat", "id": gen_id, "messages": messages,
                                           **sampling(rng)}))
        return gen

    async def close(self):
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)

    def settle(self, gen_id: str) -> tuple[str, str]:
        """The outcome of one generation once its socket is closed."""
        gen = self.gens[gen_id]
        if len(gen.ends) > 1 or gen.after_end:
            return "double_answer", f"{len(gen.ends)} ends, {gen.after_end} frames after the end"
        if not gen.ends:
            return "no_answer", f"no done/error ({self.closed_by_server or 'socket open'})"
        end = gen.ends[0]
        if end["type"] == "done":
            return finish_outcome(end.get("finish_reason")), str(end.get("finish_reason"))
        code = str(end.get("code") or "")
        if code == "internal_error":
            return "http_5xx", f"ws error {end}"
        if not code or not end.get("message"):
            return "bad_answer", f"unclear ws error {end}"
        return ("refused_429" if code == "queue_full" else "refused_4xx"), code


async def ws_turn(chat: WsChat, rng: random.Random, gen_ids: list[str], history: list,
                  cancel_after: Optional[int], drop_after: Optional[int]) -> bool:
    """One turn: 1-2 generations multiplexed, maybe cancelled or the socket dropped mid-way.
    Returns False when the socket was dropped (the session ends)."""
    text = prompt_text(rng) if not history else workloads.words(rng, rng.randint(5, 40))
    user = {"role": "user", "content": text}
    gens = [await chat.send_chat(g, history + [user], rng) for g in gen_ids]
    deadline = time.perf_counter() + chat.ctx.request_timeout
    cancelled = False
    while not all(g.event.is_set() for g in gens) and time.perf_counter() < deadline:
        if drop_after is not None and gens[0].deltas >= drop_after and not gens[0].event.is_set():
            return False
        if cancel_after is not None and not cancelled and gens[0].deltas >= cancel_after:
            cancelled = True
            await chat.ws.send_str(json.dumps({"type": "cancel", "id": gen_ids[0]}))
            continue
        chat.activity.clear()   # no await since the checks above: no frame can slip between
        try:
            await asyncio.wait_for(chat.activity.wait(), deadline - time.perf_counter())
        except asyncio.TimeoutError:
            break
    history += [user, {"role": "assistant", "content": gens[0].text or "..."}]
    return True


async def ws_item(ctx: Ctx, rng: random.Random, kind: str = "ws_turn"):
    """A multi-turn WebSocket chat (2-3 turns, the later ones short); one session in four cancels a turn, one in eight
    drops the socket mid-generation, one turn in four runs two generations at once."""
    chat = WsChat(ctx, kind)
    try:
        await asyncio.wait_for(chat.open(rng), 30)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        return ctx.tally.record(kind, *transport_outcome(e))
    turns = rng.randint(2, 3)
    cancel_turn = rng.randrange(turns) if rng.random() < 0.25 else -1
    drop_turn = rng.randrange(turns) if rng.random() < 0.125 else -1
    history: list = []
    dropped: list[str] = []
    try:
        for t in range(turns):
            ids = [f"t{t}"] + ([f"t{t}b"] if rng.random() < 0.25 else [])
            alive = await ws_turn(chat, rng, ids, history,
                                  rng.randint(1, 6) if t == cancel_turn else None,
                                  rng.randint(1, 6) if t == drop_turn else None)
            if not alive:
                dropped = ids
                break
            if chat.closed_by_server:
                break
        await asyncio.sleep(0.05)  # a frame sent twice would most likely come right behind
    except (aiohttp.ClientError, ConnectionError) as e:
        chat.strays.append(f"send failed: {e}")
    finally:
        await chat.close()
    for gen_id in chat.gens:
        if gen_id in dropped and not chat.gens[gen_id].ends:
            ctx.tally.record(kind, "client_disconnect")
            continue
        outcome, detail = chat.settle(gen_id)
        latency = time.perf_counter() - chat.gens[gen_id].sent
        code = detail if outcome.startswith("refused") else ""
        ctx.tally.record(kind, outcome, detail, code, latency)
    for s in chat.strays:
        ctx.tally.record("ws_stray", "double_answer", s)


# ----------------------------------------------------------------------------- admin

class AdminLink:
    """One connection to the admin socket (JSON lines); reconnects after an error."""

    def __init__(self, path: str):
        self.path = path
        self.lock = asyncio.Lock()
        self.reader = self.writer = None

    async def ask(self, **cmd) -> dict:
        async with self.lock:
            for attempt in range(2):
                try:
                    if self.writer is None:
                        self.reader, self.writer = await asyncio.open_unix_connection(
                            self.path, limit=1 << 24)
                    self.writer.write(json.dumps(cmd).encode() + b"\n")
                    await self.writer.drain()
                    line = await asyncio.wait_for(self.reader.readline(), 30)
                    if not line:
                        raise ConnectionError("admin socket closed")
                    return json.loads(line)
                except (OSError, ConnectionError, asyncio.TimeoutError, ValueError):
                    self.close()
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def admin_cancel_item(ctx: Ctx, rng: random.Random, kind: str = "admin_cancel"):
    """Cancels a random running request (prefill or decode; else any live one) by admin id."""
    try:
        listed = await ctx.admin.ask(cmd="requests")
        live = listed.get("requests") or []
        running = [r for r in live if r.get("phase") in LIVE_PHASES] or live
        if not running:
            return ctx.tally.record(kind, "admin_nothing_running")
        victim = rng.choice(running)
        reply = await ctx.admin.ask(cmd="cancel", id=str(victim["id"]))
    except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as e:
        return ctx.tally.record(kind, "transport_error", f"admin: {e}")
    if reply.get("ok") is not True:
        return ctx.tally.record(kind, "bad_answer", f"cancel refused: {reply}")
    ctx.tally.record(kind, "admin_cancelled_live" if reply.get("was_live") else "admin_not_live")


# ----------------------------------------------------------------------------- raw sockets

async def raw_exchange(ctx: Ctx, steps: list[tuple[Optional[Callable[[bytes], bool]], bytes]],
                       until: Callable[[bytes], bool], timeout: float = 30.0) -> tuple[bytes, str]:
    """Sends each step's bytes once its condition holds on what was read so far (None: at once),
    while reading; returns (bytes read, how the read ended). Uses the loop's sock_* calls, not a
    transport: a failed write (the server refused a body it did not want) must not throw away the
    answer already on its way. Reading stops at EOF, on error, after `timeout`, or 2 s after
    `until(data)` first holds (long enough to catch a second answer)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    data, ended = b"", "eof"
    grew = asyncio.Event()

    async def send():
        for cond, payload in steps:
            while cond is not None and not cond(data):
                grew.clear()
                await grew.wait()
            await loop.sock_sendall(sock, payload)
    sender = None
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (ctx.host, ctx.port)), 10)
        sender = asyncio.create_task(send())
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if until(data):
                left = min(left, 2.0)
            if left <= 0:
                ended = "open" if until(data) else "timeout"
                break
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), left)
            except asyncio.TimeoutError:
                continue
            if not chunk:
                break
            data += chunk
            grew.set()
    except (OSError, asyncio.TimeoutError) as e:
        ended = f"{type(e).__name__}"
    finally:
        if sender is not None:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        sock.close()
    return data, ended


def parse_http_responses(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Complete HTTP/1.1 responses (Content-Length framed) in `data`, and what follows them."""
    out = []
    while b"\r\n\r\n" in data:
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            break
        length = 0
        for h in lines[1:]:
            k, _, v = h.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        if len(rest) < length:
            break
        out.append((status, rest[:length]))
        data = rest[length:]
    return out, data


def malformed_http_request(ctx: Ctx, rng: random.Random) -> tuple[str, bytes, int]:
    """(variant, raw request bytes, expected status) for one malformed HTTP request."""
    def post(path: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
        return (f"POST {path} HTTP/1.1\r\nHost: {ctx.host}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\nContent-Type: ").encode() + ctype + b"\r\n\r\n" + body
    words = prompt_text(rng)
    variant = rng.choices(["bad_json", "wrong_type", "invalid_utf8", "oversize", "bad_http",
                           "unknown_route", "unknown_model", "bad_value"],
                          [20, 20, 15, 3, 8, 8, 8, 18])[0]
    chat = rng.random() < 0.5
    path = "/v1/chat/completions" if chat else "/v1/completions"
    good = {"model": ctx.model, "max_tokens": 8,
            **({"messages": [{"role": "user", "content": words}]} if chat else {"prompt": words})}
    if variant == "bad_json":
        text = json.dumps(good)
        return variant, post(path, text[:rng.randint(1, len(text) - 1)].encode()), 400
    if variant == "wrong_type":
        key, val = rng.choice([("max_tokens", "many"), ("temperature", "hot"), ("stream", "yes"),
                               ("messages" if chat else "prompt", 42), ("stop", {"a": 1}),
                               ("n", [1]), ("seed", 1.5)])
        return variant, post(path, json.dumps({**good, key: val}).encode()), 400
    if variant == "invalid_utf8":
        bad = json.dumps(good).encode().replace(words[:10].encode(), b"\xff\xfe\xc3(" + b"x" * 6, 1)
        return variant, post(path, bad), 400
    if variant == "oversize":
        filler = b"a" * (ctx.max_body_bytes + rng.randint(1, 4096))
        return variant, post(path, b'{"prompt": "' + filler + b'"}'), 413
    if variant == "bad_http":
        junk = rng.choice([b"GARBAGE\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n\r\n"])
        return variant, junk, 400
    if variant == "unknown_route":
        return variant, post("/v1/nope", json.dumps(good).encode()), 404
    if variant == "unknown_model":
        return variant, post(path, json.dumps({**good, "model": "no-such-model"}).encode()), 404
    key, val = rng.choice([("max_tokens", -3), ("temperature", 7), ("top_p", 3),
                           ("priority", "urgent-ish"), ("n", 99)])
    return variant, post(path, json.dumps({**good, key: val}).encode()), 400


async def malformed_http_item(ctx: Ctx, rng: random.Random, kind: str = "malformed_http"):
    variant, payload, want = malformed_http_request(ctx, rng)
    data, ended = await raw_exchange(ctx, [(None, payload)],
                                     lambda d: bool(parse_http_responses(d)[0]))
    responses, rest = parse_http_responses(data)
    if not responses:
        outcome = "no_answer" if not data else "bad_answer"
        return ctx.tally.record(kind, outcome, f"{variant}: read ended {ended}: {data[:200]!r}")
    if len(responses) > 1 or rest:
        return ctx.tally.record(kind, "double_answer",
                                f"{variant}: {len(responses)} responses, {len(rest)} bytes more")
    status, body = responses[0]
    outcome, code = classify_refusal(status, body, expected=True)
    if outcome == "rejected" and status != want:
        outcome, code = "bad_answer", f"{variant}: status {status}, want {want}: {body[:200]!r}"
    ctx.tally.record(kind, outcome, f"{variant}: {code}", f"{variant}/{status}/{code}"
                     if outcome == "rejected" else "")


# ----------------------------------------------------------------------------- raw WebSocket

def ws_frame(opcode: int, payload: bytes, masked: bool = True, fin: bool = True,
             rsv: int = 0) -> bytes:
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    n, mask_bit = len(payload), 0x80 if masked else 0
    if n < 126:
        head += bytes([mask_bit | n])
    elif n < 1 << 16:
        head += bytes([mask_bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([mask_bit | 127]) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = os.urandom(4)
    stream = (key * (n // 4 + 1))[:n]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big") \
        if n else b""
    return head + key + body


def parse_ws_frames(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Complete server frames (unmasked) in `data` and the bytes left over."""
    out = []
    while len(data) >= 2:
        opcode, n, i = data[0] & 0x0F, data[1] & 0x7F, 2
        if n == 126:
            if len(data) < 4:
                break
            n, i = int.from_bytes(data[2:4], "big"), 4
        elif n == 127:
            if len(data) < 10:
                break
            n, i = int.from_bytes(data[2:10], "big"), 10
        if len(data) < i + n:
            break
        out.append((opcode, data[i:i + n]))
        data = data[i + n:]
    return out, data


WS_VARIANTS = {  # variant: (what we expect: ("close", code) or ("error", code), weight)
    "invalid_utf8": (("close", 1007), 20),
    "oversize": (("close", 1009), 5),
    "unmasked": (("close", 1002), 15),
    "reserved_opcode": (("close", 1002), 10),
    "orphan_continuation": (("close", 1002), 10),
    "binary": (("error", "unsupported_frame"), 10),
    "bad_json": (("error", "invalid_json"), 15),
    "bad_field": (("error", "invalid_type"), 10),
    "truncated": (("none", None), 5),
}


def malformed_ws_frame(ctx: Ctx, rng: random.Random, variant: str) -> bytes:
    if variant == "invalid_utf8":
        return ws_frame(0x1, b'{"type":"chat","id":"u","messages":[{"role":"user","content":"'
                        b'\xff\xfe\xc3("}]}')
    if variant == "oversize":
        return ws_frame(0x1, b"x" * (ctx.ws_max_message_bytes + rng.randint(1, 1024)))
    if variant == "unmasked":
        return ws_frame(0x1, b'{"type":"cancel","id":"x"}', masked=False)
    if variant == "reserved_opcode":
        return ws_frame(rng.choice([0x3, 0x4, 0xB]), b"hello")
    if variant == "orphan_continuation":
        return ws_frame(0x0, b"tail of nothing")
    if variant == "binary":
        return ws_frame(0x2, os.urandom(rng.randint(1, 64)))
    if variant == "bad_json":
        return ws_frame(0x1, b'{"type":"chat","id":"j","messages":[')
    if variant == "bad_field":
        return ws_frame(0x1, json.dumps({"type": "chat", "id": "f", "max_tokens": "lots",
                                         "messages": [{"role": "user", "content": "hi"}]}).encode())
    frame = ws_frame(0x1, json.dumps({"type": "chat", "id": "t", "messages": [
        {"role": "user", "content": prompt_text(rng)}]}).encode())
    return frame[:rng.randint(1, len(frame) - 1)]      # truncated: then we hang up


def ws_handshake(ctx: Ctx) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET /v1/chat/ws HTTP/1.1\r\nHost: {ctx.host}:{ctx.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n").encode()


def ws_verdict(variant: str, data: bytes) -> tuple[str, str]:
    if not data.startswith(b"HTTP/1.1 101"):
        return "bad_answer", f"{variant}: no 101: {data[:120]!r}"
    frames, _ = parse_ws_frames(data.split(b"\r\n\r\n", 1)[1])
    (want_kind, want), _ = WS_VARIANTS[variant]
    closes = [f for f in frames if f[0] == 0x8]
    texts = [f for f in frames if f[0] == 0x1]
    code = int.from_bytes(closes[0][1][:2], "big") if closes and len(closes[0][1]) >= 2 else None
    if len(closes) > 1:
        return "double_answer", f"{variant}: {len(closes)} close frames"
    if code == 1011:
        return "http_5xx", f"{variant}: close 1011"
    if want_kind == "close":
        if texts:
            return "double_answer", f"{variant}: {len(texts)} text frames before close {code}"
        if code != want:
            return ("no_answer" if code is None else "bad_answer"), \
                f"{variant}: close code {code}, want {want}"
        return "rejected", f"close {code}"
    errors = [json.loads(p) for _, p in texts]
    if len(errors) != 1:
        return ("no_answer" if not errors else "double_answer"), \
            f"{variant}: {len(errors)} text frames: {[e.get('code') for e in errors]}"
    if errors[0].get("type") != "error" or errors[0].get("code") != want:
        return "bad_answer", f"{variant}: {errors[0]} (want code {want})"
    return "rejected", f"error {want}"


async def malformed_ws_item(ctx: Ctx, rng: random.Random, kind: str = "malformed_ws"):
    """One broken frame on a fresh socket. Close variants: the server's close frame with the
    right code and nothing else. Error variants: exactly one error frame; then our clean close
    (1000) must get the server's close back."""
    variant = rng.choices(list(WS_VARIANTS), [w for _, w in WS_VARIANTS.values()])[0]
    (want_kind, _), _ = WS_VARIANTS[variant]
    upgraded = lambda d: d.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in d  # noqa: E731
    steps = [(None, ws_handshake(ctx)), (upgraded, malformed_ws_frame(ctx, rng, variant))]
    if variant == "truncated":
        await raw_exchange(ctx, steps, lambda d: False, timeout=2)
        return ctx.tally.record(kind, "client_disconnect")
    if want_kind == "error":   # once the error frame is in, our clean close goes out
        steps.append((lambda d: any(op == 0x1 for op, _ in server_frames(d)),
                      ws_frame(0x8, (1000).to_bytes(2, "big"))))
    data, ended = await raw_exchange(
        ctx, steps, lambda d: any(op == 0x8 for op, _ in server_frames(d)))
    outcome, detail = ws_verdict(variant, data)
    if outcome == "no_answer":
        detail += f" (read ended: {ended})"
    ctx.tally.record(kind, outcome, detail, f"{variant}/{detail}" if outcome == "rejected" else "")


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    parts = data.split(b"\r\n\r\n", 1)
    return parse_ws_frames(parts[1])[0] if len(parts) == 2 else []
