#!/usr/bin/env python3
"""Serving benchmark, measured the way vLLM's benchmark_serving measures: request throughput,
output and total tokens/s, TTFT, inter-token latency and end-to-end latency under concurrency
or a Poisson arrival rate, against any OpenAI-compatible base URL (streamed /v1/completions or
/v1/chat/completions) or troupe's WebSocket chat (/v1/chat/ws).

  python bench/serve_bench.py --base-url http://127.0.0.1:8080 --backend completions \
      --workload fixed --input-len 128 --output-len 128 --concurrency 1,16 \
      --out bench/results/my.json --plot-dir bench/plots

Timing uses aiohttp and time.perf_counter() directly (no OpenAI client in the timed path).
TTFT: request sent -> first chunk with text. ITL: gaps between successive chunks with text
(per chunk, as vLLM does; a server that sends one token per chunk makes that per token).
TPOT: (E2E - TTFT) / (output tokens - 1). Output tokens: the server's usage.completion_tokens
when it reports usage (stream_options.include_usage), else the number of text chunks.
Every run records the host's CPU steal and load average (/proc/stat, /proc/loadavg).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field, asdict
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

try:
    import aiohttp
except ImportError:  # pragma: no cover
    sys.exit("serve_bench needs aiohttp (and numpy, matplotlib): "
             "python3 -m venv .venv-bench && .venv-bench/bin/pip install -r "
             "bench/requirements.txt")
import numpy as np


# ----------------------------------------------------------------------------- host counters

def read_cpu_stat() -> list[int]:
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return [int(x) for x in parts[1:]]


def steal_between(a: list[int], b: list[int]) -> dict:
    d = [y - x for x, y in zip(a, b)]
    total = sum(d[:8]) or 1  # user nice system idle iowait irq softirq steal (guest is in user)
    steal = d[7] if len(d) > 7 else 0
    busy = total - d[3] - d[4]
    return {"steal_pct": round(100.0 * steal / total, 2),
            "busy_pct": round(100.0 * busy / total, 1),
            "steal_jiffies": steal}


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def thread_cpu(pid: int) -> dict:
    """CPU seconds (user + system) each kind of thread of process `pid` has used, by thread
    name with its trailing "-N" index dropped (troupe names its threads: cpu-step, cpu-pool-N,
    engine-0, ingress-0, http-N, ...); {} when the process cannot be read."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended between listdir and open
        # comm is in parentheses and may hold spaces: the fields after it start at ") ".
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        kind = re.sub(r"-\d+$", "", name)
        out[kind] = out.get(kind, 0.0) + seconds
    return out


def cpu_delta(before: dict, after: dict) -> dict:
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2)
            for k in sorted(set(before) | set(after))}


# ----------------------------------------------------------------------------- one request

@dataclass
class Result:
    ok: bool = False
    cancelled: bool = False
    error: str = ""
    start: float = 0.0
    ttft: Optional[float] = None
    e2e: Optional[float] = None
    itl: list = field(default_factory=list)
    chunks: int = 0
    output_tokens: int = 0
    prompt_tokens: Optional[int] = None   # as the server reported it
    expected_prompt_tokens: int = 0
    max_tokens: int = 0
    cached_tokens: Optional[int] = None
    last_chunk: Optional[float] = None    # when the latest chunk with text arrived
    reconnects: int = 0                   # kept-alive connections found closed before the send

    def chunk_arrived(self, now: float, live: "Live"):
        """A chunk with text came at `now`: the first one sets the TTFT, each later one adds a
        gap to the inter-token latencies."""
        if self.last_chunk is None:
            self.ttft = now - self.start
        else:
            self.itl.append(now - self.last_chunk)
        self.last_chunk = now
        self.chunks += 1
        live.tokens += 1


@dataclass
class Target:
    base_url: str
    backend: str = "completions"        # completions | chat | ws
    model: str = ""
    ignore_eos_mode: str = "both"        # field (ignore_eos) | min_tokens | both | none
    temperature: float = 0.0
    timeout_s: float = 1800.0
    server_pid: int = 0                  # read its threads' CPU time over each run (Linux)


