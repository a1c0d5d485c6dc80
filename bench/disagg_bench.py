#!/usr/bin/env python3
"""Disaggregated prefill/decode benchmark (issue 17): do long prompts stop stalling token streams
when a prefill server computes them and a decode server only decodes? One combined troupe against
a prefill + decode pair on the same cores, every run on freshly started servers; and the KV
transfer's throughput beside ucx_perftest's on the same box.

  BENCH_PY=<a venv with bench/requirements.txt>/bin/python
  $BENCH_PY bench/disagg_bench.py                                  # everything, defaults below
  $BENCH_PY bench/disagg_bench.py --scenario mixed --duration 60 --rate 0.125 --reps 2
  $BENCH_PY bench/disagg_bench.py --scenario transfer --transfer-n 5
  --troupe-bin / --troupe-config: the binary and the config it understands; --troupe-commit names
  the output (default: HEAD, which need not be what the binary was built from; its mtime is
  recorded). Results: bench/results/disagg_<commit>.json (each invocation appended) and Markdown
  tables on stdout (--from-json FILE prints them again).

Setups (each server: a temp --config with cpu.threads, cpu.kv_memory_mb --kv-memory-mb (2048: eight
streams of up to 8k tokens fit without preemption), log level warn; its own --admin-socket)
  combined  taskset -c 0,1  troupe serve --port P                          cpu.threads 2
  disagg    taskset -c 0    troupe serve --role prefill --kv-transport tcp  cpu.threads 1
            taskset -c 1    troupe serve --role decode --prefill-url 127.0.0.1:<prefill port>
                                         --kv-transport tcp                 cpu.threads 1
  (--combined-cpus, --prefill-cpus, --decode-cpus change the cores.) The benchmark client itself
  is not pinned unless --client-cpus says so: on a 2-core box it shares the cores with the
  servers, equally in both setups.

Scenarios
  mixed     --streams (8) streamed /v1/completions (temperature 0, ignore_eos, short distinct
            prompts, max_tokens --stream-max-tokens so they outlast the run) decode; once each has
            --warm-tokens, --baseline-s of streams alone, then for --duration seconds prompts of
            ~--long-tokens tokens (2,000; each its own seeded text with a distinct first word, so
            no prefix cache serves them; sized with POST /tokenize) arrive as a Poisson process
            (--rate per second, seeded: both setups get the same arrivals and prompts), each
            streamed with max_tokens --long-max-tokens (16). The window ends at --duration or
            when the last long request finishes, whichever is later. Measured: the streams'
            inter-token latency (gap between SSE chunks with text) p50/p99/max in the baseline,
            over the window, and split into gaps overlapping some long request's prefill (sent ->
            its first token) and the rest; the long requests' TTFT p50/p99/max; output tok/s over
            the window (chunks with text from every stream, long ones included); the server's
            /metrics deltas (generation tokens, preemptions; on the decode server
            troupe:remote_prefills_total, troupe:kv_transfers_total{ok,failed},
            troupe:kv_transfer_fallbacks_total, troupe:kv_transfer_bytes_total and
            troupe:kv_transfer_seconds_sum, GB/s = bytes / seconds / 1e9). One server warm-up
            request and one long warm-up request (the pair's handshake and first UCX endpoint)
            come first and are not counted. The point: decode ITL p99 stays flat on the pair
            while it spikes on the combined server. With a few long requests their TTFT "p99"
            is their maximum.
  transfer  the disagg pair idle: --transfer-n (5) distinct ~--transfer-tokens (1,000) token
            prompts sent through the decode server one at a time (max_tokens 2, not streamed:
            with max_tokens 1 the prefill server's token is the whole answer and nothing is pulled),
            after one cold one that is reported apart. Per request, from the decode server's
            /metrics deltas: KV bytes and blocks pulled, pull seconds, GB/s. The prefill server's
            GET /v1/kv/metadata layout is recorded (block_bytes = one layer's K or V of one
            block). troupe pulls 2 x layers segments of block_bytes per block and coalesces
            segments whose block ids are consecutive on both sides, then asks for all of a
            pull's reads in one request, answered in active messages of up to 64 KiB (since
            f8c8c7b; gets before). Beside it, on the same cores as the pair, ucx_perftest
            ucp_get over UCX_TLS=tcp on loopback (server on --prefill-cpus, client on
            --decode-cpus) with -O 2 x layers outstanding, for a message of block_bytes (no
            coalescing) and of blocks x block_bytes (one coalesced get of that prompt);
            ucx_perftest's MB/s are
            MiB/s (it divides by 1024^2), shown converted to GB/s (1e9) too.

Every run records `uptime`, the load average and CPU steal before and after, and the servers' warn
and error log lines: read the numbers with the load, and on a loaded box only as a smoke test.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_runs as br  # noqa: E402  (Srv, Stream, SSE client, stats, host snapshot, run loop)
import serve_bench as sb  # noqa: E402  (/metrics parser)
import side_by_side as sbs  # noqa: E402  (Server, free_port)

SCENARIOS = ("mixed", "transfer")
SETUPS = ("combined", "disagg")
LOG_LEVELS_KEPT = ("[warn", "[warning", "[error", "[critical")


# ----------------------------------------------------------------------------- servers

def write_config(args, tmp: str, tag: str, threads: int) -> str:
    with open(args.troupe_config) as f:
        cfg = json.load(f)
    cfg["model"] = args.model
    cfg["cpu"]["threads"] = threads
    cfg["cpu"]["kv_memory_mb"] = args.kv_memory_mb
    cfg["log"]["level"] = args.log_level
    cfg["drain_timeout_ms"] = 2000
    path = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def troupe_srv(args, tmp: str, tag: str, cpus: str, threads: int,
               extra: list[str], port: int = 0) -> br.Srv:
    """troupe serve pinned to `cpus` with `threads` compute threads and its own admin socket."""
    port = port or sbs.free_port()
    cmd = ["taskset", "-c", cpus, args.troupe_bin, "serve",
           "--config", write_config(args, tmp, tag, threads), "--model", args.model,
           "--port", str(port), "--admin-socket", os.path.join(tmp, f"{tag}.admin.sock"), *extra]
    return br.Srv("troupe", sbs.Server(tag, cmd, port, os.path.join(tmp, f"{tag}.log")))


def make_setup(setup: str, args, tmp: str, tag: str) -> dict:
    """{'front': the server clients talk to, 'prefill': the prefill server or None}; not started."""
    if setup == "combined":
        return {"front": troupe_srv(args, tmp, f"{tag}-combined", args.combined_cpus,
                                    args.combined_threads, []), "prefill": None}
    pport = sbs.free_port()
    prefill = troupe_srv(args, tmp, f"{tag}-prefill", args.prefill_cpus, 1,
                         ["--role", "prefill", "--kv-transport", args.kv_transport], pport)
    decode = troupe_srv(args, tmp, f"{tag}-decode", args.decode_cpus, 1,
                        ["--role", "decode", "--prefill-url", f"127.0.0.1:{pport}",
                         "--kv-transport", args.kv_transport])
    return {"front": decode, "prefill": prefill}


def servers_of(s: dict) -> list[br.Srv]:
    return [x for x in (s["prefill"], s["front"]) if x is not None]   # start order


def log_findings(srv: br.Srv, keep: int = 20) -> dict:
    """The server's warn/error/critical lines (the first `keep`) and how many there were."""
    try:
        with open(srv.server.log_path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if any(k in ln for k in LOG_LEVELS_KEPT)]
    except OSError:
        return {"count": 0, "lines": []}
    return {"count": len(lines), "lines": lines[:keep]}


