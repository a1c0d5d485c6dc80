#!/usr/bin/env python3
"""Isolation benchmark (issue 13): does one heavy client hurt everyone else? troupe and llama.cpp's
llama-server side by side, same model, same threads, each server started fresh for every run.

  BENCH_PY=<a venv with bench/requirements.txt>/bin/python
  $BENCH_PY bench/isolation_bench.py --peer-bin build-peer-native/bin/llama-server   # everything
  $BENCH_PY bench/isolation_bench.py --servers troupe --scenario long-prefill \
      --reps 3 --troupe-bin /path/to/troupe --troupe-config /path/to/its/default.json \
      --troupe-commit abc1234
  --troupe-bin / --troupe-config: the binary and the config it understands (an older binary
  refuses newer keys); --troupe-commit names the output (default: HEAD, which need not be what
  the binary was built from). --peer-bin: llama-server (default $TROUPE_BENCH_PEER_BIN, else
  build-peer-native/bin/llama-server as bench/build_peer.sh builds it), run with
  -np --peer-parallel and -c np x --peer-slot-ctx.
  Results: bench/results/isolation_<commit>.json (each invocation appended), and a Markdown
  table per scenario on stdout. Runs alternate servers A B / B A across --reps; every run starts
  its server fresh and warms it up with one short request.

Scenarios
  long-prefill  4 streams decode (/v1/completions, stream, temperature 0, ignore_eos); once each
                has ~20 tokens, one request with a ~3,750-token prompt (checked with /tokenize)
                and max_tokens 16 arrives. Measured: the streams' inter-token latency (gap between
                SSE chunks with text) p50/p99/max BEFORE it arrives and DURING its prefill (gaps
                overlapping send -> its first token); its TTFT; and on the idle server the TTFT
                of the same prompt alone, before and after the contended run (the lower counts:
                a busy box must not flatter the ratio). Same body text each time, only the first
                word differs, so no prefix / slot cache can serve it. Targets: ITL p99 during
                <= 150 ms, TTFT <= 1.3x alone. On troupe the streams also ask for logprobs, so
                the ITL is measured per token too: a chunk that carries k tokens (the bytes of a
                UTF-8 character held until it is whole) after a gap g counts k gaps of g / k.
  flood         client "flood" (Authorization: Bearer flood-key, "user": "flood") keeps 200
                non-streamed requests (max_tokens 128, ignore_eos) in flight; once the server
                queues (troupe: num_requests_waiting > 0, llama-server: requests_deferred > 0)
                and its running count is steady for 3 polls, client "lone" (Bearer lone-key,
                "user": "lone") sends a short streamed request (max_tokens 8) --lone-n times, one
                after another. Measured: its TTFT median/max vs the same on the idle server.
                Target: <= 2x idle. A lone request past --lone-timeout counts as a timeout and
                ends the series. --lone-think-ms T: a pause uniform in [0, T] ms before each
                lone request (default 0: it follows its predecessor's last token, i.e. a step
                boundary, so it waits for nearly a whole step; T over a step's length gives
                random arrival phases, as independent users have).
  tokenize-stall (troupe only) while one SSE stream runs, POST /tokenize with an ~8 MB prompt
                while GET /health is polled every 50 ms. Measured: worst /health latency and the
                stream's worst ITL overlapping the /tokenize call.

Every run records `uptime`, the load average and CPU steal: read the numbers with the load.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_runs as br  # noqa: E402
from bench_runs import (  # noqa: E402
    Srv, Stream, _f, _load, _trip, cancel_tasks, completion_body, fit_prompt, gaps_overlapping,
    gaps_within, host_snapshot, log_tail, model_id, ms_stats, post_json, queue_state, start,
    start_streams, stop, timed_request, varied_text, wait_for, warm_up)
import side_by_side as sbs  # noqa: E402  (Server, free_port)

import aiohttp  # noqa: E402  (serve_bench exits with a hint when it is missing)

DEFAULT_PEER = os.environ.get("TROUPE_BENCH_PEER_BIN",
                              os.path.join(ROOT, "build-peer-native", "bin", "llama-server"))
SCENARIOS = ("long-prefill", "flood", "tokenize-stall")


# ----------------------------------------------------------------------------- text

def big_text(n_bytes: int, seed: int) -> str:
    """~n_bytes of varied text, quickly: 64 KiB of varied_text repeated with a counter."""
    rng = random.Random(seed)
    piece = varied_text(rng, 12000)
    parts, size, i = [], 0, 0
    while size < n_bytes:
        s = f"{i} {piece} "
        parts.append(s)
        size += len(s)
        i += 1
    return "".join(parts)[:n_bytes]


# ----------------------------------------------------------------------------- servers

def troupe_srv(args, tmp: str, tag: str) -> Srv:
    with open(args.troupe_config) as f:
        cfg = json.load(f)
    cfg["model"] = args.model
    cfg["cpu"]["threads"] = args.threads
    cfg["log"]["level"] = "warn"
    cfg["drain_timeout_ms"] = 2000
    cfg["admin"]["socket_path"] = os.path.join(tmp, f"{tag}.admin.sock")
    path = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    port = sbs.free_port()
    cmd = [args.troupe_bin, "serve", "--config", path, "--model", args.model, "--port", str(port)]
    return Srv("troupe", sbs.Server(tag, cmd, port, os.path.join(tmp, f"{tag}.log")))


def peer_srv(args, tmp: str, tag: str) -> Srv:
    port = sbs.free_port()
    cmd = [args.peer_bin, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "-t", str(args.threads), "-tb", str(args.threads), "-np", str(args.peer_parallel),
           "-c", str(args.peer_parallel * args.peer_slot_ctx), "--metrics"]
    return Srv("llama-server", sbs.Server(tag, cmd, port, os.path.join(tmp, f"{tag}.log")))


# ----------------------------------------------------------------------------- long-prefill

async def scen_long_prefill(session, srv: Srv, args, seed: int) -> dict:
    words = varied_text(random.Random(seed), int(args.long_tokens * 1.2)).split()
    warm_p, _ = await fit_prompt(session, srv, words, "Draft", args.long_tokens)
    alone_p, alone_tok = await fit_prompt(session, srv, words, "Summary", args.long_tokens)
    busy_p, busy_tok = await fit_prompt(session, srv, words, "Report", args.long_tokens)
    after_p, _ = await fit_prompt(session, srv, words, "Review", args.long_tokens)
    await timed_request(session, srv, warm_p, args.long_max_tokens, args.request_timeout)
    alone = await long_alone(session, srv, alone_p, args)
    # troupe's streams count their tokens (logprobs), so the ITL is also measured per token.
    per_token = srv.kind == "troupe"
    recs, tasks = await start_streams(session, srv, args.streams, args.stream_max_tokens, seed,
                                      logprobs=per_token)
    try:
        await wait_for(lambda: all(len(r.times) >= args.warm_tokens or r.done for r in recs),
                       args.request_timeout, f"{args.warm_tokens} tokens on every stream")
        if any(r.done for r in recs):
            raise RuntimeError("a stream ended early: " + "; ".join(r.error for r in recs))
        long = await timed_request(session, srv, busy_p, args.long_max_tokens,
                                   args.request_timeout)
        await asyncio.sleep(0.3)
    finally:
        await cancel_tasks(tasks)
    alone2 = await long_alone(session, srv, after_p, args)
    return long_prefill_result(recs, long, [alone, alone2], alone_tok, busy_tok, args,
                               counted_tokens=per_token)


async def long_alone(session, srv: Srv, prompt: str, args) -> Stream:
    """The long prompt on the idle server (a different first word: no cache can serve it)."""
    await asyncio.sleep(0.5)
    rec = await timed_request(session, srv, prompt, args.long_max_tokens, args.request_timeout)
    if rec.error or rec.ttft is None:
        raise RuntimeError(f"long request alone failed: {rec.error or 'no tokens'}")
    return rec


def long_prefill_result(recs, long: Stream, alones: list, alone_tok, busy_tok, args,
                        counted_tokens: bool) -> dict:
    """Alone TTFT: the lower of the runs before and after the contended one (box noise must
    not flatter the ratio)."""
    if long.error or long.ttft is None:
        raise RuntimeError(f"long request under load failed: {long.error or 'no tokens'}")
    t_first_all = max(r.times[0] for r in recs)
    t_long_first = long.times[0]
    ended_early = [i for i, r in enumerate(recs) if r.times and r.times[-1] < t_long_first
                   and r.finish]
    before = ms_stats(gaps_within(recs, t_first_all, long.sent))
    during = ms_stats(gaps_overlapping(recs, long.sent, t_long_first))
    per_token = br.token_gaps_overlapping(recs, long.sent, t_long_first) if counted_tokens else []
    # Where the worst gaps fall: (ms after the long prompt was sent, gap ms), largest first.
    worst = sorted(((a - long.sent, b - a) for r in recs for a, b in br.gaps(r.times)
                    if b > long.sent and a < t_long_first), key=lambda g: -g[1])[:8]
    alone_ttft = min(a.ttft for a in alones)
    ratio = long.ttft / alone_ttft
    return {
        "long_prompt_tokens": busy_tok, "alone_prompt_tokens": alone_tok,
        "itl_before_ms": before, "itl_during_prefill_ms": during,
        # Per token (troupe only: its streams ask for logprobs), and the chunks that carried
        # more than one token (bytes of a UTF-8 character held until it is whole).
        "itl_during_prefill_per_token_ms": ms_stats(per_token) if counted_tokens else None,
        "multi_token_chunks_during": sum(
            1 for r in recs for (a, b), k in zip(br.gaps(r.times), r.tokens[1:])
            if k > 1 and b > long.sent and a < t_long_first),
        "itl_during_worst_at_ms": [[round(1000 * t), round(1000 * g)] for t, g in worst],
        "long_ttft_ms": round(1000 * long.ttft, 1), "alone_ttft_ms": round(1000 * alone_ttft, 1),
        "alone_ttft_runs_ms": [round(1000 * a.ttft, 1) for a in alones],
        "ttft_ratio": round(ratio, 2),
        "stream_tokens": [len(r.times) for r in recs], "streams_ended_early": ended_early,
        "stream_errors": sorted({r.error for r in recs if r.error}),
        "long_output_chunks": len(long.times), "long_text": long.text[:80],
        "target_itl_p99_ok": during["p99"] is not None and during["p99"] <= args.itl_target_ms,
        "target_ttft_ratio_ok": ratio <= args.ttft_ratio_target,
    }


# ----------------------------------------------------------------------------- flood

@dataclass
class Flood:
    sent: int = 0
    completed: int = 0
    errors: dict = field(default_factory=dict)
    stop: bool = False


async def flood_worker(session, srv: Srv, fl: Flood, wid: int, args):
    rng = random.Random(7000 + wid)
    j = 0
    while not fl.stop:
        body = completion_body(srv, f"Flood {wid}-{j}: " + varied_text(rng, 16),
                               args.flood_max_tokens, False, "flood")
        j += 1
        fl.sent += 1
        try:
            status, js = await post_json(session, srv.url + "/v1/completions", body,
                                         "flood-key", timeout=args.request_timeout * 4)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            status = type(e).__name__
        if status == 200:
            fl.completed += 1
        else:
            fl.errors[str(status)] = fl.errors.get(str(status), 0) + 1
            await asyncio.sleep(0.2)


async def lone_series(session, srv: Srv, args, tag: str, timeout: float) -> list[dict]:
    rng = random.Random(zlib.crc32(tag.encode()))
    out = []
    for k in range(args.lone_n):
        prompt = f"Lone {tag} {k}: " + varied_text(rng, 10)
        if args.lone_think_ms > 0:
            await asyncio.sleep(rng.uniform(0, args.lone_think_ms) / 1000)
        state = await queue_state(session, srv)
        rec = await timed_request(session, srv, prompt, 8, timeout, "lone-key", "lone")
        out.append({"ttft_ms": round(1000 * rec.ttft, 1) if rec.ttft else None,
                    "e2e_ms": round(1000 * (time.perf_counter() - rec.sent), 1),
                    "chunks": len(rec.times), "error": rec.error, "queue_at_send": state})
        if rec.error:
            break   # a timeout: the next one would wait just as long
    return out


async def wait_saturated(session, srv: Srv, fl: Flood, args) -> dict:
    """All of the flood sent, a queue behind the server's running set, and the running count
    steady for 3 polls (admission has settled); at most 90 s."""
    t0 = time.perf_counter()
    await wait_for(lambda: fl.sent >= args.flood_inflight, 60, "the flood to be sent")
    await asyncio.sleep(args.settle_s)
    seen: list = []
    while True:
        state = await queue_state(session, srv)
        if not state:
            break                      # no /metrics: --settle-s is all we can do
        seen.append(state.get("running"))
        if (state.get("waiting") or 0) > 0 and len(seen) >= 3 and len(set(seen[-3:])) == 1:
            break
        if time.perf_counter() - t0 > 90:
            state["note"] = "not steady after 90 s"
            break
        await asyncio.sleep(0.5)
    state["wait_s"] = round(time.perf_counter() - t0, 1)
    return state


async def scen_flood(session, srv: Srv, args, seed: int) -> dict:
    idle = await lone_series(session, srv, args, f"idle{seed}", args.request_timeout)
    fl = Flood()
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as fs:
        tasks = [asyncio.create_task(flood_worker(fs, srv, fl, i, args))
                 for i in range(args.flood_inflight)]
        try:
            sat = await wait_saturated(session, srv, fl, args)
            t0, c0 = time.perf_counter(), fl.completed
            loaded = await lone_series(session, srv, args, f"busy{seed}", args.lone_timeout)
            flood_rate = (fl.completed - c0) / (time.perf_counter() - t0)
        finally:
            fl.stop = True
            await cancel_tasks(tasks)
    return flood_result(idle, loaded, sat, fl, flood_rate, args)


def ttft_summary(series: list[dict]) -> dict:
    xs = [x["ttft_ms"] for x in series if x["ttft_ms"] is not None]
    return {"n": len(xs), "median_ms": round(statistics.median(xs), 1) if xs else None,
            "max_ms": max(xs) if xs else None,
            "timeouts": sum(1 for x in series if x["error"].startswith("timeout")),
            "errors": [x["error"] for x in series if x["error"]]}


def flood_result(idle, loaded, sat, fl: Flood, flood_rate, args) -> dict:
    i, b = ttft_summary(idle), ttft_summary(loaded)
    ratio = (b["median_ms"] / i["median_ms"]) if b["median_ms"] and i["median_ms"] else None
    if b["timeouts"]:
        ratio = None
    return {"idle": i, "loaded": b, "ttft_median_ratio": round(ratio, 2) if ratio else None,
            "target_ok": bool(ratio is not None and ratio <= args.flood_ratio_target
                              and not b["timeouts"]),
            "lone_timeout_s": args.lone_timeout, "saturation": sat,
            "flood_sent": fl.sent, "flood_completed": fl.completed,
            "flood_req_s_during_lone": round(flood_rate, 2), "flood_errors": fl.errors,
            "idle_series": idle, "loaded_series": loaded}


# ----------------------------------------------------------------------------- tokenize-stall

async def health_poller(srv: Srv, out: list, stop: asyncio.Event, period: float):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                async with s.get(srv.url + "/health",
                                 timeout=aiohttp.ClientTimeout(total=60)) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                status = type(e).__name__
            t1 = time.perf_counter()
            out.append((t0, t1, status))
            await asyncio.sleep(max(0.0, period - (t1 - t0)))


async def big_tokenize(srv: Srv, text: str, timeout: float) -> dict:
    key = "prompt" if srv.kind == "troupe" else "content"
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s:
        try:
            status, js = await post_json(s, srv.url + "/tokenize", {key: text}, timeout=timeout)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            status, js = type(e).__name__, None
    t1 = time.perf_counter()
    count = (js.get("count") or len(js.get("tokens", []))) if isinstance(js, dict) else None
    err = None if status == 200 else str(js)[:300]
    return {"t0": t0, "t1": t1, "status": status, "tokens": count, "error": err}


async def scen_tokenize_stall(session, srv: Srv, args, seed: int) -> dict:
    text = big_text(args.tokenize_bytes, seed)
    recs, tasks = await start_streams(session, srv, 1, args.stall_stream_max_tokens, seed)
    polls: list = []
    stop_ev = asyncio.Event()
    poller = None
    try:
        await wait_for(lambda: len(recs[0].times) >= args.warm_tokens or recs[0].done,
                       args.request_timeout, "the stream's first tokens")
        poller = asyncio.create_task(health_poller(srv, polls, stop_ev, 0.05))
        await asyncio.sleep(1.0)
        tok = await big_tokenize(srv, text, args.request_timeout)
        await asyncio.sleep(0.5)
    finally:
        stop_ev.set()
        if poller:
            await asyncio.gather(poller, return_exceptions=True)
        await cancel_tasks(tasks)
    return stall_result(recs[0], polls, tok, len(text.encode()))


def stall_result(rec: Stream, polls: list, tok: dict, n_bytes: int) -> dict:
    lo, hi = tok["t0"], tok["t1"]
    during = [b - a for a, b, _ in polls if b > lo and a < hi]
    outside = [b - a for a, b, _ in polls if b <= lo]
    return {"tokenize_bytes": n_bytes, "tokenize_status": tok["status"],
            "tokenize_tokens": tok["tokens"], "tokenize_error": tok["error"],
            "tokenize_s": round(hi - lo, 2),
            "health_during_ms": ms_stats(during), "health_before_ms": ms_stats(outside),
            "health_non_200": sorted({str(s) for _, _, s in polls if s != 200}),
            "stream_itl_before_ms": ms_stats(gaps_within([rec], rec.times[0], lo)),
            "stream_itl_during_ms": ms_stats(gaps_overlapping([rec], lo, hi)),
            "stream_ended_during": bool(rec.done and rec.times and rec.times[-1] < hi),
            "stream_error": rec.error}


# ----------------------------------------------------------------------------- one run

RUNNERS = {"long-prefill": scen_long_prefill, "flood": scen_flood,
           "tokenize-stall": scen_tokenize_stall}


async def run_scenario(srv: Srv, scen: str, args, seed: int) -> dict:
    async with br.client_session(args) as session:
        srv.model_id = await model_id(session, srv)
        await warm_up(session, srv)
        return await asyncio.wait_for(RUNNERS[scen](session, srv, args, seed),
                                      args.scenario_timeout)


def one_run(kind: str, scen: str, rep: int, args, tmp: str) -> dict:
    tag = f"{kind}-{scen}-{rep}"
    srv = troupe_srv(args, tmp, tag) if kind == "troupe" else peer_srv(args, tmp, tag)
    run = {"server": kind, "scenario": scen, "rep": rep, "cmd": srv.server.cmd,
           "log": srv.server.log_path}
    h0 = host_snapshot()
    try:
        start(srv)
        run["result"] = asyncio.run(run_scenario(srv, scen, args, args.seed + 100 * rep))
    except (Exception, SystemExit) as e:  # noqa: BLE001  (one failed run must not end the rest)
        run["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        died = stop(srv) if srv.server.proc else None
    if died is not None:
        run["server_died"] = {"exit_code": died, "log_tail": log_tail(srv)}
    run["host"] = br.host_record(h0, host_snapshot())
    return run


# ----------------------------------------------------------------------------- reporting

def _err_row(run: dict, ncols: int) -> str:
    msg = run.get("error", "")
    if "server_died" in run:
        msg += f" (server exit {run['server_died']['exit_code']})"
    return br.error_row(run, run["server"], msg, ncols)


def _per_token(r: dict) -> str:
    t = r.get("itl_during_prefill_per_token_ms")  # absent in older results, None for peers
    if not t or t.get("p99") is None:
        return "—"
    return f"{_f(t['p99'])} / {_f(t['max'])} ({r.get('multi_token_chunks_during', 0)})"


def table_long(runs: list[dict]) -> str:
    head = ["server", "rep", "prompt tok", "ITL before p50/p99/max ms",
            "ITL during prefill p50/p99/max ms (n)", "per token p99/max ms (chunks > 1 token)",
            "long TTFT ms", "alone TTFT ms",
            "TTFT ratio", "ITL p99 ≤ 150", "ratio ≤ 1.3", "load1 before→after"]

    def row(run: dict, r: dict) -> list[str]:
        d = r["itl_during_prefill_ms"]
        return [
            run["server"], str(run["rep"]), str(r["long_prompt_tokens"]),
            _trip(r["itl_before_ms"]), f"{_trip(d)} ({d['n']})", _per_token(r),
            _f(r["long_ttft_ms"]),
            _f(r["alone_ttft_ms"]), _f(r["ttft_ratio"]),
            "yes" if r["target_itl_p99_ok"] else "**no**",
            "yes" if r["target_ttft_ratio_ok"] else "**no**", _load(run)]

    return "\n".join(br.runs_table(head, runs, row, _err_row))


def table_flood(runs: list[dict]) -> str:
    head = ["server", "rep", "idle TTFT med/max ms", "flooded TTFT med/max ms", "ratio",
            "≤ 2x", "queue at lone send (run/wait)", "flood done / errors", "load1 before→after"]

    def row(run: dict, r: dict) -> list[str]:
        i, b = r["idle"], r["loaded"]
        busy = f"{_f(b['median_ms'])} / {_f(b['max_ms'])}"
        if b["timeouts"]:
            busy += f" ({b['timeouts']} timeout > {r['lone_timeout_s']:.0f} s)"
        q = (r["loaded_series"] or [{}])[0].get("queue_at_send", {})
        return [
            run["server"], str(run["rep"]), f"{_f(i['median_ms'])} / {_f(i['max_ms'])}", busy,
            _f(r["ttft_median_ratio"]), "yes" if r["target_ok"] else "**no**",
            f"{_f(q.get('running'))} / {_f(q.get('waiting'))}",
            f"{r['flood_completed']} / {sum(r['flood_errors'].values())}", _load(run)]

    return "\n".join(br.runs_table(head, runs, row, _err_row))


def table_stall(runs: list[dict]) -> str:
    head = ["server", "rep", "/tokenize (bytes → tokens, s)", "/health during: n, p50/p99/max ms",
            "/health before max ms", "stream ITL before p50/p99/max ms",
            "stream worst ITL during ms", "load1 before→after"]

    def row(run: dict, r: dict) -> list[str]:
        hd = r["health_during_ms"]
        tk = f"{r['tokenize_bytes']} → {_f(r['tokenize_tokens'])} (HTTP {r['tokenize_status']}" \
             f", {r['tokenize_s']} s)"
        return [
            run["server"], str(run["rep"]), tk, f"{hd['n']}, {_trip(hd)}",
            _f(r["health_before_ms"]["max"]), _trip(r["stream_itl_before_ms"]),
            _f(r["stream_itl_during_ms"]["max"]), _load(run)]

    return "\n".join(br.runs_table(head, runs, row, _err_row))


TABLES = {"long-prefill": table_long, "flood": table_flood, "tokenize-stall": table_stall}


def markdown(runs: list[dict]) -> str:
    return "\n".join(br.scenario_sections(runs, SCENARIOS, TABLES))


# ----------------------------------------------------------------------------- CLI

def peer_build_info(peer_bin: str) -> dict:
    cache = os.path.join(os.path.dirname(os.path.dirname(peer_bin)), "CMakeCache.txt")
    info = br.binary_info(peer_bin)
    try:
        with open(cache) as f:
            for line in f:
                if line.startswith(("GGML_NATIVE:", "GGML_AVX2:", "GGML_AVX512:",
                                    "CMAKE_BUILD_TYPE:")):
                    k, v = line.strip().split("=", 1)
                    info[k.split(":")[0]] = v
    except OSError:
        info["note"] = "no CMakeCache.txt next to the binary"
    return info


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--servers", default="troupe,llama-server", help="comma list: troupe, llama-server")
    a("--scenario", default=",".join(SCENARIOS), help="comma list of " + ", ".join(SCENARIOS))
    br.add_troupe_args(
        a, "base config; cpu.threads, log level, admin socket and drain time are overridden")
    a("--peer-bin", default=DEFAULT_PEER)
    a("--peer-parallel", type=int, default=16, help="llama-server -np (slots)")
    a("--peer-slot-ctx", type=int, default=4096, help="context per slot; -c = np x this")
    a("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a("--threads", type=int, default=2)
    a("--reps", type=int, default=1)
    br.add_output_args(a, "isolation")
    br.add_options(ap.add_argument_group("long-prefill"), streams=4, warm_tokens=20,
                   stream_max_tokens=1024, long_tokens=3750, long_max_tokens=16,
                   itl_target_ms=150.0, ttft_ratio_target=1.3)
    br.add_options(ap.add_argument_group("flood"), flood_inflight=200, flood_max_tokens=128,
                   lone_n=5, lone_think_ms=0.0, lone_timeout=300.0, settle_s=3.0,
                   flood_ratio_target=2.0)
    g = ap.add_argument_group("tokenize-stall")
    g.add_argument("--tokenize-bytes", type=int, default=8_000_000,
                   help="prompt size (the JSON body must stay under http.max_body_bytes)")
    g.add_argument("--stall-stream-max-tokens", type=int, default=6000)
    br.add_limit_args(ap)
    return ap.parse_args()


def check_args(args) -> tuple[list[str], list[str]]:
    servers = [s for s in args.servers.split(",") if s]
    scens = [s for s in args.scenario.split(",") if s]
    for s in servers:
        if s not in ("troupe", "llama-server"):
            raise SystemExit(f"unknown server {s!r} (troupe, llama-server)")
    for s in scens:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r} ({', '.join(SCENARIOS)})")
    binary = {"troupe": args.troupe_bin, "llama-server": args.peer_bin}
    for s in servers:
        if not os.access(binary[s], os.X_OK):
            raise SystemExit(f"{s}: no executable at {binary[s]} (see the docstring / --help)")
    br.check_model(args)
    return servers, scens


def plan(servers: list[str], scens: list[str], reps: int) -> list[tuple]:
    """(server, scenario, rep) in run order: servers alternate A B, then B A, ..."""
    out = []
    for rep in range(reps):
        order = servers if rep % 2 == 0 else servers[::-1]
        for scen in scens:
            for s in order:
                if scen == "tokenize-stall" and s != "troupe":
                    continue
                out.append((s, scen, rep))
    return out


def print_json_tables(path: str):
    def render(inv: dict) -> str:
        m = inv["meta"]
        return (f"## {m['date']}: troupe {m.get('troupe_commit')} "
                f"({(m.get('troupe_bin') or {}).get('path')})\n\n{markdown(inv['runs'])}")
    br.print_invocations(path, render)


def main():
    args = parse_args()
    if args.from_json:
        return print_json_tables(args.from_json)
    servers, scens = check_args(args)
    sha = args.troupe_commit or br.git("rev-parse", "--short", "HEAD")
    out = args.out or os.path.join(HERE, "results", f"isolation_{sha}.json")
    tmp = tempfile.mkdtemp(prefix="troupe-iso-")
    meta = {"argv": sys.argv, "troupe_commit": sha, "head": br.git("rev-parse", "--short", "HEAD"),
            "dirty_files": len(br.git("status", "--porcelain").splitlines()),
            "troupe_bin": br.binary_info(args.troupe_bin) if "troupe" in servers else None,
            "peer": peer_build_info(args.peer_bin) if "llama-server" in servers else None,
            "script_sha1": br.file_sha1(__file__),
            "model": args.model, "threads": args.threads, "nproc": os.cpu_count(),
            "logs": tmp, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    runs = br.run_jobs(plan(servers, scens, args.reps),
                       lambda kind, scen, rep: one_run(kind, scen, rep, args, tmp),
                       lambda run: markdown([run]).strip().splitlines()[-1], meta, out)
    print(markdown(runs))


if __name__ == "__main__":
    br.run_main(main)