def _body(t: Target, req: workloads.Request) -> dict:
    body = {"model": t.model, "max_tokens": req.max_tokens, "temperature": t.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    if t.ignore_eos_mode in ("field", "both"):
        body["ignore_eos"] = True
    if t.ignore_eos_mode in ("min_tokens", "both"):
        body["min_tokens"] = req.max_tokens   # llama-cpp-python's server: EOS masked until then
    if t.backend == "chat":
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    return body


class Live:
    """Counters the progress line reads."""
    def __init__(self):
        self.done = 0
        self.errors = 0
        self.inflight = 0
        self.tokens = 0


async def _post(session: aiohttp.ClientSession, url: str, body: dict, r: Result):
    """POSTs `body`; a kept-alive connection the server already closed (llama-server's HTTP
    library closes idle ones after 5 s: "Can not write request body", ServerDisconnectedError
    before any byte of an answer) is given up and the request sent again, as HTTP clients do, up
    to 3 times (the pool may hand out another stale one), each counted in r.reconnects. The time
    it cost stays in the request's TTFT and E2E."""
    for _ in range(3):
        try:
            return await session.post(url, json=body)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            r.reconnects += 1
    return await session.post(url, json=body)


async def run_openai(session: aiohttp.ClientSession, t: Target, req: workloads.Request,
                     live: Live) -> Result:
    r = Result(expected_prompt_tokens=req.prompt_len, max_tokens=req.max_tokens)
    path = "/v1/chat/completions" if t.backend == "chat" else "/v1/completions"
    r.start = time.perf_counter()
    usage = None
    try:
        async with await _post(session, t.base_url + path, _body(t, req), r) as resp:
            if resp.status != 200:
                r.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return r
            buf = b""
            async for raw in resp.content:
                buf += raw
                if not buf.endswith(b"\n"):
                    continue
                line, buf = buf.strip(), b""
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                now = time.perf_counter()
                msg = json.loads(data)
                if "error" in msg:
                    r.error = str(msg["error"])[:200]
                    return r
                if msg.get("usage"):
                    usage = msg["usage"]
                for ch in msg.get("choices") or []:
                    text = ch.get("text")
                    if text is None:
                        text = (ch.get("delta") or {}).get("content")
                    if text:
                        r.chunk_arrived(now, live)
                if req.cancel_after is not None and r.chunks >= req.cancel_after:
                    r.cancelled = True
                    resp.close()   # drop the connection mid-stream
                    break
        r.e2e = time.perf_counter() - r.start
        if usage:
            r.prompt_tokens = usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details") or {}
            r.cached_tokens = details.get("cached_tokens")
        r.output_tokens = (usage or {}).get("completion_tokens") or r.chunks
        if r.cancelled:
            r.output_tokens = r.chunks
        r.ok = not r.cancelled and r.chunks > 0
        if not r.ok and not r.cancelled:
            r.error = "no tokens streamed"
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as e:
        r.error = f"{type(e).__name__}: {e}"[:200]
    return r


class WsClient:
    """One WebSocket per client worker, generations multiplexed by id (troupe's protocol)."""
    def __init__(self, session: aiohttp.ClientSession, t: Target):
        self.session, self.t = session, t
        self.ws = None
        self.queues: dict[str, asyncio.Queue] = {}
        self.reader = None
        self.n = 0

    async def connect(self):
        url = self.t.base_url.replace("http://", "ws://").replace("https://", "wss://")
        self.ws = await self.session.ws_connect(url + "/v1/chat/ws", heartbeat=None,
                                                max_msg_size=0)
        self.reader = asyncio.create_task(self._read())

    async def _read(self):
        async for m in self.ws:
            if m.type != aiohttp.WSMsgType.TEXT:
                break
            now = time.perf_counter()
            msg = json.loads(m.data)
            q = self.queues.get(msg.get("id"))
            if q is not None:
                q.put_nowait((now, msg))
        for q in self.queues.values():
            q.put_nowait((time.perf_counter(), {"type": "error", "message": "socket closed"}))

    async def close(self):
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)

    async def run(self, req: workloads.Request, live: Live) -> Result:
        r = Result(expected_prompt_tokens=req.prompt_len, max_tokens=req.max_tokens)
        self.n += 1
        cid = f"b{id(self)}-{self.n}"
        q: asyncio.Queue = asyncio.Queue()
        self.queues[cid] = q
        frame = {"type": "chat", "id": cid, "messages": [{"role": "user", "content": req.prompt}],
                 "max_tokens": req.max_tokens, "temperature": self.t.temperature,
                 "ignore_eos": self.t.ignore_eos_mode != "none"}
        r.start = time.perf_counter()
        try:
            await self.ws.send_str(json.dumps(frame))
            while True:
                now, msg = await q.get()
                kind = msg.get("type")
                if kind == "delta":
                    if msg.get("text"):
                        r.chunk_arrived(now, live)
                    if req.cancel_after is not None and r.chunks >= req.cancel_after \
                            and not r.cancelled:
                        r.cancelled = True
                        await self.ws.send_str(json.dumps({"type": "cancel", "id": cid}))
                        r.e2e = time.perf_counter() - r.start
                elif kind == "done":
                    usage = msg.get("usage") or {}
                    r.prompt_tokens = usage.get("prompt_tokens")
                    if r.cancelled:
                        r.output_tokens = r.chunks
                    else:
                        r.e2e = now - r.start
                        r.output_tokens = usage.get("completion_tokens") or r.chunks
                        r.ok = r.chunks > 0
                    break
                elif kind == "error":
                    r.error = f"{msg.get('code', '')}: {msg.get('message', '')}"[:200]
                    break
        except (aiohttp.ClientError, ConnectionError) as e:
            r.error = f"{type(e).__name__}: {e}"[:200]
        finally:
            self.queues.pop(cid, None)
        return r