# ----------------------------------------------------------------------------- prompts

def arrivals(rate: float, duration: float, seed: int) -> list[float]:
    """Poisson arrival offsets (s) within [0, duration)."""
    rng = random.Random(seed)
    out, t = [], 0.0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        out.append(round(t, 3))
    return out


async def long_prompts(session, srv: br.Srv, n: int, target: int, seed: int,
                       tag: str) -> list[tuple[str, int]]:
    """n prompts of ~target tokens, each its own seeded text and first word (no shared prefix)."""
    out = []
    for i in range(n):
        words = br.varied_text(random.Random(seed * 7919 + i), int(target * 1.2)).split()
        out.append(await br.fit_prompt(session, srv, words, f"{tag} {i}.", target))
    return out


# ----------------------------------------------------------------------------- metrics

M_OK = 'troupe:kv_transfers_total{outcome="ok"}'
M_FAILED = 'troupe:kv_transfers_total{outcome="failed"}'
COUNTERS = {
    "generation_tokens": "troupe:generation_tokens_total",
    "prompt_tokens": "troupe:prompt_tokens_total",
    "preemptions": "troupe:num_preemptions_total",
    "steps": "troupe:num_steps_total",
    "remote_prefills": "troupe:remote_prefills_total",
    "kv_transfers_ok": M_OK,
    "kv_transfers_failed": M_FAILED,
    "kv_transfer_fallbacks": "troupe:kv_transfer_fallbacks_total",
    "kv_transfer_bytes": "troupe:kv_transfer_bytes_total",
    "kv_transfer_blocks": "troupe:kv_transfer_blocks_total",
    "kv_transfer_seconds": "troupe:kv_transfer_seconds_sum",
    "kv_handshake_failures": "troupe:kv_transfer_handshake_failures_total",
    "leases_released": "troupe:kv_transfer_leases_released_total",
    "leases_expired": "troupe:kv_transfer_leases_expired_total",
}


