#!/usr/bin/env python3
"""KV capacity under load, f16 vs q8_0 KV (issue 38): for each cache.kv_dtype, starts
`troupe serve --kv-cache-dtype D` with the same cpu.kv_memory_mb, runs bench/serve_bench.py's
fixed workload (CONCURRENCY streams of INPUT prompt + OUTPUT generated tokens, the
conversations of `--input-len 1920 --output-len 128` by default: 2k tokens each), and reads the
server's preemptions (troupe:num_preemptions_total) and KV blocks from /metrics and /v1/models.
Prints one Markdown row per dtype: blocks, preemptions, output tok/s, TTFT p50/p99, E2E p99.

  .venv-bench/bin/python bench/kv_dtype_bench.py [--concurrency 64] [--kv-memory-mb 256]
(serve_bench's Python: aiohttp and numpy; this script needs nothing else.)
"""
import argparse
import json
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def metric(base, name):
    text = get(base + "/metrics")[1]
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    if not m:
        raise RuntimeError(f"{name} is not in {base}/metrics")
    return float(m.group(1))


def run(args, dtype):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = ROOT / "build" / f"kv_dtype_bench_{dtype}.json"
    config.write_text(json.dumps({"cpu": {"kv_memory_mb": args.kv_memory_mb},
                                  "cache": {"kv_dtype": dtype}}))
    log = open(ROOT / "build" / f"kv_dtype_bench_{dtype}.log", "w")
    server = subprocess.Popen([args.binary, "serve", "--model", args.model, "--port", str(port),
                               "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if get(base + "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        kv = json.loads(get(base + "/v1/models")[1])["data"][0]["meta"]["kv_cache"]
        preempted_before = metric(base, "troupe:num_preemptions_total")
        out = ROOT / "build" / f"kv_dtype_bench_{dtype}.result.json"
        out.unlink(missing_ok=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "serve_bench.py"), "--base-url", base,
                        "--backend", "completions", "--workload", "fixed",
                        "--input-len", str(args.input_len), "--output-len", str(args.output_len),
                        "--concurrency", str(args.concurrency),
                        "--num-prompts", str(args.concurrency), "--label", f"troupe {dtype}",
                        "--out", str(out), "--no-progress"], check=True)
        preemptions = metric(base, "troupe:num_preemptions_total") - preempted_before
        result = json.loads(out.read_text())
        runs = result["runs"] if isinstance(result, dict) and "runs" in result else result
        r = runs[-1] if isinstance(runs, list) else runs
        return kv, preemptions, r
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--binary", default=str(ROOT / "build" / "bin" / "troupe"))
    ap.add_argument("--kv-memory-mb", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=1920)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--dtypes", default="f16,q8_0")
    args = ap.parse_args()
    rows = []
    for dtype in args.dtypes.split(","):
        kv, preemptions, r = run(args, dtype)
        rows.append((dtype, kv, preemptions, r))
    print(f"\n{args.concurrency} streams of {args.input_len} + {args.output_len} tokens, "
          f"cpu.kv_memory_mb {args.kv_memory_mb}\n")
    print("| kv_dtype | blocks (tokens) | preemptions | output tok/s | TTFT p50 / p99 (s) | "
          "E2E p99 (s) |")
    print("|---|---|---|---|---|---|")
    for dtype, kv, preemptions, r in rows:
        print(f"| {dtype} | {kv['blocks']} ({kv['tokens']}) | {int(preemptions)} | "
              f"{r['output_tok_s']:.1f} | {r['ttft_ms']['p50'] / 1000:.2f} / "
              f"{r['ttft_ms']['p99'] / 1000:.2f} | {r['e2e_ms']['p99'] / 1000:.1f} |")


if __name__ == "__main__":
    main()