# ----------------------------------------------------------------------------- server metrics

async def scrape_metrics(session: aiohttp.ClientSession, base_url: str) -> dict:
    """troupe's /metrics (Prometheus text) as {name{labels}: value}; {} if there is none."""
    try:
        async with session.get(base_url + "/metrics",
                               timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return {}
            text = await resp.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return {}
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            k, v = line.rsplit(" ", 1)
            val = float(v)
        except ValueError:
            continue
        m = re.match(r'^([^{]+)(?:\{(.*)\})?$', k)
        if not m:
            continue
        labels = [x for x in re.findall(r'[a-zA-Z_]+="[^"]*"', m.group(2) or "")
                  if not x.startswith("model_name=")]
        out[m.group(1) + ("{" + ",".join(labels) + "}" if labels else "")] = val
    return out


def metrics_delta(before: dict, after: dict) -> dict:
    if not after:
        return {}
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)  # noqa: E731
    steps = d("troupe:num_steps_total")
    gen = d("troupe:generation_tokens_total")
    q = d("troupe:prefix_cache_queries_total")
    return {
        "steps": steps,
        "generation_tokens": gen,
        "prompt_tokens": d("troupe:prompt_tokens_total"),
        "mean_decode_batch": round(gen / steps, 2) if steps else None,
        "step_time_p50_ms": round(1000 * after.get('troupe:step_time_seconds{quantile="0.5"}', 0), 2),
        "step_time_p99_ms": round(1000 * after.get('troupe:step_time_seconds{quantile="0.99"}', 0), 2),
        "prefix_cache_hit_rate_run": round(d("troupe:prefix_cache_hits_total") / q, 3) if q else None,
        "preemptions": d("troupe:num_preemptions_total"),
        "kv_blocks_used_after": after.get("troupe:kv_blocks_used"),
        "requests_running_after": after.get("troupe:num_requests_running"),
        "step_account": step_account_delta(d),
    }


STEP_LOOP_PARTS = ("idle", "engine", "decode_layers", "prompt_layers", "logits", "sampling",
                   "prompt_outputs", "backend_other", "interrupted")


def step_account_delta(d) -> dict:
    """The step loop's account over the run (troupe:step_loop_*): seconds per part of its wall
    time, steps by kind and tokens by kind; {} for a server without it."""
    wall = d("troupe:step_loop_wall_seconds_total")
    if wall <= 0:
        return {}
    parts = {p: round(d(f'troupe:step_loop_seconds_total{{part="{p}"}}'), 3)
             for p in STEP_LOOP_PARTS}
    return {
        "wall_s": round(wall, 3),
        "seconds": parts,
        "share": {p: round(v / wall, 4) for p, v in parts.items()},
        "steps": {k: d(f'troupe:step_loop_steps_total{{kind="{k}"}}')
                  for k in ("decode_only", "mixed", "prompt_only")},
        "tokens": {k: d(f'troupe:step_loop_tokens_total{{kind="{k}"}}')
                   for k in ("decode_row", "prompt")},
    }


# ----------------------------------------------------------------------------- one run

@dataclass
class RunSpec:
    label: str
    workload: str
    concurrency: Optional[int] = None     # fixed concurrency, or
    request_rate: Optional[float] = None  # Poisson arrivals (req/s), capped by max_concurrency
    max_concurrency: Optional[int] = None
    seed: int = 0
    params: dict = field(default_factory=dict)


