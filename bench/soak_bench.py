#!/usr/bin/env python3
"""Soak benchmark (issue 14): the real server and the real default model under twice its measured
capacity for a long time, with every surface and every way a client can misbehave mixed in.

  .venv-bench/bin/python bench/soak_bench.py                  # 30 minutes
  .venv-bench/bin/python bench/soak_bench.py --minutes 3 --capacity-s 30
  (any venv with bench/requirements.txt; --help for the knobs)

Phases
  1. start `troupe serve`: configs/default.json with a free port, a private admin socket, the log
     in a temp dir and scheduler.max_queue = 2 x max_num_seqs (--max-queue: at 2x load the queue
     must fill within the warm-up, so that the steady part is the full, refusing server).
  2. capacity: a closed loop of the mix at scheduler.max_num_seqs concurrency; after a ramp of
     two waves (2 x workers items finished, 20-120 s) the items finished in --capacity-s make the
     capacity (items/s). --capacity R skips it.
  3. idle baseline: every client connection closed, the server idle; its RSS and fd count.
  4. soak: Poisson arrivals of the mix at --overload x capacity (default 2x) for --minutes;
     the server's RSS (/proc/PID/status VmRSS), fds (/proc/PID/fd), its TCP connections
     (/proc/net/tcp, by state) and the admin `stats` sampled every --sample-s.
  5. drain: no new items; every outstanding one must end. One still pending after the server
     has had nothing running or waiting for --idle-wait-s was dropped: no_answer.
  6. end state: all client connections closed; the admin `stats` must reach 0 running, 0 waiting
     and 0 KV blocks in use (cached prefix blocks are not "in use") within --idle-wait-s;
     /metrics must agree; the server's fds must come back to the idle baseline with no socket
     left in CLOSE_WAIT; SIGTERM must stop it with exit code 0.

The mix (weights in MIX below, recorded in the JSON; an item may make several requests):
  sse             streamed chat / text completion, read to [DONE]
  nonstream       non-streamed chat / text completion
  ws              a WebSocket chat of 2-3 turns carrying the history; some turns run two
                  generations at once, some are cancelled by a cancel frame, some sockets are
                  dropped mid-generation
  batch           /v1/batch of 2-4 items (JSONL or {"requests": []}), sometimes one bad item
  disconnect      streamed request, connection dropped after 1-8 content chunks
  abort           non-streamed request the client gives up on after 0.05-3 s
  admin_cancel    admin `requests`, then `cancel` of a random running request
  malformed_http  bad JSON, wrong types, bad values, invalid UTF-8, oversize body (413), broken
                  HTTP framing, unknown route / model (raw sockets, Connection: close)
  malformed_ws    invalid UTF-8 (1007), oversize frame (1009), unmasked / reserved opcode /
                  orphan continuation (1002), binary frame, bad JSON, bad field (error frames),
                  truncated frame then hang up
Prompts are 20-180 words of workloads.WORDS (~20-210 tokens with the chat template), max_tokens
8-64, temperature 0 / 0.7 / 1, ignore_eos half the time.

Checks (any failing one makes the exit code 1; the outcomes are defined in soak_clients.py):
  - every request answered exactly once: no no_answer, double_answer, bad_answer,
    transport_error; no 5xx (HTTP, mid-stream internal_error, WS 1011)
  - the end state of phase 6
  - no leak. Least-squares slopes per minute, reported after the warm-up (--warmup-frac) and
    checked over the steady window:
      fds: fds minus the server's ESTABLISHED connections (open client connections are load, not
        leaks; a leaked socket sits in CLOSE_WAIT and still counts), from the warm-up on.
      RSS: from the later of the warm-up and the moment the waiting queue first reaches 90 % of
        max_queue (while it fills, memory grows with it by design: ~17 KiB per waiting request
        here); inconclusive (not failed) if that window is under 120 s or 20 % of the run.
    A slope fails when it clearly grows: above the limit, more than two standard errors above 0,
    and both halves of the window above half the limit (a leak grows all along; a one-off step,
    such as the 58 MiB the allocator took once at the first full 64-sequence batch, sits in one
    half). Limits:
      --max-rss-kib-per-min 512: 30 MiB/h, ~0.7 GiB/day on a ~0.7 GiB process, a leak that
        needs a daily restart; at this box's 1-3 requests/s it is 3-8 KiB per request, more than
        a request's whole text. Smaller leaks cannot be told from allocator steps in a 10-30
        minute window; a longer --minutes narrows the standard error.
      --max-fds-per-min 1: ~1,400 a day, a default 1024-fd limit gone within a day; the soak
        opens over 100 connections a minute, so even one leaked fd per 100 connections shows.
        The exact check is the idle fd count: after == before, not a single fd more.
Peer faults (--pd-kill-s S, issue 41): the server under soak is a *decode* server whose prompts of
64 tokens or more go to a prefill server (disagg.min_remote_prefill_tokens 64, KV over the
default tcp transport), and that prefill server is SIGKILLed every 0.5-1.5 x S seconds during the
soak and restarted on its port. The soak server's own checks stay the same (every request
answered — by the local-prefill fallback when its prefill died — no leak, idle at the end); one
more: the prefill server never died but by our SIGKILL. Remote prefills and fallbacks are
reported from the decode server's /metrics. The decode server's own connections to the prefill
server's ports (pooled HTTP calls, the KV connection) are live load like client connections: the
fd checks leave out those ESTABLISHED (a connection to a killed prefill ends up closed or in
CLOSE_WAIT, and still counts).

Results: a summary table on stdout, JSON appended to bench/results/soak_<commit>.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serve_bench as sb  # noqa: E402  (aiohttp check, /proc/stat, /metrics parser)
from bench_runs import append_json, git  # noqa: E402
import side_by_side as sbs  # noqa: E402  (Server, free_port)
import soak_clients as sc  # noqa: E402

import aiohttp  # noqa: E402

MIX = {  # kind: (weight, runner(ctx, rng))
    "sse": (24, lambda ctx, rng: sc.sse_item(ctx, rng, "sse")),
    "nonstream": (14, lambda ctx, rng: sc.nonstream_item(ctx, rng, "nonstream")),
    "ws": (13, lambda ctx, rng: sc.ws_item(ctx, rng, "ws_turn")),
    "batch": (7, lambda ctx, rng: sc.batch_item(ctx, rng, "batch_item")),
    "disconnect": (9, lambda ctx, rng: sc.sse_item(ctx, rng, "disconnect",
                                                   disconnect_after=rng.randint(1, 8))),
    "abort": (6, lambda ctx, rng: sc.nonstream_item(ctx, rng, "abort",
                                                    abort_after_s=rng.uniform(0.05, 3.0))),
    "admin_cancel": (5, lambda ctx, rng: sc.admin_cancel_item(ctx, rng, "admin_cancel")),
    "malformed_http": (13, lambda ctx, rng: sc.malformed_http_item(ctx, rng, "malformed_http")),
    "malformed_ws": (9, lambda ctx, rng: sc.malformed_ws_item(ctx, rng, "malformed_ws")),
}
STARTED: list = []
# --pd-kill-s: the prefill server's HTTP and KV ports. The decode server's connections to them
# (pooled HTTP calls, the KV connection) are load like client connections, not leaks: the fd
# checks subtract those ESTABLISHED, as they do the server port's own.
PEER_PORTS: set = set()


# ----------------------------------------------------------------------------- the server

PD_DISAGG = {"min_remote_prefill_tokens": 64, "kv_lease_ms": 4000, "pull_timeout_ms": 5000,
             "prefill_timeout_ms": 20000}


def write_config(args, tmp: str, name: str = "troupe") -> tuple[str, dict]:
    with open(args.config) as f:
        cfg = json.load(f)
    cfg["model"] = args.model
    cfg["admin"]["socket_path"] = os.path.join(tmp, f"{name}-admin.sock")
    cfg["log"]["level"] = args.log_level
    # Its own: servers sharing a storage dir take turns holding the batch lock (one more fd
    # whenever the holder dies, which the idle fd check would count).
    cfg["storage"]["dir"] = os.path.join(tmp, f"{name}-storage")
    if args.max_queue >= 0:
        cfg["scheduler"]["max_queue"] = args.max_queue or 2 * cfg["scheduler"]["max_num_seqs"]
    if args.pd_kill_s:
        cfg["disagg"].update(PD_DISAGG)
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path, cfg


class PrefillPeer:
    """--pd-kill-s: the soak server's prefill server, SIGKILLed every 0.5-1.5 x S seconds while
    `killing` runs, and restarted on its port. Runs on its own thread (starting a server blocks)."""

    def __init__(self, args, tmp: str):
        self.args, self.tmp = args, tmp
        self.port = sbs.free_port()
        self.kv_port = sbs.free_port()
        path, _ = write_config(args, tmp, "prefill")
        PEER_PORTS.update({self.port, self.kv_port})
        self.cmd = [args.troupe_bin, "serve", "--config", path, "--port", str(self.port),
                    "--role", "prefill", "--kv-port", str(self.kv_port)]
        self.kills, self.restarts = 0, 0
        self.died_on_its_own: list = []
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.server: sbs.Server | None = None

    def start(self):
        self.server = sbs.Server("prefill", self.cmd, self.port,
                                 os.path.join(self.tmp, f"prefill-{self.restarts}.log"))
        STARTED.append(self.server)
        self.server.start(wait_s=180)

    def start_killing(self, seed: int):
        rng = random.Random(seed)
        self.thread = threading.Thread(target=self._kill_loop, args=(rng,), daemon=True)
        self.thread.start()

    def _kill_loop(self, rng: random.Random):
        while not self.stop_event.wait(rng.uniform(0.5, 1.5) * self.args.pd_kill_s):
            proc = self.server.proc
            if proc.poll() is not None:
                self.died_on_its_own.append(f"exit {proc.returncode}, log {self.server.log_path}")
            else:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                self.kills += 1
            STARTED.remove(self.server)
            self.restarts += 1
            try:
                self.start()
            except SystemExit as e:  # did not come back: counted, tried again next round
                self.died_on_its_own.append(f"restart failed: {e}")

    def stop_killing(self):
        self.stop_event.set()
        if self.thread:
            self.thread.join()

    def result(self) -> dict:
        return {"prefill_port": self.port, "kill_every_s": self.args.pd_kill_s,
                "kills": self.kills, "died_on_its_own": self.died_on_its_own}


def metric_total(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def start_server(args, tmp: str, prefill: PrefillPeer | None = None) -> tuple[sbs.Server, dict]:
    path, cfg = write_config(args, tmp)
    port = sbs.free_port()
    cmd = [args.troupe_bin, "serve", "--config", path, "--port", str(port)]
    if prefill is not None:
        cmd += ["--role", "decode", "--prefill-url", f"127.0.0.1:{prefill.port}"]
    server = sbs.Server("troupe", cmd, port, os.path.join(tmp, "troupe.log"))
    STARTED.append(server)
    server.start(wait_s=180)
    deadline = time.time() + 10
    while not os.path.exists(cfg["admin"]["socket_path"]) and time.time() < deadline:
        time.sleep(0.05)
    return server, cfg


def stop_server(server: sbs.Server) -> dict:
    """SIGTERM and wait; the exit code, or how it had died before."""
    p = server.proc
    died_before = p.poll()
    if died_before is None:
        p.send_signal(signal.SIGTERM)
        try:
            code = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            code = f"killed after 60 s ({p.wait()})"
    else:
        code = died_before
    if server in STARTED:
        STARTED.remove(server)
    return {"alive_at_end": died_before is None, "exit_code": code}


def log_summary(path: str) -> dict:
    levels = {"error": 0, "critical": 0, "warning": 0}
    first = []
    with open(path, errors="replace") as f:
        for line in f:
            for lvl in levels:
                if f"[{lvl}]" in line:
                    levels[lvl] += 1
                    if lvl != "warning" and len(first) < 10:
                        first.append(line.strip()[:300])
    return {**levels, "first_errors": first}


# ----------------------------------------------------------------------------- sampling

def proc_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_fds(pid: int, by_kind: bool = False) -> dict:
    """The process's fd count and sockets among them; by_kind: also counts by what each is (a
    file's path, else socket / pipe / anon_inode:[eventfd] ...), to name what an extra fd is."""
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = 0
    kinds: dict[str, int] = {}
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            sockets += 1
        if by_kind:
            kind = target if target.startswith("/") else target.split(":[")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"fds": len(fds), "socket_fds": sockets, **({"by_kind": kinds} if by_kind else {})}


