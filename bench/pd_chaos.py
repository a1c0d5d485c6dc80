#!/usr/bin/env python3
"""Disaggregated prefill/decode under SIGKILL (issue 41): real `troupe serve` processes — two
prefill servers and two decode servers, each decode server using both prefill servers over a KV
transport (`--transport`: troupe's own `tcp`, the default, or `ucx`, UCX over tcp) — serve a steady load of remote-prefill requests while a chaos loop SIGKILLs a
random one of them at a random moment and restarts it on its port, --kills times.

  .venv/bin/python bench/pd_chaos.py --kills 1000        # ~40 min on 2 cores
  .venv/bin/python bench/pd_chaos.py --kills 30 --json /tmp/pd.json
  .venv/bin/python bench/pd_chaos.py --kills 200 --transport ucx --keep-going   # UCX 1.13 aborts

Checks (exit code 1 if any fails):
  - no server dies but the one the loop kills: before every kill and at the end each other
    process must be running (an abort, a crash or an exit is named with its log's tail);
  - every client request is answered: 200 (remotely prefilled, or by the local-prefill fallback
    when its prefill server or its pull died) or a clean error in OpenAI's shape; a request is
    excused only when its own decode server was the one killed while it ran;
  - nothing leaks on the survivors: after the load stops and the leases had time to expire, every
    server's admin `stats` shows 0 KV blocks in use, 0 leases held, 0 transfers in flight and 0
    requests awaiting KV (checked through the admin socket).
The run's counts (kills by role, kills that hit a transfer, requests by outcome, fallbacks) are
printed and written as JSON for bench/RESULTS.md.
"""
import argparse
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
BINARY = pathlib.Path(os.environ.get("TROUPE_BINARY", ROOT / "build" / "bin" / "troupe"))
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WORDS = ("river stone lantern orbit meadow copper signal harbor velvet quartz ember glacier "
         "thunder willow cipher falcon marble prism saddle tundra beacon canyon").split()
LEASE_MS = 4000


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TRANSPORT_ARGS = {"tcp": ["--kv-transport", "tcp"],
                  "ucx": ["--kv-transport", "ucx", "--ucx-tls", "tcp"]}


class Proc:
    """One troupe server: its role, port, admin socket; started again on the same port."""

    transport_args = TRANSPORT_ARGS["tcp"]

    def __init__(self, name, role, workdir, prefill_ports=()):
        self.name, self.role, self.workdir = name, role, workdir
        self.port = free_port()
        self.sock = workdir / f"{name}.sock"
        self.prefill_ports = prefill_ports
        self.process = None
        # Cleared, then the generation bumped, before each kill; set again once it serves. A
        # request sent in generation G to a server that was up is excused only if G has passed
        # by the time it fails (its server was killed under it).
        self.up = threading.Event()
        self.generation = 0
        self.config = workdir / f"{name}.json"
        self.config.write_text(json.dumps({"disagg": {
            "kv_lease_ms": LEASE_MS, "min_remote_prefill_tokens": 64,
            "pull_timeout_ms": 5000, "prefill_timeout_ms": 20000}}))

    def start(self):
        args = [str(BINARY), "serve", "--model", str(MODEL), "--port", str(self.port),
                "--config", str(self.config), "--role", self.role, *self.transport_args,
                "--admin-socket", str(self.sock), "--storage-dir", str(self.workdir / f"{self.name}-store"),
                "--set", "cpu.threads=1"]
        for p in self.prefill_ports:
            args += ["--prefill-url", f"127.0.0.1:{p}"]
        self.log = open(self.workdir / f"{self.name}.log", "ab")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start: {self.tail()}")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    self.up.set()
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready: {self.tail()}")

    def kill(self):
        self.up.clear()
        self.generation += 1
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def tail(self, n=2000):
        return (self.workdir / f"{self.name}.log").read_text(errors="replace")[-n:]

    def admin_stats(self):
        r = subprocess.run([str(BINARY), "admin", "--socket", str(self.sock), "--json", "stats"],
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def metrics_busy(self):
        """Whether a transfer is under way on this server, from /metrics."""
        names = (("troupe:kv_transfers_in_flight", "troupe:kv_transfer_requests_awaiting_kv")
                 if self.role == "decode" else ("troupe:kv_transfer_leases", "troupe:num_requests_running"))
        return any(self.metric(n) > 0 for n in names)

    def metric(self, name):
        text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []

    def add(self, outcome, failure=None):
        with self.lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            if failure:
                self.failures.append(failure)


def client(decoders, stop, tally, rng):
    session = requests.Session()
    while not stop.is_set():
        d = rng.choice(decoders)
        generation = d.generation  # before `up`: a kill in between changes it
        if not d.up.is_set():
            time.sleep(0.05)
            continue
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(90, 220)))
        body = {"model": "SmolLM2-135M-Instruct", "max_tokens": rng.randint(1, 6), "temperature": 0,
                "messages": [{"role": "user", "content": prompt}]}
        try:
            r = session.post(f"http://127.0.0.1:{d.port}/v1/chat/completions", json=body, timeout=120)
        except requests.RequestException as e:
            session = requests.Session()
            if d.generation != generation:
                tally.add("lost with its decode server")
            else:
                tally.add("unanswered", f"{d.name}: {type(e).__name__}: {e}")
                time.sleep(0.2)
            continue
        if r.status_code == 200 and r.json().get("choices"):
            tally.add("completed")
        else:
            try:
                error = r.json()["error"]
                tally.add(f"clean error {r.status_code} {error.get('code') or error.get('type')}")
            except (ValueError, KeyError, TypeError):
                tally.add("bad answer", f"{d.name}: {r.status_code} {r.text[:200]}")