async def run_benchmark(t: Target, spec: RunSpec, reqs: list[workloads.Request],
                        warmup: int = 1, progress: bool = True) -> dict:
    # One connection per request, for every server: llama-server closes kept-alive connections
    # under the client (2 of 32 requests still failed with an idle timeout below its 5 s and three
    # tries); a local connect costs microseconds against TTFTs of 100+ ms.
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=t.timeout_s, sock_read=t.timeout_s)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        if not t.model:
            try:
                async with session.get(t.base_url + "/v1/models") as resp:
                    t.model = (await resp.json())["data"][0]["id"]
            except Exception as e:  # noqa: BLE001
                raise SystemExit(f"cannot reach {t.base_url}/v1/models: {e}")
        live = Live()
        ws_pool: list[WsClient] = []

        async def one(req, ws: Optional[WsClient] = None) -> Result:
            live.inflight += 1
            try:
                if t.backend == "ws":
                    own = ws is None
                    if own:
                        ws = WsClient(session, t)
                        await ws.connect()
                    try:
                        return await ws.run(req, live)
                    finally:
                        if own:
                            await ws.close()
                return await run_openai(session, t, req, live)
            finally:
                live.inflight -= 1

        # Warm-up (not measured): one short request, so first-touch costs stay out of the run.
        for _ in range(warmup):
            w = workloads.fixed(1, 16, 4, seed=12345)[0]
            res = await one(w)
            if not res.ok:
                raise SystemExit(f"warm-up request to {t.base_url} failed: {res.error}")
        m_before = await scrape_metrics(session, t.base_url)

        results: list[Result] = [None] * len(reqs)  # type: ignore
        server_cpu0 = thread_cpu(t.server_pid) if t.server_pid else {}
        own0 = os.times()
        stat0, load0, t0 = read_cpu_stat(), loadavg(), time.perf_counter()

        async def progress_loop():
            last_tok, last_t = 0, t0
            while True:
                await asyncio.sleep(1.0)
                now = time.perf_counter()
                rate = (live.tokens - last_tok) / (now - last_t)
                last_tok, last_t = live.tokens, now
                print(f"[{spec.label} {spec.workload} c={spec.concurrency or '-'} "
                      f"rate={spec.request_rate or '-'}] {now - t0:6.1f}s done {live.done}/"
                      f"{len(reqs)} inflight {live.inflight} err {live.errors} tokens "
                      f"{live.tokens} ({rate:.1f} tok/s now)", file=sys.stderr, flush=True)

        prog = asyncio.create_task(progress_loop()) if progress else None

        def record(i, res):
            results[i] = res
            live.done += 1
            if res.error:
                live.errors += 1

        if spec.concurrency:
            queue: asyncio.Queue = asyncio.Queue()
            for i, r in enumerate(reqs):
                queue.put_nowait((i, r))

            async def worker():
                ws = None
                if t.backend == "ws":
                    ws = WsClient(session, t)
                    await ws.connect()
                    ws_pool.append(ws)
                while True:
                    try:
                        i, r = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    record(i, await one(r, ws))
            await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        else:
            rng = random.Random(spec.seed + 1)
            sem = asyncio.Semaphore(spec.max_concurrency or 1 << 30)

            async def timed(i, r, at):
                await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
                async with sem:
                    record(i, await one(r))
            at, tasks = 0.0, []
            for i, r in enumerate(reqs):
                tasks.append(asyncio.create_task(timed(i, r, at)))
                at += rng.expovariate(spec.request_rate)
            await asyncio.gather(*tasks)

        duration = time.perf_counter() - t0
        stat1, load1 = read_cpu_stat(), loadavg()
        own1 = os.times()
        server_cpu1 = thread_cpu(t.server_pid) if t.server_pid else {}
        if prog:
            prog.cancel()
        for ws in ws_pool:
            await ws.close()
        # After cancels the server should hold nothing: give it a moment, then look.
        m_after = await scrape_metrics(session, t.base_url)
        if m_after and (m_after.get("troupe:kv_blocks_used", 0) > 0
                        or m_after.get("troupe:num_requests_running", 0) > 0):
            for _ in range(20):
                await asyncio.sleep(0.25)
                m_after = await scrape_metrics(session, t.base_url)
                if m_after.get("troupe:kv_blocks_used", 0) == 0 and \
                        m_after.get("troupe:num_requests_running", 0) == 0:
                    break

    out = summarize(results, duration)
    out.update({
        "label": spec.label, "workload": spec.workload, "backend": t.backend,
        "base_url": t.base_url, "model": t.model, "concurrency": spec.concurrency,
        "request_rate": spec.request_rate, "max_concurrency": spec.max_concurrency,
        "num_prompts": len(reqs), "seed": spec.seed, "params": spec.params,
        "host": {**steal_between(stat0, stat1), "loadavg_before": load0, "loadavg_after": load1},
        "server_metrics": metrics_delta(m_before, m_after),
        # CPU seconds over the run: the server's by kind of thread (--server-pid), and this
        # load generator's own (it shares the box).
        "cpu_seconds": {"server_threads": cpu_delta(server_cpu0, server_cpu1),
                        "load_generator": round((own1.user - own0.user)
                                                + (own1.system - own0.system), 2),
                        "cores": os.cpu_count()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()),
    })
    return out