TCP_STATES = {"01": "established", "08": "close_wait", "0A": "listen", "06": "time_wait",
              "09": "last_ack", "07": "close", "04": "fin_wait1", "05": "fin_wait2"}


def tcp_sockets():
    """(local port, remote port, state code) of every TCP socket of the host (/proc/net/tcp*),
    ports as /proc writes them (4 hex digits)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    yield parts[1].rsplit(":", 1)[1], parts[2].rsplit(":", 1)[1], parts[3]
        except OSError:
            pass


def server_tcp(port: int) -> dict:
    """Server-side TCP sockets on `port` by state (local port == port)."""
    out: dict[str, int] = {}
    want = f"{port:04X}"
    for local, _, state in tcp_sockets():
        if local == want:
            st = TCP_STATES.get(state, state)
            out[st] = out.get(st, 0) + 1
    return out


def established_to_peers() -> int:
    """ESTABLISHED sockets whose remote port is one of PEER_PORTS (only the server has them)."""
    ports = {f"{p:04X}" for p in PEER_PORTS}
    return sum(1 for _, remote, state in tcp_sockets() if state == "01" and remote in ports)


async def admin_stats(admin: sc.AdminLink) -> dict:
    try:
        s = await admin.ask(cmd="stats")
    except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as e:
        return {"error": str(e)}
    return {"running": s["requests"]["running"], "waiting": s["requests"]["waiting"],
            "preempted": s["requests"]["preempted"], "kv_used": s["kv_blocks"]["used"],
            "kv_cached": s["kv_blocks"]["cached"], "finished": s["totals"]["finished"],
            "refused": s["totals"]["refused"]}


async def sample(pid: int, port: int, admin: sc.AdminLink, t0: float, tally: sc.Tally) -> dict:
    tcp = server_tcp(port)
    out = {"t_s": round(time.perf_counter() - t0, 2), "rss_kib": proc_rss_kib(pid),
           **proc_fds(pid), "tcp": tcp, "client_inflight_items": tally.inflight,
           "items_done": tally.items_done}
    out["fds_minus_established"] = out["fds"] - tcp.get("established", 0) - established_to_peers()
    out["server"] = await admin_stats(admin)
    return out


async def sampler(pid, port, admin, t0, tally, every_s: float, samples: list, stop: asyncio.Event):
    while not stop.is_set():
        try:
            samples.append(await sample(pid, port, admin, t0, tally))
        except OSError as e:   # the server died: the end-state checks say so
            samples.append({"t_s": round(time.perf_counter() - t0, 2), "error": str(e)})
            return
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


# ----------------------------------------------------------------------------- load

def pick_kind(rng: random.Random) -> str:
    kinds = list(MIX)
    return rng.choices(kinds, [MIX[k][0] for k in kinds])[0]


async def run_item(ctx: sc.Ctx, kind: str, seed: int):
    # NOTE: not Random(seed): pick_kind drew the kind from that, and the item's first draw would
    # repeat it (a malformed_ws item, picked near the top of [0, 1), always got the last variants)
    rng = random.Random(f"item-{seed}")
    ctx.tally.inflight += 1
    try:
        await MIX[kind][1](ctx, rng)
    except Exception as e:  # noqa: BLE001  (a bench bug: counted as a failure, shown in full)
        ctx.tally.record("bench_error", "bad_answer",
                         f"{kind} seed {seed}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    finally:
        ctx.tally.inflight -= 1
        ctx.tally.items_done += 1


def make_ctx(args, cfg: dict, port: int, model: str, admin: sc.AdminLink) -> sc.Ctx:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    keepalive = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)
    oneshot = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                    timeout=timeout)
    return sc.Ctx(host="127.0.0.1", port=port, model=model, keepalive=keepalive, oneshot=oneshot,
                  admin=admin, tally=sc.Tally(), request_timeout=args.request_timeout,
                  max_body_bytes=cfg["http"]["max_body_bytes"],
                  ws_max_message_bytes=cfg["http"]["ws_max_message_bytes"])


async def close_ctx(ctx: sc.Ctx):
    await ctx.keepalive.close()
    await ctx.oneshot.close()


async def closed_loop(ctx: sc.Ctx, workers: int, measure_s: float, seed: int,
                      max_ramp_s: float = 120.0) -> dict:
    """`workers` loops each running one item after another; capacity = items finished per
    second within the measured window. The window opens once two waves (2 x `workers` items)
    have finished, at least 20 s and at most `max_ramp_s` in: all loops start at once, so the
    first wave's prefills arrive together, and the cheap items (malformed, admin) finish first."""
    t0 = time.perf_counter()
    window = {"start": None, "end": None, "finished": 0}
    counter = [0]
    server_stats = []   # admin stats at the window's start and end (engine requests finished)

    async def stats_at_window_end():
        server_stats.append(await admin_stats(ctx.admin))
        await asyncio.sleep(measure_s)
        server_stats.append(await admin_stats(ctx.admin))

    def open_window_if_due(now: float):
        if window["start"] is None and now - t0 >= 20 and (
                ctx.tally.items_done >= 2 * workers or now - t0 >= max_ramp_s):
            window["start"], window["end"] = now, now + measure_s
            window["stats"] = asyncio.create_task(stats_at_window_end())

    async def worker():
        while window["end"] is None or time.perf_counter() < window["end"]:
            counter[0] += 1
            item_seed = seed * 10_000_000 + counter[0]
            await run_item(ctx, pick_kind(random.Random(item_seed)), item_seed)
            now = time.perf_counter()
            open_window_if_due(now)
            if window["start"] is not None and window["start"] < now <= window["end"]:
                window["finished"] += 1
    await asyncio.gather(*(worker() for _ in range(workers)))
    await window["stats"]
    finished = [st.get("finished", 0) for st in server_stats]
    return {"workers": workers, "ramp_s": round(window["start"] - t0, 1), "measure_s": measure_s,
            "server_requests_per_s": round((finished[1] - finished[0]) / measure_s, 3),
            "items_finished_in_window": window["finished"],
            "capacity_items_per_s": round(window["finished"] / measure_s, 3),
            "items_started": counter[0], "wall_s": round(time.perf_counter() - t0, 1)}