def counters_delta(before: dict, after: dict) -> dict:
    if not before or not after:
        return {"note": "no /metrics"}
    d = {k: round(after.get(m, 0.0) - before.get(m, 0.0), 6) for k, m in COUNTERS.items()}
    d["kv_transfer_gbps"] = gbps(d["kv_transfer_bytes"], d["kv_transfer_seconds"])
    d["step_time_p99_ms_after"] = round(
        1000 * after.get('troupe:step_time_seconds{quantile="0.99"}', 0), 2)
    return d


def gbps(n_bytes: float, seconds: float):
    return round(n_bytes / seconds / 1e9, 3) if seconds > 0 else None


async def kv_metadata(session, srv: br.Srv) -> dict:
    async with session.get(srv.url + "/v1/kv/metadata") as resp:
        js = await resp.json(content_type=None)
    return {k: js.get(k) for k in ("engine_id", "transport", "region_bytes", "layout",
                                   "compatibility_hash")}


# ----------------------------------------------------------------------------- mixed

def overlaps(a: float, b: float, spans: list[tuple[float, float]]) -> bool:
    return any(b > lo and a < hi for lo, hi in spans)


def mixed_result(recs, longs, long_tok, sched, t_base, t0, t_end, ended, m0, m1, p0, p1) -> dict:
    spans = [(r.sent, r.times[0] if r.times else (r.done_at or t_end)) for r in longs]
    window = [(a, b) for r in recs for a, b in br.gaps(r.times) if a >= t0 and b <= t_end]
    during = [b - a for a, b in window if overlaps(a, b, spans)]
    outside = [b - a for a, b in window if not overlaps(a, b, spans)]
    stream_chunks = sum(1 for r in recs for t in r.times if t0 <= t <= t_end)
    long_chunks = sum(1 for r in longs for t in r.times if t0 <= t <= t_end)
    span = t_end - t0
    ok = [r for r in longs if not r.error and r.ttft is not None]
    return {
        "long_requests": len(longs), "long_ok": len(ok), "arrivals_s": sched,
        "long_prompt_tokens": long_tok,
        "window_s": round(span, 2), "baseline_s": round(t0 - t_base, 2),
        "itl_baseline_ms": br.ms_stats(
            [b - a for r in recs for a, b in br.gaps(r.times) if a >= t_base and b <= t0]),
        "itl_window_ms": br.ms_stats([b - a for a, b in window]),
        "itl_during_prefill_ms": br.ms_stats(during),
        "itl_outside_prefill_ms": br.ms_stats(outside),
        "long_ttft_ms": br.ms_stats([r.ttft for r in ok]),
        "long_e2e_ms": br.ms_stats([r.done_at - r.sent for r in ok if r.done_at]),
        "long_runs": [{"sent_s": round(r.sent - t0, 2),
                       "ttft_ms": round(1000 * r.ttft, 1) if r.ttft is not None else None,
                       "chunks": len(r.times), "error": r.error} for r in longs],
        "output_tok_s": round((stream_chunks + long_chunks) / span, 1) if span > 0 else None,
        "stream_tok_s": round(stream_chunks / span, 1) if span > 0 else None,
        "stream_tokens": [len(r.times) for r in recs],
        "streams_ended_early": ended,
        "stream_errors": sorted({r.error for r in recs if r.error}),
        "server": counters_delta(m0, m1),
        "prefill_server": counters_delta(p0, p1) if p1 else None,
    }


@dataclass
class LongRec(br.Stream):
    """A long request's stream, and when it ended (finished, failed or timed out)."""
    done_at: float = 0.0


async def long_request(session, srv: br.Srv, prompt: str, args) -> LongRec:
    rec = LongRec()
    body = br.completion_body(srv, prompt, args.long_max_tokens, True)
    try:
        await asyncio.wait_for(br.stream_completion(session, srv, body, rec),
                               args.request_timeout)
    except asyncio.TimeoutError:
        rec.error = f"timeout after {args.request_timeout:.0f}s"
    rec.done_at = time.perf_counter()
    return rec