def account_text(r: dict) -> str:
    """Where one run's time went, as text: the box's core-seconds by consumer, then the step
    loop's wall time by part (troupe only)."""
    cpu = r.get("cpu_seconds", {})
    threads = cpu.get("server_threads", {})
    if not threads:
        return ""
    dur = r["duration_s"]
    cores = cpu.get("cores") or 1
    lines = [f"account over {dur:.1f} s x {cores} cores = {dur * cores:.1f} core-s:"]
    rows = sorted(threads.items(), key=lambda kv: -kv[1])
    rows.append(("load generator", cpu.get("load_generator", 0.0)))
    used = sum(v for _, v in rows)
    rows.append(("not used by these", max(0.0, dur * cores - used)))
    for name, sec in rows:
        lines.append(f"  {name:<18} {sec:8.2f} core-s  {100 * sec / (dur * cores):5.1f} %")
    acc = r.get("server_metrics", {}).get("step_account", {})
    if acc:
        lines.append(f"step loop over {acc['wall_s']:.1f} s: " + ", ".join(
            f"{p} {100 * acc['share'][p]:.1f} %" for p in STEP_LOOP_PARTS if acc["share"][p] > 0))
        lines.append(f"  steps {acc['steps']}, tokens {acc['tokens']}")
    return "\n".join(lines)


def pct(xs, p):
    return round(float(np.percentile(xs, p)) * 1000, 1) if len(xs) else None


def summarize(results: list[Result], duration: float) -> dict:
    ok = [r for r in results if r.ok]
    canc = [r for r in results if r.cancelled]
    errs = [r for r in results if r.error]
    ttft = [r.ttft for r in ok + canc if r.ttft is not None]
    itl = [x for r in ok for x in r.itl]
    e2e = [r.e2e for r in ok]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok
            if r.output_tokens > 1 and r.ttft is not None]
    out_tok = sum(r.output_tokens for r in ok + canc)
    in_tok = sum((r.prompt_tokens if r.prompt_tokens is not None else r.expected_prompt_tokens)
                 for r in ok + canc)
    reported = [r for r in ok if r.prompt_tokens is not None]
    # chat/ws add the chat template's tokens: a constant offset, reported as such
    mism = [r.prompt_tokens - r.expected_prompt_tokens for r in reported
            if r.prompt_tokens != r.expected_prompt_tokens]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    return {
        "duration_s": round(duration, 3),
        "completed": len(ok), "cancelled": len(canc), "errors": len(errs),
        # completed with fewer tokens than max_tokens (with ignore_eos: the server stopped early)
        "short_outputs": sum(1 for r in ok if r.output_tokens < r.max_tokens),
        "error_samples": sorted({r.error for r in errs})[:5],
        "reconnects": sum(r.reconnects for r in results),
        "request_throughput": round(len(ok) / duration, 4),
        "output_tok_s": round(out_tok / duration, 2),
        "total_tok_s": round((out_tok + in_tok) / duration, 2),
        "output_tokens": out_tok, "prompt_tokens": in_tok,
        "ttft_ms": {"mean": round(1000 * float(np.mean(ttft)), 1) if ttft else None,
                    "p50": pct(ttft, 50), "p90": pct(ttft, 90), "p99": pct(ttft, 99)},
        "itl_ms": {"mean": round(1000 * float(np.mean(itl)), 2) if itl else None,
                   "p50": pct(itl, 50), "p99": pct(itl, 99)},
        "tpot_ms": {"mean": round(1000 * float(np.mean(tpot)), 2) if tpot else None,
                    "p50": pct(tpot, 50), "p99": pct(tpot, 99)},
        "e2e_ms": {"mean": round(1000 * float(np.mean(e2e)), 1) if e2e else None,
                   "p50": pct(e2e, 50), "p99": pct(e2e, 99)},
        "prompt_tokens_check": {"reported": len(reported), "mismatched": len(mism),
                                "mismatch_examples": mism[:5],
                                "constant_offset": (mism[0] if mism and len(set(mism)) == 1
                                                    and len(mism) == len(reported) else None)},
        "cached_prompt_tokens_mean": round(float(np.mean(cached)), 1) if cached else None,
        "ttft_samples_ms": sorted(round(1000 * x, 1) for x in ttft),
    }


