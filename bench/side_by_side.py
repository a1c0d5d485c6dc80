#!/usr/bin/env python3
"""troupe next to a peer server, same model, same workload, alternating runs, in one command.

  .venv-bench/bin/python bench/side_by_side.py --scenario fixed --concurrency 1,16 --reps 2
  .venv-bench/bin/python bench/side_by_side.py --scenario prefix --concurrency 16 --reps 2

Scenarios
  fixed   troupe vs the peer: prompt --input-len tokens, --output-len tokens, ignore_eos.
  prefix  troupe with the prefix cache vs troupe with `scheduler.enable_prefix_caching: false`,
          on the shared-prefix workload (K system prompts of ~1k tokens).
  Any other serve_bench workload can be given with --workload (sharegpt, cancel ...).

The peer (never part of this repo or its CI) comes from a llama-cpp-python install, found from
--peer-venv or $TROUPE_BENCH_PEER_VENV (default .venv-ref). If that install ships llama.cpp's
own `llama-server` (bin/llama-server, or llama_cpp/bin/), it runs with `--parallel N -t T`
(continuous batching); else `python -m llama_cpp.server` (one sequence at a time; its server
extras fastapi, uvicorn, sse-starlette, starlette-context, pydantic-settings, PyYAML must be in
that venv). Both servers get the same thread count (--threads, default 2).

Runs alternate A, B, A, B ... (each repetition gets its own seed, so repetitions do not hit a
prefix cache warmed by the previous one; A and B of one repetition get the same prompts). A run
whose CPU steal (/proc/stat) exceeds --max-steal percent is discarded and repeated (up to
--retries times) with prompts of its own: a repeat of the same prompts met the server's prompt
cache (llama-server's retry of a 64-stream run: TTFT p99 1.7 s instead of 55 s, 2026-12-06).
Discarded runs stay in the JSON with "discarded": true. The other server sits
idle during a run; its CPU seconds in that window are recorded (idle_other_cpu_s).
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serve_bench as sb  # noqa: E402
import workloads  # noqa: E402


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        # children's time counts too (llama_cpp.server runs in one process; troupe too)
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Server:
    def __init__(self, name: str, cmd: list[str], port: int, log_path: str, env=None):
        self.name, self.cmd, self.port, self.log_path, self.env = name, cmd, port, log_path, env
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 120.0):
        print(f"starting {self.name}: {' '.join(self.cmd)}", file=sys.stderr)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=ROOT, env=self.env, start_new_session=True)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}; "
                                 f"see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{self.name} did not come up in {wait_s}s; see {self.log_path}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def find_peer(venv: str, parallel: int, threads: int, model: str, ctx: int, port: int):
    """(kind, command) for the peer in `venv` (a llama-server build directory such as
    bench/build_peer.sh makes, or a llama-cpp-python venv), or exit with a clear message."""
    cands = [os.path.join(venv, "bin", "llama-server")]
    cands += glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "llama_cpp", "bin",
                                    "llama-server"))
    for c in cands:
        if os.access(c, os.X_OK):
            return "llama-server", [c, "-m", model, "--host", "127.0.0.1", "--port", str(port),
                                    "-t", str(threads), "--parallel", str(parallel),
                                    "-c", str(ctx * parallel), "--cont-batching"]
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        raise SystemExit(
            f"peer not found: no Python at {py}.\n"
            "Create a llama-cpp-python venv (python3 -m venv .venv-ref && .venv-ref/bin/pip "
            "install llama-cpp-python==0.3.36 'fastapi<0.116' uvicorn 'sse-starlette<2' "
            "'starlette-context<0.4' pydantic-settings PyYAML, with CMAKE_ARGS='-DGGML_NATIVE=OFF "
            "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON': its native AVX-512 build segfaulted "
            "on greedy requests on this box) or point --peer-venv / $TROUPE_BENCH_PEER_VENV at one.")
    probe = subprocess.run([py, "-c", "import llama_cpp.server.app"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        raise SystemExit(f"peer venv {venv} has llama-cpp-python without its server extras:\n"
                         f"{probe.stderr.strip().splitlines()[-1] if probe.stderr else ''}\n"
                         f"install them: {venv}/bin/pip install fastapi uvicorn sse-starlette "
                         "'starlette-context<0.4' pydantic-settings PyYAML")
    return "llama_cpp.server", [py, "-m", "llama_cpp.server", "--model", model,
                                "--host", "127.0.0.1", "--port", str(port),
                                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                                "--n_ctx", str(ctx), "--verbose", "False",
                                # default True: a new request aborts the running stream
                                "--interrupt_requests", "False"]


def troupe_server(name: str, binary: str, model: str, threads: int, prefix_cache: bool,
                  max_num_seqs: int, tmp: str) -> Server:
    cfg = {"model": model, "log": {"level": "warn"}, "cpu": {"threads": threads},
           "scheduler": {"enable_prefix_caching": prefix_cache, "max_num_seqs": max_num_seqs}}
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    port = free_port()
    return Server(name, [binary, "serve", "--config", path, "--port", str(port)], port,
                  os.path.join(tmp, f"{name}.log"))


FIGURES = [("output_tok_s", "out tok/s", None), ("request_throughput", "req/s", None),
           ("total_tok_s", "total tok/s", None), ("ttft_ms", "TTFT p50", "p50"),
           ("ttft_ms", "TTFT p99", "p99"), ("itl_ms", "ITL p50", "p50"),
           ("itl_ms", "ITL p99", "p99"), ("e2e_ms", "E2E p50", "p50"), ("e2e_ms", "E2E p99", "p99")]


def fig(run: dict, key: str, sub):
    v = run[key] if sub is None else run[key][sub]
    return float(v) if v is not None else None


def ratio_table(runs: list[dict], a: str, b: str) -> str:
    """Median over kept repetitions of each figure, per concurrency, and the ratio a/b."""
    kept = [r for r in runs if not r.get("discarded")]
    keys = sorted({(r["workload"], r["concurrency"] or 0) for r in kept})
    head = "| workload | conc | figure | " + a + " | " + b + f" | {a}/{b} |"
    lines = [head, "|---|---|---|---|---|---|"]
    for wl, c in keys:
        for key, name, sub in FIGURES:
            va = [fig(r, key, sub) for r in kept if r["label"] == a and r["workload"] == wl
                  and (r["concurrency"] or 0) == c]
            vb = [fig(r, key, sub) for r in kept if r["label"] == b and r["workload"] == wl
                  and (r["concurrency"] or 0) == c]
            va, vb = [x for x in va if x is not None], [x for x in vb if x is not None]
            if not va or not vb:
                continue
            ma, mb = statistics.median(va), statistics.median(vb)
            rt = f"{ma / mb:.2f}" if mb else "-"
            unit = " ms" if sub else ""
            lines.append(f"| {wl} | {c} | {name}{unit} | {ma:.1f} (n={len(va)}) | "
                         f"{mb:.1f} (n={len(vb)}) | {rt} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["fixed", "prefix"], default="fixed")
    ap.add_argument("--troupe-bin", default=os.path.join(ROOT, "build-bench", "bin", "troupe"))
    ap.add_argument("--troupe-commit", default="",
                    help="commit the troupe binary was built from, for the record (default: "
                         "HEAD now; the binary may be older: its mtime is recorded too)")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--peer-venv", default=os.environ.get("TROUPE_BENCH_PEER_VENV",
                                                          ".venv-ref"))
    ap.add_argument("--peer-parallel", type=int, default=16,
                    help="llama-server --parallel (slots); unused by llama_cpp.server")
    ap.add_argument("--peer-ctx", type=int, default=4096, help="context per sequence")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-steal", type=float, default=2.0, help="percent")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--cooldown", type=float, default=2.0, help="seconds between runs")
    ap.add_argument("--tag", default="", help="names the output files (default: scenario)")
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--plot-dir", default=os.path.join(HERE, "plots"))
    ap.add_argument("--from-json", default="",
                    help="no runs: rebuild the Markdown and plots from a results JSON")
    sb.add_common_args(ap)
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            runs = json.load(f)["runs"]
        report(runs, list(dict.fromkeys(r["label"] for r in runs)),
               args.tag or os.path.splitext(os.path.basename(args.from_json))[0],
               args.results_dir, args.plot_dir)
        return
    if args.scenario == "prefix" and args.workload == "fixed":
        args.workload = "shared-prefix"
    tag = args.tag or args.scenario
    model = os.path.abspath(os.path.join(ROOT, args.model)) if not os.path.isabs(args.model) \
        else args.model
    if not os.path.exists(args.troupe_bin):
        raise SystemExit(f"no troupe binary at {args.troupe_bin}; build it: cmake -S . -B "
                         "build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=OFF "
                         "-DTROUPE_BUILD_TESTS=OFF && cmake --build build-bench --target troupe")
    tmp = tempfile.mkdtemp(prefix="troupe-sbs-")
    concs = [int(x) for x in args.concurrency.split(",") if x]

    servers: list[Server] = []
    peer_kind = None
    if args.scenario == "fixed":
        a = troupe_server("troupe", args.troupe_bin, model, args.threads, True,
                          args.max_num_seqs, tmp)
        port = free_port()
        peer_kind, cmd = find_peer(args.peer_venv, args.peer_parallel, args.threads, model,
                                   args.peer_ctx, port)
        b = Server("peer", cmd, port, os.path.join(tmp, "peer.log"))
    else:
        a = troupe_server("troupe-prefix-on", args.troupe_bin, model, args.threads, True,
                          args.max_num_seqs, tmp)
        b = troupe_server("troupe-prefix-off", args.troupe_bin, model, args.threads, False,
                          args.max_num_seqs, tmp)
    servers = [a, b]
    runs: list[dict] = []
    os.makedirs(args.results_dir, exist_ok=True)
    out_json = os.path.join(args.results_dir, f"{tag}.json")
    meta = {"scenario": args.scenario, "peer_kind": peer_kind,
            "servers": {s.name: s.cmd for s in servers}, "argv": sys.argv,
            "commit": args.troupe_commit or subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                text=True).stdout.strip(),
            "troupe_binary": {"path": args.troupe_bin, "mtime": time.strftime(
                "%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(args.troupe_bin)))},
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "nproc": os.cpu_count()}

    def save():   # after every run, so an interrupted session keeps what it measured
        with open(out_json, "w") as f:
            json.dump({"meta": meta, "runs": runs}, f, indent=1)

    # SIGTERM / SIGINT (also when started in the background) stop both servers on the way out
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(128 + 15))
    try:
        for s in servers:
            s.start()
        print(f"servers up; logs and configs in {tmp}", file=sys.stderr)
        for c in concs:
            for rep in range(args.reps):
                for s in servers:           # alternate A, B within every repetition
                    other = b if s is a else a
                    for attempt in range(args.retries + 1):
                        seed = args.seed + 1000 * rep + c + 100_000 * attempt
                        spec = sb.RunSpec(s.name, args.workload, c, None, None, seed)
                        spec.params = {k: getattr(args, k) for k in (
                            "input_len", "output_len", "num_prefixes", "prefix_len",
                            "suffix_len", "cancel_fraction")}
                        a_args = argparse.Namespace(**{**vars(args), "seed": seed})
                        reqs = sb.build_requests(a_args, sb.num_for(args, c))
                        t = sb.Target(s.url, args.backend, "", args.ignore_eos_mode)
                        other_cpu0 = proc_cpu_s(other.proc.pid)
                        res = asyncio.run(sb.run_benchmark(t, spec, reqs,
                                                           progress=not args.no_progress))
                        res["idle_other_cpu_s"] = round(proc_cpu_s(other.proc.pid) - other_cpu0, 2)
                        res["rep"], res["attempt"] = rep, attempt
                        res["server_kind"] = "troupe" if s.name.startswith("troupe") else peer_kind
                        steal = res["host"]["steal_pct"]
                        res["discarded"] = steal > args.max_steal
                        runs.append(res)
                        save()
                        print(sb.markdown_table([res]).splitlines()[-1]
                              + (f"  DISCARDED (steal {steal}%)" if res["discarded"] else ""),
                              file=sys.stderr, flush=True)
                        time.sleep(args.cooldown)
                        if not res["discarded"]:
                            break
    finally:
        for s in servers:
            s.stop()

    save()
    report(runs, [a.name, b.name], tag, args.results_dir, args.plot_dir)
    print("results:", out_json, file=sys.stderr)


def report(runs: list[dict], names: list[str], tag: str, results_dir: str, plot_dir: str):
    a, b = names[0], names[1]
    table = sb.markdown_table(runs)
    ratios = ratio_table(runs, a, b)
    md = (f"### {tag}: {a} vs {b}\n\nAll runs (in order; discarded ones marked in the "
          f"JSON):\n\n{table}\n\nMedians of kept runs and ratio:\n\n{ratios}\n")
    with open(os.path.join(results_dir, f"{tag}.md"), "w") as f:
        f.write(md)
    print(md)
    kept = [r for r in runs if not r.get("discarded")]
    for p in sb.plot_runs(kept, plot_dir, tag):
        print("plot:", p, file=sys.stderr)


if __name__ == "__main__":
    main()