async def scen_mixed(session, s: dict, args, seed: int) -> dict:
    front, prefill = s["front"], s["prefill"]
    sched = arrivals(args.rate, args.duration, seed)
    prompts = await long_prompts(session, front, len(sched) + 1, args.long_tokens, seed,
                                 "Request")
    warm = await long_request(session, front, prompts[0][0], args)     # pair handshake, pools
    if warm.error or warm.ttft is None:
        raise RuntimeError(f"long warm-up request failed: {warm.error or 'no tokens'}")
    prompts = prompts[1:]
    recs, tasks = await br.start_streams(session, front, args.streams, args.stream_max_tokens,
                                          seed)
    longs: list[LongRec] = []
    try:
        await br.wait_for(lambda: all(len(r.times) >= args.warm_tokens or r.done for r in recs),
                           args.request_timeout, f"{args.warm_tokens} tokens on every stream")
        if any(r.done for r in recs):
            raise RuntimeError("a stream ended early: " + "; ".join(r.error for r in recs))
        t_base = time.perf_counter()
        await asyncio.sleep(args.baseline_s)
        m0 = await sb.scrape_metrics(session, front.url)
        p0 = await sb.scrape_metrics(session, prefill.url) if prefill else {}
        t0 = time.perf_counter()
        long_tasks = []
        for offset, (prompt, _) in zip(sched, prompts):
            await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
            long_tasks.append(asyncio.create_task(long_request(session, front, prompt, args)))
        await asyncio.sleep(max(0.0, t0 + args.duration - time.perf_counter()))
        longs = list(await asyncio.gather(*long_tasks))
        t_end = max([t0 + args.duration] + [r.done_at for r in longs])
        ended = [i for i, r in enumerate(recs) if r.done]    # before the window did
        m1 = await sb.scrape_metrics(session, front.url)
        p1 = await sb.scrape_metrics(session, prefill.url) if prefill else {}
    finally:
        await br.cancel_tasks(tasks)
    res = mixed_result(recs, longs, [t for _, t in prompts], sched, t_base, t0, t_end,
                       ended, m0, m1, p0, p1)
    res["warm_long_ttft_ms"] = round(1000 * warm.ttft, 1)
    return res


# ----------------------------------------------------------------------------- transfer

async def wait_pull_counted(session, srv: br.Srv, before: dict, timeout: float = 5.0) -> dict:
    """/metrics once the decode server has counted one more pull (ok or failed), or a fallback."""
    n0 = before.get(M_OK, 0) + before.get(M_FAILED, 0)
    f0 = before.get(COUNTERS["kv_transfer_fallbacks"], 0)
    deadline = time.perf_counter() + timeout
    while True:
        m = await sb.scrape_metrics(session, srv.url)
        if (m.get(M_OK, 0) + m.get(M_FAILED, 0) > n0
                or m.get(COUNTERS["kv_transfer_fallbacks"], 0) > f0
                or time.perf_counter() > deadline):
            return m
        await asyncio.sleep(0.02)


async def one_pull(session, front: br.Srv, prompt: str, tokens: int, args) -> dict:
    m0 = await sb.scrape_metrics(session, front.url)
    t = time.perf_counter()
    status, js = await br.post_json(session, front.url + "/v1/completions",
                                     br.completion_body(front, prompt, 2, False),
                                     timeout=args.request_timeout)
    e2e = time.perf_counter() - t
    m1 = await wait_pull_counted(session, front, m0)
    d = counters_delta(m0, m1)
    return {"prompt_tokens": tokens, "status": status,
            "error": None if status == 200 else str(js)[:300],
            "e2e_ms": round(1000 * e2e, 1), "bytes": d["kv_transfer_bytes"],
            "blocks": d["kv_transfer_blocks"], "pull_ms": round(1000 * d["kv_transfer_seconds"], 2),
            "gbps": d["kv_transfer_gbps"], "pulls_ok": d["kv_transfers_ok"],
            "pulls_failed": d["kv_transfers_failed"], "fallbacks": d["kv_transfer_fallbacks"],
            "remote_prefills": d["remote_prefills"]}


