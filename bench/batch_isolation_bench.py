#!/usr/bin/env python3
"""Batch isolation benchmark (issue 40): does a large /v1/batches batch raise interactive users'
time to first token? troupe only (llama-server has no durable batch API).

  .venv/bin/python bench/batch_isolation_bench.py [--troupe-bin build/bin/troupe] [--items 10000]
      [--clients 8] [--rounds 6] [--max-tokens 32] [--batch-max-tokens 32]

One fresh server (its own storage.dir in a temporary directory). Measured twice, idle and with
the batch running: `--clients` interactive clients, each sending `--rounds` streamed chats
(max_tokens `--max-tokens`, temperature 0) one after another, with a random pause of 0-200 ms
before each (independent users arrive at random phases of a step). TTFT = send -> first SSE
chunk with text. With the batch: --items /v1/completions requests (max_tokens
`--batch-max-tokens`), measured once its items are in the engine (troupe:batch_items_in_flight
> 0) and after --settle-s more seconds (users arrive at a server the batch keeps busy); the
batch's items answered per second during the measurement are reported too. Results:
a Markdown table on stdout and bench/results/batch_isolation_<commit>.json (appended).
Read the numbers with the load average printed beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(base, name, label=""):
    """The first sample of `name` whose labels contain `label`."""
    for line in requests.get(base + "/metrics", timeout=30).text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def ttft_of_one(base, prompt, max_tokens):
    sent = time.monotonic()
    with requests.post(base + "/v1/chat/completions", stream=True, timeout=600,
                       json={"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                             "temperature": 0, "stream": True}) as r:
        r.raise_for_status()
        first = None
        for raw in r.iter_lines():
            if not raw.startswith(b"data: ") or raw == b"data: [DONE]":
                continue
            chunk = json.loads(raw[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.monotonic()
        return (first if first is not None else time.monotonic()) - sent


def interactive(base, clients, rounds, max_tokens, seed):
    samples, lock = [], threading.Lock()

    def client(i):
        rng = random.Random(seed * 1000 + i)
        for k in range(rounds):
            time.sleep(rng.uniform(0, 0.2))
            t = ttft_of_one(base, f"User {i} question {k}: tell me about the {rng.choice(WORDS)}.", max_tokens)
            with lock:
                samples.append(t)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


WORDS = ["sea", "moon", "forest", "city", "river", "mountain", "desert", "garden"]


def summary(samples):
    q = statistics.quantiles(samples, n=100)
    return {"n": len(samples), "p50_ms": 1000 * statistics.median(samples), "p99_ms": 1000 * q[98],
            "max_ms": 1000 * max(samples)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe-bin", default=str(ROOT / "build" / "bin" / "troupe"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--batch-max-tokens", type=int, default=32)
    ap.add_argument("--settle-s", type=float, default=5.0,
                    help="seconds the batch runs alone before the users arrive (its first items' "
                         "prefill is one large step on an idle engine)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra `troupe serve` argument (repeat), e.g. --server-arg=--set "
                         "--server-arg=batches.max_in_flight=16")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(pathlib.Path(tmp) / "troupe.log", "wb")
        server = subprocess.Popen([args.troupe_bin, "serve", "--model", args.model, "--port", str(port),
                                   "--storage-dir", str(pathlib.Path(tmp) / "storage"), *args.server_arg],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(600):
                try:
                    if requests.get(base + "/health", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.1)
            ttft_of_one(base, "warm up", 4)
            idle = interactive(base, args.clients, args.rounds, args.max_tokens, seed=1)
            load_idle = os.getloadavg()[0]
            lines = "\n".join(json.dumps({"custom_id": f"item-{i}", "method": "POST", "url": "/v1/completions",
                                          "body": {"prompt": f"Item {i}: write one sentence about the "
                                                             f"{WORDS[i % len(WORDS)]}.",
                                                   "max_tokens": args.batch_max_tokens, "temperature": 0,
                                                   "ignore_eos": True}})
                              for i in range(args.items)) + "\n"
            file_id = requests.post(base + "/v1/files", files={"file": ("b.jsonl", lines.encode())},
                                    data={"purpose": "batch"}, timeout=120).json()["id"]
            batch = requests.post(base + "/v1/batches", timeout=60, json={
                "input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h"}).json()
            while metric(base, "troupe:batch_items_in_flight") == 0:
                time.sleep(0.05)
            settle_from = metric(base, "troupe:batch_items_total", 'outcome="succeeded"')
            time.sleep(args.settle_s)
            alone_per_s = ((metric(base, "troupe:batch_items_total", 'outcome="succeeded"') - settle_from)
                           / args.settle_s if args.settle_s > 0 else float("nan"))
            done_before = metric(base, "troupe:batch_items_total", 'outcome="succeeded"')
            started = time.monotonic()
            contended = interactive(base, args.clients, args.rounds, args.max_tokens, seed=2)
            elapsed = time.monotonic() - started
            done_after = metric(base, "troupe:batch_items_total", 'outcome="succeeded"')
            load_busy = os.getloadavg()[0]
            requests.post(base + f"/v1/batches/{batch['id']}/cancel", timeout=60)
        finally:
            server.terminate()
            server.wait(timeout=120)
    result = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "items": args.items,
              "server_args": args.server_arg, "settle_s": args.settle_s,
              "clients": args.clients, "rounds": args.rounds, "idle": summary(idle),
              "with_batch": summary(contended),
              "batch_items_per_s": (done_after - done_before) / elapsed,
              "batch_items_per_s_alone": alone_per_s,
              "load_idle": load_idle, "load_busy": load_busy}
    out = ROOT / "bench" / "results" / f"batch_isolation_{commit}.json"
    out.parent.mkdir(exist_ok=True)
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(f"| | TTFT p50 | TTFT p99 | max | samples | load |")
    print(f"|---|---|---|---|---|---|")
    for name, key, load in (("idle", "idle", load_idle), (f"{args.items}-item batch running", "with_batch", load_busy)):
        s = result[key]
        print(f"| {name} | {s['p50_ms']:.0f} ms | {s['p99_ms']:.0f} ms | {s['max_ms']:.0f} ms | {s['n']} | {load:.2f} |")
    print(f"batch items answered: {result['batch_items_per_s_alone']:.1f}/s alone (the settle time), "
          f"{result['batch_items_per_s']:.1f}/s beside the users")
    return 0


if __name__ == "__main__":
    sys.exit(main())