# ----------------------------------------------------------------------------- reporting

COLUMNS = [("label", "server"), ("workload", "workload"), ("conc", "conc"), ("n", "req"),
           ("err", "err/short"), ("req_s", "req/s"), ("out_s", "out tok/s"), ("tot_s", "total tok/s"),
           ("ttft50", "TTFT p50 ms"), ("ttft90", "TTFT p90"), ("ttft99", "TTFT p99"),
           ("itl50", "ITL p50 ms"), ("itl99", "ITL p99"), ("e2e50", "E2E p50 ms"),
           ("e2e99", "E2E p99"), ("steal", "steal %"), ("load", "load1")]


def row(r: dict) -> dict:
    conc = r["concurrency"] if r["concurrency"] else f"λ={r['request_rate']}"
    return {"label": r["label"], "workload": r["workload"], "conc": conc,
            "n": r["num_prompts"], "err": f"{r['errors']}/{r.get('short_outputs', 0)}",
            "req_s": f"{r['request_throughput']:.3f}", "out_s": f"{r['output_tok_s']:.1f}",
            "tot_s": f"{r['total_tok_s']:.1f}", "ttft50": r["ttft_ms"]["p50"],
            "ttft90": r["ttft_ms"]["p90"], "ttft99": r["ttft_ms"]["p99"],
            "itl50": r["itl_ms"]["p50"], "itl99": r["itl_ms"]["p99"],
            "e2e50": r["e2e_ms"]["p50"], "e2e99": r["e2e_ms"]["p99"],
            "steal": r["host"]["steal_pct"], "load": r["host"]["loadavg_before"][0]}


