"""What the run-by-run benchmarks share (isolation_bench.py, disagg_bench.py; soak_bench.py for
its results file): servers started fresh for each run and stopped whatever happens, a streamed
/v1/completions client that timestamps every chunk with text, latency statistics, the host's
load around a run, the Markdown report's common cells, the command-line options every one of
them takes, and the loop that runs (server, scenario, rep) one after another, saving what
finished even when interrupted.
"""
from __future__ import annotations

import argparse
import asyncio
import atexit
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serve_bench as sb  # noqa: E402  (aiohttp check, host counters, /metrics parser)
import side_by_side as sbs  # noqa: E402  (Server, free_port)
import workloads  # noqa: E402

import aiohttp  # noqa: E402  (serve_bench exits with a hint when it is missing)

EXTRA_WORDS = ("river mountain quickly silver ancient market engine yellow winter garden signal "
               "paper bridge doctor orange planet kitchen window forest letter ocean machine "
               "village coffee battery yesterday seven twelve hundred purple careful gentle "
               "strange simple modern quiet bright heavy narrow").split()
VOCAB = workloads.WORDS + EXTRA_WORDS
STARTED: list = []   # servers to stop whatever happens


# ----------------------------------------------------------------------------- text

def varied_text(rng: random.Random, n_words: int) -> str:
    """Sentences of 4-14 words from VOCAB, capitalised, with punctuation and some numbers."""
    out, left = [], n_words
    while left > 0:
        k = min(left, rng.randint(4, 14))
        ws = [rng.choice(VOCAB) if rng.random() > 0.05 else str(rng.randint(2, 999))
              for _ in range(k)]
        ws[0] = ws[0].capitalize()
        if k > 6 and rng.random() < 0.3:
            ws[k // 2] += ","
        out.append(" ".join(ws) + rng.choice([".", ".", ".", "?", "!", ";"]))
        left -= k
    return " ".join(out)


# ----------------------------------------------------------------------------- servers

@dataclass
class Srv:
    kind: str                  # troupe | llama-server
    server: sbs.Server
    model_id: str = ""

    @property
    def url(self) -> str:
        return self.server.url


def start(srv: Srv):
    STARTED.append(srv)
    srv.server.start(wait_s=180)


def stop(srv: Srv) -> Optional[int]:
    """Stop it; return the exit code if it had died on its own before (None if it was alive)."""
    p = srv.server.proc
    died = p.poll() if p else None
    srv.server.stop()
    if srv in STARTED:
        STARTED.remove(srv)
    return died


def stop_all():
    for s in list(STARTED):
        try:
            stop(s)
        except Exception as e:  # noqa: BLE001
            print(f"stopping {s.server.name}: {e}", file=sys.stderr)


def log_tail(srv: Srv, n: int = 15) -> list[str]:
    try:
        with open(srv.server.log_path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


# ----------------------------------------------------------------------------- HTTP helpers

@dataclass
class Stream:
    """One streamed request: when it was sent and when each chunk with text arrived (with the
    tokens each carried, when the request asked for logprobs: a token whose bytes end inside a
    UTF-8 character has no text of its own and arrives with the next)."""
    sent: float = 0.0
    times: list = field(default_factory=list)
    tokens: list = field(default_factory=list)
    held: int = 0  # tokens of chunks without text since the last chunk with text
    done: bool = False
    error: str = ""
    finish: Optional[str] = None
    text: str = ""

    @property
    def ttft(self) -> Optional[float]:
        return self.times[0] - self.sent if self.times else None


def headers_for(key: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def completion_body(srv: Srv, prompt: str, max_tokens: int, stream: bool,
                    user: Optional[str] = None) -> dict:
    b = {"model": srv.model_id, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
         "stream": stream, "ignore_eos": True}
    if user:
        b["user"] = user
    return b


def _sse_chunk(line: bytes, rec: Stream) -> bool:
    """Handle one SSE line; True at the end of the stream."""
    if line.startswith(b"error:"):
        rec.error = line.decode(errors="replace")[:300]
        return True
    if not line.startswith(b"data:"):
        return False
    data = line[5:].strip()
    if data == b"[DONE]":
        return True
    msg = json.loads(data)
    if "error" in msg:
        rec.error = str(msg["error"])[:300]
        return True
    for ch in msg.get("choices") or []:
        # troupe sends a token whose bytes end inside a UTF-8 character as a chunk with empty
        # text (and its logprobs): it counts with the next chunk that has text.
        tokens = len((ch.get("logprobs") or {}).get("tokens") or [])
        if ch.get("text"):
            rec.times.append(time.perf_counter())
            rec.tokens.append(max(1, tokens + rec.held))
            rec.held = 0
            if len(rec.text) < 200:
                rec.text += ch["text"]
        else:
            rec.held += tokens
        rec.finish = ch.get("finish_reason") or rec.finish
    return False


async def stream_completion(session: aiohttp.ClientSession, srv: Srv, body: dict, rec: Stream,
                            key: Optional[str] = None):
    """POST a streamed /v1/completions, filling `rec` as chunks arrive (cancel-safe)."""
    rec.sent = time.perf_counter()
    try:
        async with session.post(srv.url + "/v1/completions", json=body,
                                headers=headers_for(key)) as resp:
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return
            async for raw in resp.content:
                line = raw.strip()
                if line and _sse_chunk(line, rec):
                    break
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as e:
        rec.error = f"{type(e).__name__}: {e}"[:300]
    finally:
        rec.done = True


async def post_json(session, url: str, body: dict, key: Optional[str] = None,
                    timeout: float = 300.0) -> tuple[int, object]:
    async with session.post(url, json=body, headers=headers_for(key),
                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text[:300]


async def count_tokens(session, srv: Srv, text: str) -> int:
    key = "prompt" if srv.kind == "troupe" else "content"
    status, js = await post_json(session, srv.url + "/tokenize", {key: text})
    if status != 200 or not isinstance(js, dict):
        raise RuntimeError(f"{srv.kind} /tokenize: HTTP {status}: {js}")
    return js.get("count") or len(js["tokens"])


async def queue_state(session, srv: Srv) -> dict:
    """Running / waiting requests from /metrics ({} when unavailable)."""
    m = await sb.scrape_metrics(session, srv.url)
    if not m:
        return {}
    if srv.kind == "troupe":
        return {"running": m.get("troupe:num_requests_running"),
                "waiting": m.get("troupe:num_requests_waiting"),
                "preemptions_total": m.get("troupe:num_preemptions_total"),
                "first_token_steps_total": m.get("troupe:first_token_steps_total"),
                "interrupted_steps_total": m.get("troupe:interrupted_steps_total")}
    return {"running": m.get("llamacpp:requests_processing"),
            "waiting": m.get("llamacpp:requests_deferred")}


async def model_id(session, srv: Srv) -> str:
    async with session.get(srv.url + "/v1/models") as resp:
        return (await resp.json())["data"][0]["id"]


async def warm_up(session, srv: Srv):
    rec = Stream()
    await stream_completion(session, srv, completion_body(srv, "Hello there, how", 8, True), rec)
    if rec.error or not rec.times:
        raise RuntimeError(f"warm-up request failed: {rec.error or 'no tokens'}")


async def wait_for(cond, timeout: float, what: str, poll: float = 0.01):
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(poll)


# ----------------------------------------------------------------------------- statistics

def ms_stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    s = sorted(xs)
    p99 = s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]
    return {"n": len(s), "p50": round(1000 * statistics.median(s), 1),
            "p99": round(1000 * p99, 1), "max": round(1000 * s[-1], 1)}


def gaps(times: list[float]) -> list[tuple[float, float]]:
    return list(zip(times, times[1:]))


def gaps_within(streams: list[Stream], lo: float, hi: float) -> list[float]:
    return [b - a for r in streams for a, b in gaps(r.times) if a >= lo and b <= hi]


def gaps_overlapping(streams: list[Stream], lo: float, hi: float) -> list[float]:
    return [b - a for r in streams for a, b in gaps(r.times) if b > lo and a < hi]


def token_gaps_overlapping(streams: list[Stream], lo: float, hi: float) -> list[float]:
    """gaps_overlapping per token: a chunk that carried k tokens after a gap g counts k gaps of
    g / k (those tokens were sampled at steps inside g). Needs streams that asked for logprobs."""
    out = []
    for r in streams:
        for (a, b), k in zip(gaps(r.times), r.tokens[1:]):
            if b > lo and a < hi:
                out.extend([(b - a) / k] * k)
    return out


def host_snapshot() -> dict:
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"uptime": up, "loadavg": sb.loadavg(), "cpu_stat": sb.read_cpu_stat(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


# ----------------------------------------------------------------------------- requests

async def fit_prompt(session, srv: Srv, body_words: list[str], tag: str, target: int) -> tuple:
    """(prompt, tokens): tag + the first n words, n chosen so tokens ~ target (within 1 %)."""
    n = min(len(body_words), int(target / 1.3))
    for _ in range(8):
        prompt = tag + " " + " ".join(body_words[:n])
        tok = await count_tokens(session, srv, prompt)
        if abs(tok - target) <= max(8, target // 100) or (n >= len(body_words) and tok < target):
            return prompt, tok
        n = min(len(body_words), max(1, int(n * target / tok)))
    return prompt, tok


async def timed_request(session, srv: Srv, prompt: str, max_tokens: int, timeout: float,
                        key: Optional[str] = None, user: Optional[str] = None) -> Stream:
    rec = Stream()
    body = completion_body(srv, prompt, max_tokens, True, user)
    try:
        await asyncio.wait_for(stream_completion(session, srv, body, rec, key), timeout)
    except asyncio.TimeoutError:
        rec.error = f"timeout after {timeout:.0f}s"
    return rec


async def start_streams(session, srv: Srv, n: int, max_tokens: int, seed: int,
                        logprobs: bool = False) -> tuple:
    """n streams of free text; logprobs: ask for each token's (Stream.tokens counts them)."""
    rng = random.Random(seed)
    recs = [Stream() for _ in range(n)]
    bodies = [completion_body(srv, f"Story {seed}-{i}: " + varied_text(rng, 20), max_tokens, True)
              for i in range(n)]
    if logprobs:
        for b in bodies:
            b["logprobs"] = 1
    tasks = [asyncio.create_task(stream_completion(session, srv, b, r))
             for b, r in zip(bodies, recs)]
    return recs, tasks


async def cancel_tasks(tasks: list):
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def client_session(args) -> aiohttp.ClientSession:
    """The session a scenario runs in: no connection limit, --request-timeout between reads."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=args.request_timeout)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)


def host_record(h0: dict, h1: dict) -> dict:
    """A run's "host" entry from the snapshots taken before and after it."""
    return {"uptime_before": h0["uptime"], "uptime_after": h1["uptime"],
            "loadavg_before": h0["loadavg"], "loadavg_after": h1["loadavg"],
            "start": h0["time"], "end": h1["time"],
            **sb.steal_between(h0["cpu_stat"], h1["cpu_stat"])}


# ----------------------------------------------------------------------------- reporting

def _f(x, unit=""):
    return "-" if x is None else f"{x}{unit}"


def _trip(d: dict) -> str:
    return f"{_f(d['p50'])} / {_f(d['p99'])} / {_f(d['max'])}"


def _load(run: dict) -> str:
    h = run["host"]
    return f"{h['loadavg_before'][0]:.2f}→{h['loadavg_after'][0]:.2f}"


def error_row(run: dict, who: str, msg: str, ncols: int) -> str:
    """The table row of a run that has no result: who ran it, the rep, what went wrong."""
    cells = [who, str(run["rep"]), "**" + msg.replace("|", "/")[:200] + "**"]
    return "| " + " | ".join(cells + [""] * (ncols - 4) + [_load(run)]) + " |"


def runs_table(head: list[str], runs: list[dict], cells: Callable[[dict, dict], list[str]],
               err_row: Callable[[dict, int], str]) -> list[str]:
    """A Markdown table's lines: one row per run, cells(run, its result), or err_row(run, number
    of columns) for a run without a result."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        r = run.get("result")
        lines.append("| " + " | ".join(cells(run, r)) + " |" if r else err_row(run, len(head)))
    return lines


def scenario_sections(runs: list[dict], scenarios: Iterable[str],
                      tables: dict[str, Callable[[list[dict]], str]]) -> list[str]:
    """A "### scenario" section with its table for each scenario that has runs, in order."""
    out = []
    for scen in scenarios:
        rs = [r for r in runs if r["scenario"] == scen]
        if rs:
            out.append(f"### {scen}\n\n{tables[scen](rs)}\n")
    return out


def print_invocations(path: str, render: Callable[[dict], str]):
    """--from-json: every invocation saved in `path`, rendered again."""
    with open(path) as f:
        for inv in json.load(f)["invocations"]:
            print(render(inv))


# ----------------------------------------------------------------------------- CLI

def add_troupe_args(a, config_help: str):
    """--troupe-bin, --troupe-commit, --troupe-config (its help says what a run overrides)."""
    a("--troupe-bin", default=os.path.join(ROOT, "build", "bin", "troupe"))
    a("--troupe-commit", default="",
      help="commit the troupe binary was built from: recorded and names the output file "
           "(default: HEAD now; the binary may be older or newer, its mtime is recorded too)")
    a("--troupe-config", default=os.path.join(ROOT, "configs", "default.json"), help=config_help)


def add_output_args(a, name: str):
    """--seed, --out (bench/results/<name>_<sha>.json by default) and --from-json."""
    a("--seed", type=int, default=0)
    a("--out", default="", help=f"JSON (default bench/results/{name}_<sha>.json; appended)")
    a("--from-json", default="", help="no runs: print the tables of every invocation in FILE")


def add_options(group, **defaults):
    """One --option-name per keyword (its underscores become dashes) of its default's type."""
    for name, default in defaults.items():
        group.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def add_limit_args(ap: argparse.ArgumentParser):
    add_options(ap.add_argument_group("limits"), request_timeout=300.0, scenario_timeout=1200.0)


def check_model(args):
    if not os.path.exists(args.model):
        raise SystemExit(f"no model at {args.model}")


def git(*a) -> str:
    return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def file_sha1(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:12]


def binary_info(path: str) -> dict:
    return {"path": path, "mtime": time.strftime(
        "%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(path)))}


def append_json(path: str, key: str, entry: dict):
    """Appends `entry` to the list `key` of the JSON object in `path` (written atomically; a
    missing or unreadable file starts a new list)."""
    old = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f).get(key, [])
        except (OSError, ValueError, AttributeError):
            old = []
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump({key: old + [entry]}, f, indent=1)
    os.replace(path + ".tmp", path)


# ----------------------------------------------------------------------------- the run loop

class Interrupted(BaseException):
    pass


def interrupted(signum, _frame):
    for sig in (signal.SIGTERM, signal.SIGINT):   # a second signal must not cut the cleanup
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(f"signal {signum}")


def run_jobs(jobs: Iterable[tuple], run_one: Callable[..., dict], row_of: Callable[[dict], str],
             meta: dict, out: str) -> list[dict]:
    """Runs each (who, scenario, rep) job with run_one(who, scenario, rep), printing progress and
    each run's table row to stderr. However it ends (a signal included), every server is stopped
    and the finished runs are appended to `out` under "invocations" with `meta`."""
    atexit.register(stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT):   # not SystemExit: one_run catches that
        signal.signal(sig, interrupted)
    print(f"logs and configs in {meta['logs']}", file=sys.stderr)
    runs: list[dict] = []
    try:
        for who, scen, rep in jobs:
            print(f"--- {scen} on {who} (rep {rep}); {host_snapshot()['uptime']}",
                  file=sys.stderr, flush=True)
            runs.append(run_one(who, scen, rep))
            print(row_of(runs[-1]), file=sys.stderr, flush=True)
    finally:
        stop_all()
        if runs:
            append_json(out, "invocations", {"meta": meta, "runs": runs})
            print(f"results: {out}", file=sys.stderr)
    return runs


def run_main(main: Callable[[], object]):
    try:
        main()
    except Interrupted as e:
        sys.exit(f"interrupted ({e}); servers stopped, finished runs saved")