async def open_loop(ctx: sc.Ctx, rate: float, duration_s: float, seed: int,
                    tasks: set) -> dict:
    """Poisson arrivals at `rate` items/s for `duration_s`; the tasks stay in `tasks`."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    next_t, launched, behind_max = t0, 0, 0.0
    while True:
        next_t += rng.expovariate(rate)
        if next_t - t0 >= duration_s:
            break
        delay = next_t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            behind_max = max(behind_max, -delay)
        launched += 1
        item_seed = seed * 10_000_000 + launched
        task = asyncio.create_task(run_item(ctx, pick_kind(random.Random(item_seed)), item_seed))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return {"target_rate": round(rate, 3), "launched": launched,
            "achieved_rate": round(launched / duration_s, 3),
            "max_launch_lag_s": round(behind_max, 3)}


async def drain(ctx: sc.Ctx, tasks: set, timeout_s: float, idle_grace_s: float) -> dict:
    """Waits for every outstanding item. An item still pending while the server has had nothing
    running and nothing waiting for `idle_grace_s` will never be answered: it is cancelled and
    counted as no_answer (so is anything left at `timeout_s`)."""
    t0 = time.perf_counter()
    idle_since, why = None, "drain deadline"
    while tasks and time.perf_counter() - t0 < timeout_s:
        await asyncio.wait(set(tasks), timeout=2.0)
        st = await admin_stats(ctx.admin)
        if st.get("running") == 0 and st.get("waiting") == 0:
            idle_since = idle_since or time.perf_counter()
            if time.perf_counter() - idle_since > idle_grace_s:
                why = f"server idle for {idle_grace_s:.0f} s"
                break
        else:
            idle_since = None
    pending = set(tasks)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
        for _ in pending:
            ctx.tally.record("drain", "no_answer", f"item still pending: {why}")
    return {"drain_s": round(time.perf_counter() - t0, 1), "pending_at_end": len(pending)}


# ----------------------------------------------------------------------------- idle and end state

async def wait_idle(url: str, admin: sc.AdminLink, timeout_s: float) -> dict:
    """Polls admin stats until 0 running, 0 waiting, 0 KV blocks used; returns the last stats
    with how long it took (or that it never got there)."""
    t0 = time.perf_counter()
    while True:
        st = await admin_stats(admin)
        idle = st.get("running") == 0 and st.get("waiting") == 0 and st.get("kv_used") == 0
        if idle or time.perf_counter() - t0 > timeout_s:
            break
        await asyncio.sleep(0.5)
    async with aiohttp.ClientSession() as s:
        m = await sb.scrape_metrics(s, url)
    st["metrics"] = {k: m.get(f"troupe:{k}") for k in (
        "num_requests_running", "num_requests_waiting", "kv_blocks_used", "kv_blocks_cached")}
    st["idle"] = idle
    st["waited_s"] = round(time.perf_counter() - t0, 1)
    return st


async def wait_fds(pid: int, port: int, want: int, timeout_s: float) -> dict:
    """Waits (closing connections take a moment) for the fd count to come back to `want`."""
    t0 = time.perf_counter()
    while True:
        fds = proc_fds(pid)
        if PEER_PORTS:
            fds["peer_connections"] = established_to_peers()
            fds["fds"] -= fds["peer_connections"]
        if fds["fds"] <= want or time.perf_counter() - t0 > timeout_s:
            return {**fds, "by_kind": proc_fds(pid, by_kind=True)["by_kind"],
                    "tcp": server_tcp(port), "rss_kib": proc_rss_kib(pid),
                    "waited_s": round(time.perf_counter() - t0, 1)}
        await asyncio.sleep(0.5)


# ----------------------------------------------------------------------------- slopes

def least_squares(xs: list[float], ys: list[float]) -> dict:
    """Slope, its standard error and the intercept of y = a + b x (x in minutes)."""
    n = len(xs)
    if n < 3:
        return {"n": n, "slope": None, "stderr": None}
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return {"n": n, "slope": None, "stderr": None}
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    rss = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    se = math.sqrt(rss / (n - 2) / sxx)
    return {"n": n, "slope": round(b, 3), "stderr": round(se, 3), "intercept": round(a, 1),
            "first": ys[0], "last": ys[-1], "min": min(ys), "max": max(ys)}


def fit_window(samples: list[dict], duration_s: float, warmup_frac: float,
               max_queue: int) -> tuple[float, str, bool]:
    """(start, why, saturated): the steady part starts after the warm-up and after the server's
    waiting queue first fills (while it fills, memory and connections grow with it by design)."""
    start, why = warmup_frac * duration_s, f"warm-up ({warmup_frac:.0%} of the run)"
    for s in samples:
        if (s.get("server") or {}).get("waiting", 0) >= 0.9 * max_queue:
            if s["t_s"] > start:
                start, why = s["t_s"], "the waiting queue first reached 90 % of scheduler.max_queue"
            return start, why, True
    return start, why, False


def series(win: list[dict]) -> dict:
    xs = [s["t_s"] / 60 for s in win]
    ys = {"rss_kib": [s["rss_kib"] for s in win], "fds": [s["fds"] for s in win],
          "fds_minus_established": [s["fds_minus_established"] for s in win],
          "close_wait": [s["tcp"].get("close_wait", 0) for s in win],
          "server_in_flight": [(s.get("server") or {}).get("running", 0) +
                               (s.get("server") or {}).get("waiting", 0) for s in win]}
    half = len(win) // 2
    out = {}
    for k, y in ys.items():
        out[k] = least_squares(xs, y)
        out[k]["halves"] = [least_squares(xs[:half], y[:half]).get("slope"),
                            least_squares(xs[half:], y[half:]).get("slope")]
    return out


def slopes(samples: list[dict], duration_s: float, args, max_queue: int) -> dict:
    """Least-squares slopes (per minute) after the warm-up, and over the steady window, which
    is what the checks use. The fd check takes fds minus ESTABLISHED server connections, which
    does not depend on the load; the RSS check needs a load that does not grow: the queue
    full, or the server's in-flight count not rising (slope <= 2 % of max_queue per min; a
    falling load cannot explain growing memory)."""
    good = [s for s in samples if "rss_kib" in s and s["t_s"] <= duration_s]
    warm = [s for s in good if s["t_s"] >= args.warmup_frac * duration_s]
    start, why, saturated = fit_window(good, duration_s, args.warmup_frac, max_queue)
    win = [s for s in good if s["t_s"] >= start]
    steady = series(win)
    inflight = steady["server_in_flight"].get("slope")
    def long_enough(t0: float, n: int) -> bool:
        return duration_s - t0 >= max(120.0, 0.2 * duration_s) and n >= 10
    load_steady = saturated or (inflight is not None and inflight <= 0.02 * max_queue)
    waiting = [(s.get("server") or {}).get("waiting", 0) for s in win]
    return {"after_warmup": series(warm), "steady": steady, "window_start_s": start,
            "window_end_s": duration_s, "window_reason": why, "queue_saturated": saturated,
            "overload": {"samples": len(waiting),
                         "waiting_pct": round(100 * sum(w > 0 for w in waiting) / max(1, len(waiting)), 1),
                         "queue_full_pct": round(100 * sum(w >= 0.9 * max_queue for w in waiting)
                                                 / max(1, len(waiting)), 1)},
            "fd_conclusive": long_enough(args.warmup_frac * duration_s, len(warm)),
            "rss_conclusive": long_enough(start, len(win)) and load_steady}


def growing(fit: dict, limit: float) -> bool:
    """Clearly growing: the slope is above `limit` and more than two standard errors above 0,
    and both halves of the window grow at more than limit / 2 (a leak grows all along; a one-off
    step, e.g. the allocator taking a bigger arena once, sits in one half only)."""
    if fit.get("slope") is None:
        return False
    halves = [h for h in fit["halves"] if h is not None]
    return fit["slope"] > limit and fit["slope"] - 2 * fit["stderr"] > 0 \
        and len(halves) == 2 and min(halves) > limit / 2


# ----------------------------------------------------------------------------- checks

def check(name: str, ok: bool, value, limit: str) -> dict:
    return {"check": name, "ok": bool(ok), "value": value, "limit": limit}


def run_checks(r: dict, args) -> list[dict]:
    out = []
    for phase in ("capacity", "soak"):
        if phase not in r:
            continue
        tot = r[phase]["outcomes_total"]
        for f in sc.FAILURES:
            out.append(check(f"{phase}: {f}", tot.get(f, 0) == 0, tot.get(f, 0), "0"))
    end = r["end"]
    st = end["stats"]
    out.append(check("end: running / waiting / KV blocks used",
                     st.get("idle", False),
                     f"{st.get('running')} / {st.get('waiting')} / {st.get('kv_used')} "
                     f"(metrics {st['metrics'].get('num_requests_running')} / "
                     f"{st['metrics'].get('num_requests_waiting')} / "
                     f"{st['metrics'].get('kv_blocks_used')})", "0 / 0 / 0"))
    m = st["metrics"]
    out.append(check("end: /metrics agrees", (m.get("num_requests_running"),
                                              m.get("num_requests_waiting"),
                                              m.get("kv_blocks_used")) == (0, 0, 0),
                     f"{m.get('num_requests_running')} / {m.get('num_requests_waiting')} / "
                     f"{m.get('kv_blocks_used')}", "0 / 0 / 0"))
    base, fin = r["idle_baseline"], end["idle_fds"]
    grew = {k: n - base["by_kind"].get(k, 0) for k, n in fin["by_kind"].items()
            if n > base["by_kind"].get(k, 0)}
    out.append(check("end: idle fds back to baseline", fin["fds"] <= base["fds"],
                     f"{base['fds']} -> {fin['fds']}" + (f" (more: {grew})" if grew else ""),
                     "<= baseline"))
    cw = fin["tcp"].get("close_wait", 0)
    out.append(check("end: CLOSE_WAIT sockets on the server port", cw == 0, cw, "0"))
    sl = r["slopes"]
    rss, fds = sl["steady"]["rss_kib"], sl["after_warmup"]["fds_minus_established"]
    window = f"{sl['window_start_s']:.0f}-{sl['window_end_s']:.0f} s"
    fd_window = f"{args.warmup_frac * sl['window_end_s']:.0f}-{sl['window_end_s']:.0f} s"
    if sl["rss_conclusive"]:
        out.append(check(f"soak: RSS slope (KiB/min, {window})",
                         not growing(rss, args.max_rss_kib_per_min),
                         f"{rss['slope']} ± {rss['stderr']} (halves {rss['halves']})",
                         f"<= {args.max_rss_kib_per_min}"))
    else:
        out.append(check("soak: RSS slope", True, "inconclusive: the load never got steady "
                         "(the queue was still filling)" if not sl["queue_saturated"] else
                         f"inconclusive: steady window {window} too short",
                         "a steady window >= 120 s and 20 % of the run"))
    if sl["fd_conclusive"]:
        out.append(check(f"soak: fd slope (fds - established, /min, {fd_window})",
                         not growing(fds, args.max_fds_per_min),
                         f"{fds['slope']} ± {fds['stderr']} (halves {fds['halves']})",
                         f"<= {args.max_fds_per_min}"))
    else:
        out.append(check("soak: fd slope", True, f"inconclusive: window {fd_window} too short",
                         "a window >= 120 s and 20 % of the run"))
    if "pd" in r:
        died = r["pd"]["died_on_its_own"]
        out.append(check("pd: the prefill server died only by our SIGKILL", not died,
                         f"{r['pd']['kills']} kills; {died[:3]}", "0 other deaths"))
    srv = r["server_exit"]
    out.append(check("server alive to the end, exit 0 on SIGTERM",
                     srv["alive_at_end"] and srv["exit_code"] == 0,
                     f"alive={srv['alive_at_end']} exit={srv['exit_code']}", "alive, 0"))
    return out


# ----------------------------------------------------------------------------- reporting

COLUMNS = ("completed", "cancelled", "refused_429", "refused_4xx", "rejected",
           "client_disconnect", "client_abort", "admin_cancelled_live", "admin_not_live",
           "admin_nothing_running") + sc.FAILURES
SHORT = {"completed": "done", "cancelled": "cancel", "refused_429": "429", "refused_4xx": "4xx",
         "rejected": "reject", "client_disconnect": "disc", "client_abort": "abort",
         "admin_cancelled_live": "adm_live", "admin_not_live": "adm_gone",
         "admin_nothing_running": "adm_none", "no_answer": "NOANS", "double_answer": "TWICE",
         "http_5xx": "5XX", "bad_answer": "BAD", "transport_error": "TRANSP"}


def outcome_table(counts: dict) -> str:
    cols = [c for c in COLUMNS if any(counts[k].get(c) for k in counts)] or ["completed"]
    head = ["kind"] + [SHORT[c] for c in cols] + ["total"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total = {c: 0 for c in cols}
    for kind in sorted(counts):
        row = [counts[kind].get(c, 0) for c in cols]
        for c, v in zip(cols, row):
            total[c] += v
        lines.append("| " + " | ".join([kind] + [str(v) for v in row] +
                                       [str(sum(counts[kind].values()))]) + " |")
    lines.append("| **all** | " + " | ".join(str(total[c]) for c in cols) +
                 f" | {sum(total.values())} |")
    return "\n".join(lines)


def summary(r: dict) -> str:
    out = [f"## soak {r['meta']['commit']} ({r['meta']['date']}), {r['meta']['minutes']} min\n"]
    cap = r.get("capacity", {})
    how = "given" if not cap else (f"closed loop, {cap['workers']} workers, {cap['measure_s']} s "
                                   f"after a {cap['ramp_s']} s ramp; "
                                   f"{cap['server_requests_per_s']} engine requests/s")
    out.append(f"server: {r['server_config']}")
    out.append(f"capacity: {r['capacity_items_per_s']} items/s ({how});"
               f" offered {r['soak']['load']['target_rate']} items/s "
               f"(achieved {r['soak']['load']['achieved_rate']}, {r['soak']['load']['launched']} "
               f"items, max launch lag {r['soak']['load']['max_launch_lag_s']} s)")
    srv = r["soak"]["server_totals"]
    ov = r["slopes"]["overload"]
    out.append(f"overload in the steady window: requests waiting in {ov['waiting_pct']} % of the "
               f"samples, queue >= 90 % full in {ov['queue_full_pct']} %")
    if not r["slopes"]["queue_saturated"]:
        out.append("NOTE: the queue never filled: the server kept up with the offered rate, so "
                   "this was not 2x its capacity (a busy box during the capacity phase?); "
                   "rerun on a steadier box, or with --capacity / --overload")
    out.append(f"server during the soak (load + drain): {srv.get('finished')} finished, "
               f"{srv.get('refused')} refused, drain {r['soak']['drain']['drain_s']} s; "
               f"host load {r['host']['loadavg_before']} -> {r['host']['loadavg_after']},"
               f" steal {r['host']['steal_pct']} %, client CPU {r['host']['client_cpu_s']} s\n")
    out.append("### soak outcomes (one row per request kind)\n")
    out.append(outcome_table(r["soak"]["outcomes"]) + "\n")
    lat = r["soak"]["completed_latency"]
    out.append("completed requests, send -> end, p50 / p99 s: " + ", ".join(
        f"{k} {v['p50_s']} / {v['p99_s']}" for k, v in sorted(lat.items())) + "\n")
    sl = r["slopes"]
    out.append(f"### slopes per minute (least squares; steady window {sl['window_start_s']:.0f}-"
               f"{sl['window_end_s']:.0f} s: after the {sl['window_reason']})\n")
    out.append("| series | after warm-up: slope ± stderr | steady: slope ± stderr | "
               "steady halves | steady first / last / max |")
    out.append("|---|---|---|---|---|")
    for key in ("rss_kib", "fds", "fds_minus_established", "close_wait", "server_in_flight"):
        w, f = sl["after_warmup"][key], sl["steady"][key]
        out.append(f"| {key} | {w.get('slope')} ± {w.get('stderr')} | {f.get('slope')} ± "
                   f"{f.get('stderr')} | {f.get('halves')} | {f.get('first')} / {f.get('last')}"
                   f" / {f.get('max')} |")
    base, end = r["idle_baseline"], r["end"]["idle_fds"]
    out.append(f"\nidle before -> after: fds {base['fds']} -> {end['fds']}, RSS "
               f"{base['rss_kib']} -> {end['rss_kib']} KiB; end stats {r['end']['stats']}\n")
    if "pd" in r:
        pd = r["pd"]
        out.append(f"P/D: prefill server SIGKILLed {pd['kills']} times (every ~{pd['kill_every_s']} s);"
                   f" the decode server's remote prefills {pd['remote_prefills']:.0f}, fallbacks "
                   f"{pd['fallbacks']:.0f}\n")
    out.append("### checks\n\n| check | value | limit | ok |\n|---|---|---|---|")
    for c in r["checks"]:
        out.append(f"| {c['check']} | {c['value']} | {c['limit']} | "
                   f"{'yes' if c['ok'] else '**FAIL**'} |")
    if r["failure_examples"]:
        out.append("\n### first failures\n")
        for e in r["failure_examples"][:15]:
            out.append(f"- {e['t']} {e['kind']} {e['outcome']}: {e['detail'][:300]}")
    return "\n".join(out)


# ----------------------------------------------------------------------------- phases

def phase_result(ctx: sc.Ctx) -> dict:
    t = ctx.tally
    lat = {k: {"n": len(v), "p50_s": round(sorted(v)[len(v) // 2], 2),
               "p99_s": round(sorted(v)[min(len(v) - 1, int(0.99 * len(v)))], 2)}
           for k, v in t.latency_s.items() if v}
    return {"outcomes": {k: dict(v) for k, v in t.counts.items()},
            "outcomes_total": dict(t.totals()), "codes": dict(t.codes.most_common()),
            "completed_latency": lat, "failures": t.examples}


async def measure_capacity(args, cfg, port, model, admin) -> dict:
    ctx = make_ctx(args, cfg, port, model, admin)
    workers = args.concurrency or cfg["scheduler"]["max_num_seqs"]
    print(f"capacity: closed loop, {workers} workers, ramp (two waves) + {args.capacity_s} s",
          file=sys.stderr, flush=True)
    try:
        res = await closed_loop(ctx, workers, args.capacity_s, args.seed)
    finally:
        await close_ctx(ctx)
    res.update(phase_result(ctx))
    print(f"capacity: {res['capacity_items_per_s']} items/s ({res['items_finished_in_window']}"
          f" in {args.capacity_s} s after a {res['ramp_s']} s ramp; the server finished "
          f"{res['server_requests_per_s']} engine requests/s)", file=sys.stderr)
    return res


async def progress(ctx: sc.Ctx, samples: list, t0: float, stop: asyncio.Event):
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 30)
        except asyncio.TimeoutError:
            pass
        s = samples[-1] if samples else {}
        tot = ctx.tally.totals()
        print(f"  t={time.perf_counter() - t0:6.0f}s inflight={ctx.tally.inflight} "
              f"done={ctx.tally.items_done} server={s.get('server')} rss={s.get('rss_kib')} "
              f"fds={s.get('fds')} failures={ctx.tally.num_failures()} "
              f"429={tot.get('refused_429', 0)}", file=sys.stderr, flush=True)


async def soak(args, cfg, port, model, admin, pid, rate,
               prefill: PrefillPeer | None = None) -> tuple[dict, list]:
    ctx = make_ctx(args, cfg, port, model, admin)
    samples: list = []
    stop = asyncio.Event()
    t0 = time.perf_counter()
    bg = [asyncio.create_task(sampler(pid, port, admin, t0, ctx.tally, args.sample_s, samples,
                                      stop)),
          asyncio.create_task(progress(ctx, samples, t0, stop))]
    before = await admin_stats(admin)
    tasks: set = set()
    duration = args.minutes * 60
    print(f"soak: {rate:.2f} items/s for {duration:.0f} s", file=sys.stderr, flush=True)
    if prefill is not None:
        prefill.start_killing(args.seed + 2)
    try:
        load = await open_loop(ctx, rate, duration, args.seed + 1, tasks)
        if prefill is not None:
            await asyncio.to_thread(prefill.stop_killing)
        print(f"soak: load stopped; draining {len(tasks)} items", file=sys.stderr, flush=True)
        drained = await drain(ctx, tasks, args.request_timeout + 60, args.idle_wait_s)
    finally:
        if prefill is not None:
            await asyncio.to_thread(prefill.stop_killing)
        await close_ctx(ctx)
        stop.set()
        await asyncio.gather(*bg, return_exceptions=True)
    after = await admin_stats(admin)
    res = {"load": load, "drain": drained, "duration_s": duration, **phase_result(ctx),
           "server_totals": {k: after.get(k, 0) - before.get(k, 0) for k in ("finished",
                                                                              "refused")}}
    return res, samples


async def model_id(url: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/v1/models") as resp:
            return (await resp.json())["data"][0]["id"]


async def run_all(args, server: sbs.Server, cfg: dict, prefill: PrefillPeer | None = None) -> dict:
    pid, port, url = server.proc.pid, server.port, server.url
    admin = sc.AdminLink(cfg["admin"]["socket_path"])
    model = await model_id(url)
    r: dict = {"server_config": {k: cfg["scheduler"][k] for k in (
        "max_num_seqs", "max_queue", "max_num_batched_tokens", "max_step_ms")}}
    if args.capacity:
        r["capacity_items_per_s"] = args.capacity
    else:
        r["capacity"] = await measure_capacity(args, cfg, port, model, admin)
        r["capacity_items_per_s"] = r["capacity"]["capacity_items_per_s"]
    if prefill is not None:
        # One remote prefill before the baseline: the first call to a peer starts Asio's resolver
        # thread and its io_context in the decode server's peer client (3 fds, once).
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/completions", json={
                    "model": model, "prompt": " ".join(["river"] * 150), "max_tokens": 1}) as resp:
                await resp.read()
    await wait_idle(url, admin, args.idle_wait_s)
    await asyncio.sleep(2)   # closing connections
    r["idle_baseline"] = await wait_fds(pid, port, 0, 0)
    print(f"idle baseline: {r['idle_baseline']}", file=sys.stderr, flush=True)
    rate = max(0.1, args.overload * r["capacity_items_per_s"])
    r["soak"], r["samples"] = await soak(args, cfg, port, model, admin, pid, rate, prefill)
    if prefill is not None:
        r["pd"] = {**prefill.result(),
                   "remote_prefills": metric_total(url, "troupe:remote_prefills_total"),
                   "fallbacks": metric_total(url, "troupe:kv_transfer_fallbacks_total")}
    stats = await wait_idle(url, admin, args.idle_wait_s)
    fds = await wait_fds(pid, port, r["idle_baseline"]["fds"], args.idle_wait_s)
    r["end"] = {"stats": stats, "idle_fds": fds}
    r["slopes"] = slopes(r["samples"], r["soak"]["duration_s"], args,
                         cfg["scheduler"]["max_queue"])
    admin.close()
    return r


# ----------------------------------------------------------------------------- CLI

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--minutes", type=float, default=30.0, help="soak duration (load only; drain comes after)")
    a("--overload", type=float, default=2.0, help="offered rate = this x measured capacity")
    a("--capacity", type=float, default=0.0, help="items/s; skips the capacity measurement")
    a("--capacity-s", type=float, default=60.0, help="closed-loop measuring time")
    a("--concurrency", type=int, default=0, help="closed-loop workers (0: max_num_seqs)")
    a("--max-queue", type=int, default=0,
      help="scheduler.max_queue for the soak server (0: 2 x max_num_seqs = 128 by default; "
           "-1: the config's, 1024 by default). At 2x load the queue fills at about the "
           "capacity rate; on a 2-core box (~0.5-3 requests/s) 1024 takes 6-30 minutes, so a "
           "10-minute soak would never reach the steady, refusing regime the slopes need")
    a("--sample-s", type=float, default=3.0)
    a("--warmup-frac", type=float, default=0.2)
    a("--max-rss-kib-per-min", type=float, default=512.0)
    a("--max-fds-per-min", type=float, default=1.0)
    a("--request-timeout", type=float, default=3600.0,
      help="per request; must exceed the time a request can wait behind a full queue "
           "(scheduler.max_queue / throughput: ~17 min at 1 req/s). A request the server has "
           "dropped is caught sooner: see drain()")
    a("--idle-wait-s", type=float, default=60.0)
    a("--troupe-bin", default=os.path.join(ROOT, "build", "bin", "troupe"))
    a("--config", default=os.path.join(ROOT, "configs", "default.json"))
    a("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a("--log-level", default="info")
    a("--seed", type=int, default=1)
    a("--pd-kill-s", type=float, default=0.0,
      help="soak a decode server whose prefill server is SIGKILLed and restarted every ~S s "
           "(0: a combined server, no peer)")
    a("--out", default="", help="JSON (default bench/results/soak_<commit>.json; appended)")
    return ap.parse_args()


def meta(args, tmp: str) -> dict:
    return {"commit": git("rev-parse", "--short", "HEAD"), "argv": sys.argv,
            "dirty_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines()),
            "troupe_bin": args.troupe_bin, "binary_mtime": time.strftime(
                "%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(args.troupe_bin))),
            "config": args.config, "model": args.model, "minutes": args.minutes,
            "max_queue_arg": args.max_queue,
            "overload": args.overload, "pd_kill_s": args.pd_kill_s, "mix_weights": {k: w for k, (w, _) in MIX.items()},
            "thresholds": {"rss_kib_per_min": args.max_rss_kib_per_min,
                           "fds_per_min": args.max_fds_per_min},
            "logs": tmp, "nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def main() -> int:
    args = parse_args()
    for path in (args.troupe_bin, args.model, args.config):
        if not os.path.exists(path):
            raise SystemExit(f"not found: {path}")
    tmp = tempfile.mkdtemp(prefix="troupe-soak-")
    print(f"logs and config in {tmp}", file=sys.stderr)
    result = {"meta": meta(args, tmp)}
    cpu0, ru0 = sb.read_cpu_stat(), resource.getrusage(resource.RUSAGE_SELF)
    load0 = sb.loadavg()
    prefill = None
    if args.pd_kill_s:
        prefill = PrefillPeer(args, tmp)
        prefill.start()
    server, cfg = start_server(args, tmp, prefill)
    try:
        result.update(asyncio.run(run_all(args, server, cfg, prefill)))
    finally:
        result["server_exit"] = stop_server(server)
        if prefill is not None:
            prefill.stop_killing()
            prefill.server.stop()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    result["host"] = {"loadavg_before": load0, "loadavg_after": sb.loadavg(),
                      **sb.steal_between(cpu0, sb.read_cpu_stat()),
                      "client_cpu_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime -
                                            ru0.ru_stime, 1)}
    result["server_log"] = log_summary(server.log_path)
    result["failure_examples"] = (result.get("capacity", {}).get("failures", []) +
                                  result["soak"]["failures"])
    result["checks"] = run_checks(result, args)
    result["passed"] = all(c["ok"] for c in result["checks"])
    out = args.out or os.path.join(HERE, "results", f"soak_{result['meta']['commit']}.json")
    append_json(out, "runs", result)
    print(summary(result))
    print(f"\nresult: {'PASS' if result['passed'] else 'FAIL'}; JSON: {out}; logs: {tmp}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for s in list(STARTED):
            s.stop()