def markdown_table(runs: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in runs:
        rw = row(r)
        lines.append("| " + " | ".join(str(rw[k]) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def plot_runs(runs: list[dict], plot_dir: str, prefix: str) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(plot_dir, exist_ok=True)
    paths = []
    by_label: dict[str, list[dict]] = {}
    for r in runs:
        if r["concurrency"]:
            by_label.setdefault(r["label"], []).append(r)
    if by_label:
        fig, ax = plt.subplots(figsize=(6, 4), dpi=90)
        for label, rs in by_label.items():
            pts: dict[int, list[float]] = {}
            for r in rs:
                pts.setdefault(r["concurrency"], []).append(r["output_tok_s"])
            xs = sorted(pts)
            ys = [float(np.median(pts[x])) for x in xs]
            line, = ax.plot(xs, ys, marker="o", label=label)
            for x in xs:   # every repetition as a dot, the line through the medians
                ax.scatter([x] * len(pts[x]), pts[x], s=12, alpha=0.5, color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["concurrency"] for r in runs if r["concurrency"]}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("output tokens/s")
        ax.set_title("Output throughput vs concurrency (line: median, dots: runs)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        p = os.path.join(plot_dir, f"{prefix}_throughput.png")
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=90)
    groups: dict[str, list[float]] = {}
    for r in runs:
        key = f"{r['label']} {r['workload']} c={r['concurrency'] or r['request_rate']}"
        groups.setdefault(key, []).extend(r["ttft_samples_ms"])
    for key, xs in groups.items():
        xs = sorted(xs)
        if xs:
            ax.step(np.array(xs) / 1000.0, np.arange(1, len(xs) + 1) / len(xs), where="post",
                    label=key)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF (all repetitions pooled)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(plot_dir, f"{prefix}_ttft_cdf.png")
    fig.savefig(p)
    plt.close(fig)
    paths.append(p)
    return paths


# ----------------------------------------------------------------------------- CLI

def build_requests(args, n: int) -> list[workloads.Request]:
    w = args.workload
    if w in ("fixed", "cancel"):
        reqs = workloads.fixed(n, args.input_len, args.output_len, args.seed)
    elif w == "sharegpt":
        reqs = workloads.sharegpt_like(n, args.seed)
    elif w == "shared-prefix":
        reqs = workloads.shared_prefix(n, args.num_prefixes, args.prefix_len, args.suffix_len,
                                       args.output_len, args.seed)
    else:
        raise SystemExit(f"unknown workload {w}")
    if w == "cancel" or args.cancel_fraction > 0:
        reqs = workloads.with_cancels(reqs, args.cancel_fraction or 0.3, args.seed)
    return reqs


def add_common_args(ap: argparse.ArgumentParser):
    ap.add_argument("--backend", choices=["completions", "chat", "ws"], default="completions")
    ap.add_argument("--workload", choices=["fixed", "sharegpt", "shared-prefix", "cancel"],
                    default="fixed")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--num-prompts", type=int, default=0,
                    help="requests per run (0: max(--min-prompts, --prompts-per-client x "
                         "concurrency), or 64 for a rate)")
    ap.add_argument("--prompts-per-client", type=int, default=2)
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--num-prefixes", type=int, default=2, help="shared-prefix: K")
    ap.add_argument("--prefix-len", type=int, default=1024)
    ap.add_argument("--suffix-len", type=int, default=32)
    ap.add_argument("--cancel-fraction", type=float, default=0.0,
                    help="share of clients that disconnect mid-stream (cancel workload: 0.3)")
    ap.add_argument("--concurrency", default="1",
                    help="comma list of fixed concurrencies, e.g. 1,4,16,64")
    ap.add_argument("--request-rate", type=float, default=0.0,
                    help="Poisson arrivals (req/s) instead of fixed concurrency")
    ap.add_argument("--max-concurrency", type=int, default=0, help="cap for --request-rate")
    ap.add_argument("--ignore-eos-mode", choices=["field", "min_tokens", "both", "none"],
                    default="both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")


def num_for(args, conc: Optional[int]) -> int:
    if args.num_prompts:
        return args.num_prompts
    return max(args.min_prompts, args.prompts_per_client * conc) if conc else 64


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="", help="model id (default: first of /v1/models)")
    ap.add_argument("--label", default="server")
    add_common_args(ap)
    ap.add_argument("--out", default="", help="JSON results file (runs appended)")
    ap.add_argument("--md", default="", help="write the Markdown table here too")
    ap.add_argument("--plot-dir", default="", help="write PNG plots here")
    ap.add_argument("--plot-prefix", default="serve_bench")
    ap.add_argument("--server-pid", type=int, default=0,
                    help="the server's pid (same host): its threads' CPU seconds over each run, "
                         "and with troupe's step-loop metrics an account of where the run went")
    args = ap.parse_args()

    t = Target(args.base_url.rstrip("/"), args.backend, args.model, args.ignore_eos_mode,
               server_pid=args.server_pid)
    runs = []
    specs = []
    if args.request_rate > 0:
        specs.append(RunSpec(args.label, args.workload, None, args.request_rate,
                             args.max_concurrency or None, args.seed))
    else:
        for c in [int(x) for x in args.concurrency.split(",") if x]:
            specs.append(RunSpec(args.label, args.workload, c, None, None, args.seed))
    for spec in specs:
        spec.params = {k: getattr(args, k) for k in ("input_len", "output_len", "num_prefixes",
                                                     "prefix_len", "suffix_len",
                                                     "cancel_fraction")}
        reqs = build_requests(args, num_for(args, spec.concurrency))
        res = asyncio.run(run_benchmark(t, spec, reqs, progress=not args.no_progress))
        runs.append(res)
        print(markdown_table([res]).splitlines()[-1], file=sys.stderr)
        account = account_text(res)
        if account:
            print(account, file=sys.stderr)
    table = markdown_table(runs)
    print(table)
    if args.out:
        old = []
        if os.path.exists(args.out):
            with open(args.out) as f:
                old = json.load(f).get("runs", [])
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"runs": old + runs}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n")
    if args.plot_dir:
        for p in plot_runs(runs, args.plot_dir, args.plot_prefix):
            print("plot:", p, file=sys.stderr)


if __name__ == "__main__":
    main()
