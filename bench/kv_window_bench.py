#!/usr/bin/env python3
"""KV memory of one long conversation on a sliding-window model (issue 36): starts
`troupe serve --model MODEL`, streams one completion of an ~N-token prompt, and reads
troupe:kv_blocks_used from /metrics while it decodes. Prints the pages held, what holding every
page of the context in every KV group would take (num_kv_groups x context / block_size, the
layout without sliding-window freeing), and the ratio.

  .venv/bin/python bench/kv_window_bench.py [--model models/gemma-3-270m-q4_k_m.gguf]
                                            [--tokens 8192]
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import free_port  # noqa: E402


def metric(base, name):
    text = requests.get(base + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--binary", default=str(ROOT / "build" / "bin" / "troupe"))
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = ROOT / "build" / "kv_window_bench.json"
    # Room for one 8k conversation in every layout: 1 GiB of KV.
    config.write_text(json.dumps({"cpu": {"kv_memory_mb": 1024}, "scheduler": {"max_model_len": 16384}}))
    log = open(ROOT / "build" / "kv_window_bench.log", "w")
    server = subprocess.Popen([args.binary, "serve", "--model", args.model, "--port", str(port),
                               "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if requests.get(base + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        groups = re.search(r"KV groups: (\d+) of (\d+) layers", (ROOT / "build" / "kv_window_bench.log").read_text())
        num_groups = int(groups.group(1)) if groups else 1
        sentence = "The river carried salt, grain and cloth to the market town every spring. "
        ids = requests.post(base + "/tokenize", json={"content": sentence}, timeout=30).json()["tokens"]
        prompt = sentence * max(1, args.tokens // max(1, len(ids) - 1))
        samples = []
        done = threading.Event()

        def poll():
            while not done.is_set():
                used = metric(base, "troupe:kv_blocks_used")
                if used is not None:
                    samples.append(used)
                time.sleep(0.2)

        poller = threading.Thread(target=poll)
        poller.start()
        r = requests.post(base + "/v1/completions", timeout=3600,
                          json={"prompt": prompt, "max_tokens": 64, "temperature": 0,
                                "ignore_eos": True})
        done.set()
        poller.join()
        usage = r.json()["usage"]
        context = usage["prompt_tokens"] + usage["completion_tokens"]
        block_size = 16
        held = max(samples) if samples else float("nan")
        full = num_groups * -(-context // block_size)
        total = metric(base, "troupe:kv_blocks_total")
        print(f"context {context} tokens, {num_groups} KV groups: peak {held:.0f} pages held "
              f"of {total:.0f}; without window freeing {full} pages: {full / held:.2f}x")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