def check_alive(procs, victim=None):
    """Names of the processes that died on their own (not `victim`)."""
    dead = []
    for p in procs:
        if p is not victim and p.process.poll() is not None:
            dead.append(f"{p.name} exited with {p.process.returncode}: {p.tail(1500)}")
    return dead


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--min-gap", type=float, default=0.2, help="seconds between a restart and the next kill")
    ap.add_argument("--max-gap", type=float, default=1.5)
    ap.add_argument("--aim", type=float, default=1.0,
                    help="seconds to wait for the victim to be mid-transfer before the kill")
    ap.add_argument("--keep-going", action="store_true",
                    help="restart a server that died on its own and go on (to measure a rate)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--transport", choices=sorted(TRANSPORT_ARGS), default="tcp",
                    help="the servers' KV transport (disagg.kv_transport)")
    ap.add_argument("--json", type=pathlib.Path, default=None)
    args = ap.parse_args()
    Proc.transport_args = TRANSPORT_ARGS[args.transport]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pd_chaos_"))
    print(f"pd_chaos: seed {seed}, {args.kills} kills, {args.transport} transport, logs in {workdir}", flush=True)

    prefills = [Proc(f"prefill{i}", "prefill", workdir) for i in range(2)]
    decoders = [Proc(f"decode{i}", "decode", workdir, [p.port for p in prefills]) for i in range(2)]
    procs = prefills + decoders
    for p in procs:
        p.start()
    print("pd_chaos: " + ", ".join(f"{p.name} pid {p.process.pid}" for p in procs), flush=True)

    tally, stop = Tally(), threading.Event()
    clients = [threading.Thread(target=client, args=(decoders, stop, tally, random.Random(seed + i)))
               for i in range(args.clients)]
    for t in clients:
        t.start()

    aborts, kills = [], {"prefill": 0, "decode": 0}
    in_transfer = 0
    started = time.time()
    try:
        for k in range(args.kills):
            time.sleep(rng.uniform(args.min_gap, args.max_gap))
            victim = rng.choice(procs)
            died = check_alive(procs)
            aborts += died
            if died and not args.keep_going:
                break
            for p in procs:  # --keep-going: a server that died on its own serves again
                if p.process.poll() is not None:
                    p.up.clear()
                    p.generation += 1
                    p.log.close()
                    p.start()
            # Aim at a transfer: up to --aim seconds for the victim to be mid-way (a decode server
            # pulling or awaiting KV; a prefill server computing or holding a lease), then kill.
            busy, aim_until = False, time.time() + args.aim
            while not busy and time.time() < aim_until:
                try:
                    busy = victim.metrics_busy()
                except requests.RequestException:
                    break
            victim.kill()
            in_transfer += busy
            kills[victim.role] += 1
            victim.start()
            if (k + 1) % 50 == 0:
                print(f"  {k + 1} kills in {time.time() - started:.0f} s; {dict(tally.counts)}", flush=True)
    finally:
        stop.set()
        for t in clients:
            t.join(timeout=180)
    aborts += check_alive(procs)

    # The survivors at rest: leases expire (LEASE_MS), nothing in use, nothing in flight.
    leaks = {}
    deadline = time.time() + LEASE_MS / 1000 + 30
    while time.time() < deadline:
        leaks = {}
        for p in procs:
            s = p.admin_stats() or {}
            state = {"kv_blocks_used": s.get("kv_blocks", {}).get("used"),
                     "leases_held": s.get("disagg", {}).get("leases_held"),
                     "transfers_in_flight": s.get("disagg", {}).get("transfers_in_flight"),
                     "awaiting_kv": s.get("disagg", {}).get("awaiting_kv"),
                     "running": s.get("requests", {}).get("running")}
            if any(v != 0 for v in state.values()):
                leaks[p.name] = state
        if not leaks:
            break
        time.sleep(0.5)
    fallbacks = sum(d.metric("troupe:kv_transfer_fallbacks_total") for d in decoders
                    if d.process.poll() is None)
    for p in procs:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGTERM)
    exits = {p.name: p.process.wait(timeout=60) for p in procs}

    result = {"seed": seed, "transport": args.transport, "kills": kills, "kills_total": sum(kills.values()),
              "kills_mid_transfer": in_transfer, "seconds": round(time.time() - started),
              "requests": dict(sorted(tally.counts.items())),
              "fallbacks_since_last_restart": fallbacks, "aborts": aborts,
              "unanswered": tally.failures[:20], "leaks": leaks, "sigterm_exits": exits,
              "date": time.strftime("%Y-%m-%d"),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True, cwd=ROOT).stdout.strip()}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = not aborts and not tally.failures and not leaks and all(v == 0 for v in exits.values())
    print("pd_chaos:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