async def scen_transfer(session, s: dict, args, seed: int) -> dict:
    front, prefill = s["front"], s["prefill"]
    meta = await kv_metadata(session, prefill)
    prompts = await long_prompts(session, front, args.transfer_n + 1, args.transfer_tokens,
                                 seed, "Note")
    pulls = []
    for prompt, tok in prompts:
        pulls.append(await one_pull(session, front, prompt, tok, args))
        await asyncio.sleep(0.2)
    cold, warm = pulls[0], pulls[1:]
    good = [p for p in warm if p["gbps"] is not None and p["pulls_ok"] == 1]
    med = lambda key: statistics.median(p[key] for p in good)  # noqa: E731
    med_low = lambda key: statistics.median_low(p[key] for p in good)  # noqa: E731
    return {"kv_metadata": meta, "cold_pull": cold, "pulls": warm,
            "gbps_median": round(med("gbps"), 3) if good else None,
            "gbps_min": min(p["gbps"] for p in good) if good else None,
            "gbps_max": max(p["gbps"] for p in good) if good else None,
            "kv_bytes_median": int(med_low("bytes")) if good else None,
            "blocks_median": int(med_low("blocks")) if good else None,
            "pull_ms_median": round(med("pull_ms"), 2) if good else None,
            "prompt_tokens": [p["prompt_tokens"] for p in warm],
            "pulls_not_ok": len(warm) - len(good)}


def run_ucx_perftest(size: int, outstanding: int, args) -> dict:
    """ucx_perftest ucp_get over tcp on loopback: server on the prefill cores, client on the
    decode cores. Bandwidth as printed (MiB/s) and in GB/s."""
    iters = max(args.ucx_min_iters, int(args.ucx_bytes // size))
    port = sbs.free_port()
    env = {**os.environ, "UCX_TLS": args.kv_transport}
    server = subprocess.Popen(["taskset", "-c", args.prefill_cpus, args.ucx_perftest,
                               "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    client_cmd = ["taskset", "-c", args.decode_cpus, args.ucx_perftest, "127.0.0.1",
                  "-p", str(port), "-t", "ucp_get", "-s", str(size), "-n", str(iters),
                  "-w", str(max(10, iters // 20)), "-O", str(outstanding), "-f", "-v"]
    out = {"size": size, "outstanding": outstanding, "iters": iters, "cmd": client_cmd,
           "env": f"UCX_TLS={args.kv_transport}"}
    try:
        for _ in range(50):      # the server needs a moment to listen
            time.sleep(0.2)
            cp = subprocess.run(client_cmd, capture_output=True, text=True, env=env,
                                timeout=args.ucx_timeout)
            if cp.returncode == 0 or server.poll() is not None:
                break
        rows = [ln.split(",") for ln in cp.stdout.splitlines() if ln[:1].isspace() or
                ln[:1].isdigit()]
        rows = [r for r in rows if len(r) == 8]
        if cp.returncode != 0 or not rows:
            out["error"] = f"rc {cp.returncode}: {(cp.stdout + cp.stderr)[-400:]}"
            return out
        _, lat50, lat_avg, _, _, bw, _, mr = (float(x) for x in rows[-1])
        out.update({"mib_s": bw, "gbps": round(bw * 1048576 / 1e9, 3), "msg_rate": mr,
                    "lat_p50_us": lat50, "lat_avg_us": lat_avg})
    except subprocess.TimeoutExpired:
        out["error"] = f"client timed out after {args.ucx_timeout:.0f}s"
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return out


def ucx_comparison(transfer: dict, args) -> list[dict]:
    lay = (transfer.get("kv_metadata") or {}).get("layout") or {}
    block_bytes = int(lay.get("block_bytes") or args.ucx_block_bytes)
    layers = int(lay.get("num_layers") or 30)
    blocks = int(transfer.get("blocks_median") or args.transfer_tokens // 16)
    outstanding = args.ucx_outstanding or 2 * layers
    sizes = {"block": block_bytes, "run": blocks * block_bytes}
    out = []
    for name in args.ucx_sizes.split(","):
        size = sizes.get(name) or int(name)
        r = run_ucx_perftest(size, outstanding, args)
        r["what"] = {"block": "one block of one layer's K or V (no coalescing)",
                     "run": f"{blocks} consecutive blocks (one coalesced get)"}.get(name, "bytes")
        out.append(r)
        print(f"    ucx_perftest -s {size} -O {outstanding}: "
              f"{r.get('mib_s', r.get('error'))} MiB/s", file=sys.stderr, flush=True)
    return out


# ----------------------------------------------------------------------------- one run

RUNNERS = {"mixed": scen_mixed, "transfer": scen_transfer}


async def run_scenario(s: dict, scen: str, args, seed: int) -> dict:
    async with br.client_session(args) as session:
        for srv in servers_of(s):
            srv.model_id = await br.model_id(session, srv)
        await br.warm_up(session, s["front"])
        return await asyncio.wait_for(RUNNERS[scen](session, s, args, seed),
                                      args.scenario_timeout)


def one_run(setup: str, scen: str, rep: int, args, tmp: str) -> dict:
    tag = f"{scen}-{rep}"
    s = make_setup(setup, args, tmp, tag)
    srvs = servers_of(s)
    run = {"setup": setup, "scenario": scen, "rep": rep,
           "servers": {x.server.name: {"cmd": x.server.cmd, "log": x.server.log_path}
                       for x in srvs}}
    h0 = br.host_snapshot()
    try:
        for x in srvs:
            br.start(x)
        run["result"] = asyncio.run(run_scenario(s, scen, args, args.seed))
    except (Exception, SystemExit) as e:  # noqa: BLE001  (one failed run must not end the rest)
        run["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        died = {x.server.name: br.stop(x) for x in reversed(srvs) if x.server.proc}
    for name, code in died.items():
        if code is not None:
            x = next(v for v in srvs if v.server.name == name)
            run.setdefault("server_died", {})[name] = {"exit_code": code,
                                                       "log_tail": br.log_tail(x)}
    run["log_findings"] = {x.server.name: log_findings(x) for x in srvs}
    h1 = br.host_snapshot()
    if scen == "transfer" and run.get("result"):
        run["result"]["ucx_perftest"] = ucx_comparison(run["result"], args)
        h1 = br.host_snapshot()
    run["host"] = br.host_record(h0, h1)
    return run


# ----------------------------------------------------------------------------- reporting

_f, _trip, _load = br._f, br._trip, br._load


def _err_row(run: dict, ncols: int) -> str:
    msg = run.get("error", "")
    for name, d in (run.get("server_died") or {}).items():
        msg += f" ({name} exit {d['exit_code']})"
    return br.error_row(run, run["setup"], msg, ncols)


def _kv_cell(r: dict) -> str:
    sv = r["server"]
    if r.get("prefill_server") is None or "note" in sv:
        return "-"
    return (f"{sv['remote_prefills']:.0f} / {sv['kv_transfers_ok']:.0f} / "
            f"{sv['kv_transfers_failed']:.0f} / {sv['kv_transfer_fallbacks']:.0f} / "
            f"{_f(sv['kv_transfer_gbps'])}")


def table_mixed(runs: list[dict]) -> str:
    head = ["setup", "rep", "long req (ok/n, tok)", "stream ITL baseline p50/p99/max ms",
            "stream ITL window p50/p99/max ms", "… during prefills p50/p99/max ms (n)",
            "… outside prefills p50/p99/max ms", "long TTFT p50/p99/max ms", "output tok/s",
            "remote prefills / pulls ok / failed / fallbacks / GB/s", "preempt",
            "load1 before→after"]

    def row(run: dict, r: dict) -> list[str]:
        d = r["itl_during_prefill_ms"]
        tok = sorted(r["long_prompt_tokens"][:r["long_requests"]])
        tok_s = f"{tok[0]}–{tok[-1]}" if tok else "-"
        return [
            run["setup"], str(run["rep"]), f"{r['long_ok']}/{r['long_requests']}, {tok_s}",
            _trip(r["itl_baseline_ms"]), _trip(r["itl_window_ms"]), f"{_trip(d)} ({d['n']})",
            _trip(r["itl_outside_prefill_ms"]), _trip(r["long_ttft_ms"]),
            _f(r["output_tok_s"]), _kv_cell(r),
            _f(r["server"].get("preemptions")), _load(run)]

    return "\n".join(br.runs_table(head, runs, row, _err_row))


def table_transfer(runs: list[dict]) -> str:
    head = ["setup", "rep", "prompt tok", "KV bytes (blocks)", "pull ms median",
            "GB/s median (min–max)", "cold pull GB/s", "pulls not ok / fallbacks",
            "load1 before→after"]

    def row(run: dict, r: dict) -> list[str]:
        tok = sorted(r["prompt_tokens"])
        fb = sum(p["fallbacks"] for p in r["pulls"])
        return [
            run["setup"], str(run["rep"]), f"{tok[0]}–{tok[-1]}" if tok else "-",
            f"{_f(r['kv_bytes_median'])} ({_f(r['blocks_median'])})", _f(r["pull_ms_median"]),
            f"{_f(r['gbps_median'])} ({_f(r['gbps_min'])}–{_f(r['gbps_max'])})",
            _f(r["cold_pull"]["gbps"]), f"{r['pulls_not_ok']} / {fb:.0f}", _load(run)]

    lines = br.runs_table(head, runs, row, _err_row)
    ucx = [(run["rep"], u) for run in runs
           for u in (run.get("result") or {}).get("ucx_perftest", [])]
    if ucx:
        lines += ["", "| rep | ucx_perftest ucp_get (UCX_TLS=tcp, loopback) | message bytes | "
                      "outstanding | iters | MiB/s | GB/s |", "|---|---|---|---|---|---|---|"]
        for rep, u in ucx:
            lines.append("| " + " | ".join([
                str(rep), u["what"], str(u["size"]), str(u["outstanding"]), str(u["iters"]),
                _f(u.get("mib_s")) if "error" not in u else "**" + u["error"][:80] + "**",
                _f(u.get("gbps"))]) + " |")
    return "\n".join(lines)


TABLES = {"mixed": table_mixed, "transfer": table_transfer}


def notes(runs: list[dict]) -> list[str]:
    """Things that went wrong in troupe: fallbacks, failed pulls, warn/error log lines, deaths."""
    out = []
    for run in runs:
        who = f"{run['scenario']} / {run['setup']} rep {run['rep']}"
        r = run.get("result") or {}
        sv = r.get("server") or {}
        if run["setup"] == "disagg" and sv and "note" not in sv:
            if sv["kv_transfer_fallbacks"] or sv["kv_transfers_failed"]:
                out.append(f"{who}: {sv['kv_transfer_fallbacks']:.0f} fallbacks, "
                           f"{sv['kv_transfers_failed']:.0f} failed pulls")
            ps = r.get("prefill_server") or {}
            if ps.get("leases_expired"):
                out.append(f"{who}: {ps['leases_expired']:.0f} leases expired unpulled on the "
                           f"prefill server")
            if sv["remote_prefills"] != r.get("long_requests"):
                out.append(f"{who}: {sv['remote_prefills']:.0f} remote prefills for "
                           f"{r.get('long_requests')} long requests")
        if r.get("streams_ended_early"):
            out.append(f"{who}: streams {r['streams_ended_early']} ended before the window did "
                       f"(errors: {r.get('stream_errors')})")
        if sv.get("preemptions"):
            out.append(f"{who}: {sv['preemptions']:.0f} preemptions (KV pool too small?)")
        for p in ([r["cold_pull"]] + r["pulls"]) if "pulls" in r else []:
            if p["error"] or p["fallbacks"] or p["pulls_ok"] != 1:
                out.append(f"{who}: a {p['prompt_tokens']}-token pull: ok {p['pulls_ok']:.0f}, "
                           f"failed {p['pulls_failed']:.0f}, fallbacks {p['fallbacks']:.0f}, "
                           f"error {p['error']}")
        for name, d in (run.get("server_died") or {}).items():
            out.append(f"{who}: {name} died (exit {d['exit_code']})")
        for name, lf in (run.get("log_findings") or {}).items():
            if lf["count"]:
                out.append(f"{who}: {name} logged {lf['count']} warn/error lines, first: "
                           f"`{lf['lines'][0][:240]}`")
    return out


def markdown(runs: list[dict]) -> str:
    out = br.scenario_sections(runs, SCENARIOS, TABLES)
    n = notes(runs)
    if n:
        out.append("Notes:\n\n" + "\n".join(f"- {x}" for x in n) + "\n")
    return "\n".join(out)


def header(meta: dict, runs: list[dict]) -> str:
    hosts = [r["host"] for r in runs if "host" in r]
    load = (f"load average {' '.join(map(str, hosts[0]['loadavg_before']))} at start, "
            f"{' '.join(map(str, hosts[-1]['loadavg_after']))} at end") if hosts else ""
    return (f"## {meta['date']}: troupe {meta['troupe_commit']} "
            f"({(meta.get('troupe_bin') or {}).get('path')}, built "
            f"{(meta.get('troupe_bin') or {}).get('mtime')}); {meta['nproc']} CPUs "
            f"({meta.get('cpu_model', '?')}); {load}\n")


# ----------------------------------------------------------------------------- CLI

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--scenario", default="all", choices=["mixed", "transfer", "all"])
    a("--setups", default=",".join(SETUPS), help="mixed: comma list of combined, disagg")
    br.add_troupe_args(
        a, "base config; cpu.threads, cpu.kv_memory_mb, log level and drain time are overridden")
    a("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a("--kv-memory-mb", type=int, default=2048,
      help="cpu.kv_memory_mb of every server (the streams must not run the KV pool dry)")
    a("--log-level", default="warn")
    a("--combined-cpus", default="0,1")
    a("--combined-threads", type=int, default=2)
    a("--prefill-cpus", default="0")
    a("--decode-cpus", default="1")
    a("--client-cpus", default="", help="pin this script to these CPUs (default: not pinned)")
    a("--kv-transport", default="tcp", help="--kv-transport of the pair; UCX_TLS of ucx_perftest")
    a("--reps", type=int, default=1, help="repetitions; setups alternate A B, then B A")
    br.add_output_args(a, "disagg")
    g = ap.add_argument_group("mixed")
    g.add_argument("--duration", type=float, default=60.0, help="arrival window, seconds")
    g.add_argument("--rate", type=float, default=0.125, help="long prompts per second (Poisson)")
    g.add_argument("--streams", type=int, default=8)
    g.add_argument("--stream-max-tokens", type=int, default=8000,
                   help="prompt + this must fit the model's context (8192 for SmolLM2)")
    br.add_options(g, warm_tokens=20, baseline_s=5.0, long_tokens=2000, long_max_tokens=16)
    g = ap.add_argument_group("transfer")
    br.add_options(g, transfer_n=5, transfer_tokens=1000, ucx_perftest="ucx_perftest")
    g.add_argument("--ucx-sizes", default="block,run",
                   help="comma list: block, run (see the docstring) or a byte count")
    g.add_argument("--ucx-outstanding", type=int, default=0, help="-O (0: 2 x layers)")
    g.add_argument("--ucx-bytes", type=float, default=2e9, help="bytes moved per ucx_perftest run")
    br.add_options(g, ucx_min_iters=100)
    g.add_argument("--ucx-block-bytes", type=int, default=6144,
                   help="block_bytes when the metadata has none")
    g.add_argument("--ucx-timeout", type=float, default=180.0)
    br.add_limit_args(ap)
    return ap.parse_args()


def check_args(args) -> tuple[list[str], list[str]]:
    setups = [s for s in args.setups.split(",") if s]
    for s in setups:
        if s not in SETUPS:
            raise SystemExit(f"unknown setup {s!r} ({', '.join(SETUPS)})")
    scens = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    if not os.access(args.troupe_bin, os.X_OK):
        raise SystemExit(f"no executable troupe at {args.troupe_bin} (--troupe-bin)")
    br.check_model(args)
    for tool in ["taskset"] + ([args.ucx_perftest] if "transfer" in scens else []):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            raise SystemExit(f"{tool} not found")
    return setups, scens


def plan(setups: list[str], scens: list[str], reps: int) -> list[tuple]:
    """(setup, scenario, rep) in run order: setups alternate A B, then B A, ...; transfer runs
    on the disagg pair only."""
    out = []
    for rep in range(reps):
        order = setups if rep % 2 == 0 else setups[::-1]
        for scen in scens:
            for s in (order if scen == "mixed" else ["disagg"]):
                out.append((s, scen, rep))
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout \
            .splitlines()[0].strip("# ").strip()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ""


def print_json_tables(path: str):
    br.print_invocations(path, lambda inv: header(inv["meta"], inv["runs"]) + "\n"
                         + markdown(inv["runs"]))


def main():
    args = parse_args()
    if args.from_json:
        return print_json_tables(args.from_json)
    setups, scens = check_args(args)
    if args.client_cpus:
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    sha = args.troupe_commit or br.git("rev-parse", "--short", "HEAD")
    out = args.out or os.path.join(HERE, "results", f"disagg_{sha}.json")
    tmp = tempfile.mkdtemp(prefix="troupe-disagg-")
    meta = {"argv": sys.argv, "troupe_commit": sha, "head": br.git("rev-parse", "--short", "HEAD"),
            "dirty_files": len(br.git("status", "--porcelain").splitlines()),
            "troupe_bin": br.binary_info(args.troupe_bin),
            "script_sha1": br.file_sha1(__file__), "model": args.model,
            "args": {k: v for k, v in vars(args).items() if k != "from_json"},
            "nproc": os.cpu_count(), "cpu_model": cpu_model(),
            "client_affinity": sorted(os.sched_getaffinity(0)),
            "ucx": tool_version(["ucx_info", "-v"]), "logs": tmp,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    runs = br.run_jobs(plan(setups, scens, args.reps),
                       lambda setup, scen, rep: one_run(setup, scen, rep, args, tmp),
                       lambda run: TABLES[run["scenario"]]([run]).strip().splitlines()[2],
                       meta, out)
    print(header(meta, runs))
    print(markdown(runs))


if __name__ == "__main__":
    br.run_main(main)
