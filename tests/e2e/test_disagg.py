"""Disaggregated prefill/decode end to end (issue 17): a prefill server and a decode server on the
real model, KV moved between them (troupe's own TCP transport, and UCX), driven by real clients (openai, websockets, requests,
httpx) on every surface.

Servers:
- `reference`: a combined server (no --role), the ground truth. A plain combined server rather
  than the prefill server serving ordinary requests, because the claim under test is "a decode
  server answers exactly as a normal server does": a bug of the prefill role that also showed in
  its ordinary answers would be invisible against itself. It is also the combined server the
  bad-input test needs (kv_transfer_params refused, no /v1/kv/metadata).
- `pair`: (prefill, decode) parameterized over the KV transports: `tcp` (troupe's own sockets,
  the default) and `ucx-tcp` (`--kv-transport ucx --ucx-tls tcp`). UCX's `posix,cma` alone cannot
  serve (UCX 1.13's shared memory cannot report a dead peer, which every endpoint needs), so a
  server given it stops at start — tested below; `posix,cma,tcp` behaves as tcp on 1.13 and is
  covered by the transport's unit tests. To keep the file's runtime modest on two CPU cores, the
  full 20-prompt parity check and the heavy tests (bad input, 100 concurrent requests with
  disconnects, SIGKILL of the prefill server, lease expiry, compatibility mismatch) run on `tcp`
  only; `ucx-tcp` gets a 5-prompt parity check on every surface and the explicit vLLM-style
  two-step flow.
- The pair runs with disagg.kv_lease_ms 3000 (a config file): a lease whose release is lost
  (a client that vanished between the prefill and the pull) is freed within seconds, so the
  "everything back to 0 once idle" checks can wait for it instead of for the 30 s default.

Every generation is greedy (temperature 0): the decode server must give the reference's text.
"""
import asyncio
import json
import random
import re
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gguf
import httpx
import openai
import pytest
import requests
from websockets.asyncio.client import connect

from conftest import MODEL, Server
from test_admin import admin_cli
from test_openai_api import MODEL_ID

MAX_TOKENS = 16
MIN_REMOTE_PREFILL_TOKENS = 256  # disagg.min_remote_prefill_tokens default
PAIR_LEASE_MS = 3000

# ---------------------------------------------------------------------------------------------
# Prompts: varied generated documents (seeded, so every run sends the same text).

SUBJECTS = ["The harbor master", "A retired astronomer", "The village council",
            "Our chemistry teacher", "A travelling merchant", "The night nurse", "An old fisherman",
            "The railway engineer", "A young violinist", "The museum curator",
            "The baker on Elm Street", "A geologist from the north"]
VERBS = ["described", "repaired", "questioned", "measured", "painted", "forgot", "rebuilt", "studied",
         "sold", "photographed", "carried", "explained"]
OBJECTS = ["the copper lantern", "a map of the eastern coast", "the broken clock tower",
           "seventeen jars of honey", "the winter schedule", "a letter from Lisbon",
           "the flooded cellar", "an orchard of pear trees", "the signal lamps",
           "a box of glass marbles", "the ledger of 1894", "the bridge over the canal"]
TAILS = ["before the storm arrived", "while the bells were ringing", "because nobody else would",
         "during the long dry summer", "after the market closed", "with surprising patience",
         "in front of a curious crowd", "for the third time that year", "without asking for payment",
         "as the tide went out"]
EXTRAS = ["Everyone agreed it was unusual.", "Nobody wrote it down at the time.",
          "The newspaper printed a short note about it.", "It rained for two days afterwards.",
          "Later, a child asked why.", "The numbers did not add up.", ""]


def document(seed, sentences):
    """~25 tokens a sentence: 44 sentences are ~1,100 tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
        if rng.random() < 0.3:
            s += f" In {1850 + rng.randrange(170)}, {rng.randrange(2, 400)} people were there."
        extra = rng.choice(EXTRAS)
        out.append(s + (" " + extra if extra else ""))
    return " ".join(out)


SHORT = ["Which city is the capital of France?", "Name the capital city of Germany.",
         "Write a haiku about autumn leaves.", "What is 12 times 7?",
         "Give me three tips for sleeping better.", "Explain what a neural network is.",
         "Translate 'good morning' into Spanish.", "Tell me a short story about a cat.",
         "List the planets of the solar system."]
LONG = [document(seed, 44) + "\n\nSummarize the notes above in one sentence." for seed in range(1, 6)]
SHARED_PREFIX = document(100, 44)
SHARED = [SHARED_PREFIX + "\n\n" + question for question in (
    "Who repaired the broken clock tower?", "What happened in front of a curious crowd?",
    "How many people were there in the earliest year mentioned?", "Which objects were sold?",
    "Write a title for these notes.", "Did anything happen as the tide went out?")]
ALL = SHORT + LONG + SHARED  # 20 prompts
SUBSET = SHORT[:1] + LONG[:2] + SHARED[:2]  # the smaller parity check (posix,cma,tcp)
COMPLETION_PROMPT = document(7, 44) + "\n\nSummary:"  # the explicit flow on /v1/completions


def is_long(prompt):
    return prompt not in SHORT


# ---------------------------------------------------------------------------------------------
# Servers and metrics.

def start(log_dir, name, *args, port=None, model=None, disagg=None, admin_socket=None):
    """A troupe on the default model (or `model`), its admin socket off (several run at once)
    unless `admin_socket` names one, and `disagg` config keys from a config file; `port` pins the
    port (a restart on the same port)."""
    config = {"admin": {"enabled": False}}
    if disagg:
        config["disagg"] = disagg
    config_path = log_dir / f"{name}.json"
    config_path.write_text(json.dumps(config))
    extra = ["--config", str(config_path), *args]
    if port is not None:
        extra += ["--port", str(port)]  # later flags win over the helper's own --port
    if model is not None:
        extra += ["--model", str(model)]
    if admin_socket is not None:
        extra += ["--admin-socket", str(admin_socket)]
    server = Server(*extra, log_path=log_dir / f"{name}.log")
    if port is not None:
        server.port = port
        server.base_url = f"http://127.0.0.1:{port}"
    return server.wait_ready()


# The pair's KV transport settings by name.
TRANSPORTS = {"tcp": ("--kv-transport", "tcp"),
              "ucx-tcp": ("--kv-transport", "ucx", "--ucx-tls", "tcp")}


def start_pair(log_dir, name, transport, prefill_model=None, lease_ms=PAIR_LEASE_MS,
               prefill_args=(), decode_args=()):
    prefill = start(log_dir, f"{name}-prefill", "--role", "prefill", *TRANSPORTS[transport],
                    *prefill_args, model=prefill_model, disagg={"kv_lease_ms": lease_ms})
    decode = start(log_dir, f"{name}-decode", "--role", "decode", *TRANSPORTS[transport],
                   "--prefill-url", f"127.0.0.1:{prefill.port}", *decode_args,
                   disagg={"kv_lease_ms": lease_ms}, admin_socket=log_dir / f"{name}-decode.sock")
    decode.admin_socket = log_dir / f"{name}-decode.sock"
    return prefill, decode


def metrics(server):
    """{(name, ((label, value), ...)): value}, model_name left out."""
    r = requests.get(server.base_url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    values = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$", head)
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        labels.pop("model_name", None)
        values[(m.group(1), tuple(sorted(labels.items())))] = float(value)
    return values


def metric(values, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in values, f"{name}{labels or ''} is not in /metrics"
    return values[key]


IDLE_GAUGES = ["troupe:kv_blocks_used", "troupe:kv_transfer_leases",
               "troupe:kv_transfer_requests_awaiting_kv", "troupe:kv_transfers_in_flight",
               "troupe:num_requests_running", "troupe:num_requests_waiting"]


def wait_idle(servers, timeout=60):
    """Polls every server's /metrics until nothing runs, waits, is pulled or is leased, and no KV
    block is in use."""
    deadline = time.time() + timeout
    while True:
        state = {s.base_url: {g: metric(metrics(s), g) for g in IDLE_GAUGES} for s in servers}
        if all(v == 0 for gauges in state.values() for v in gauges.values()):
            return
        if time.time() > deadline:
            pytest.fail(f"not idle after {timeout}s: {state}")
        time.sleep(0.25)


def wait_until(what, probe, timeout=30, interval=0.2):
    """Polls `probe` until it returns something true; returns it."""
    deadline = time.time() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.time() > deadline:
            pytest.fail(f"{what}: not reached after {timeout}s")
        time.sleep(interval)


def counter_deltas(before, after, names):
    return {name + (str(dict(labels)) if labels else ""): metric(after, name, **dict(labels)) -
            metric(before, name, **dict(labels)) for name, labels in names}


TRANSFER_COUNTERS = [("troupe:remote_prefills_total", ()),
                     ("troupe:kv_transfers_total", (("outcome", "ok"),)),
                     ("troupe:kv_transfers_total", (("outcome", "failed"),)),
                     ("troupe:kv_transfer_fallbacks_total", ()),
                     ("troupe:kv_transfer_blocks_total", ()),
                     ("troupe:kv_transfer_handshake_failures_total", ())]


# ---------------------------------------------------------------------------------------------
# Clients, one per surface. Each returns the generated texts, in the prompts' order.

def chat_body(prompt, **extra):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS, "temperature": 0}
    body.update(extra)
    return body


def openai_client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=600)


def http_chat(server, prompts, stream=False):
    client = openai_client(server)

    def one(prompt):
        messages = [{"role": "user", "content": prompt}]
        if not stream:
            r = client.chat.completions.create(model=MODEL_ID, messages=messages,
                                               max_tokens=MAX_TOKENS, temperature=0)
            return r.choices[0].message.content
        text = ""
        for chunk in client.chat.completions.create(model=MODEL_ID, messages=messages,
                                                    max_tokens=MAX_TOKENS, temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, prompts))


def http_completions(server, prompts, stream=False):
    client = openai_client(server)

    def one(prompt):
        if not stream:
            return client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=MAX_TOKENS,
                                             temperature=0).choices[0].text
        return "".join(chunk.choices[0].text for chunk in client.completions.create(
            model=MODEL_ID, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stream=True)
            if chunk.choices)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, prompts))


def ws_chat(server, prompts, per_socket=10):
    """The prompts as multiplexed chats, `per_socket` on each socket (at most 16 run at once on
    one), the sockets side by side (README: WebSocket chat)."""
    async def one_socket(first, group):
        url = f"ws://127.0.0.1:{server.port}/v1/chat/ws"
        async with connect(url, open_timeout=60, max_size=None) as ws:
            for i, prompt in enumerate(group, first):
                await ws.send(json.dumps({"type": "chat", "id": f"p{i}",
                                          "messages": [{"role": "user", "content": prompt}],
                                          "temperature": 0, "max_tokens": MAX_TOKENS}))
            texts = {f"p{i}": "" for i in range(first, first + len(group))}
            open_ids = set(texts)
            while open_ids:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 600))
                assert frame["type"] in ("delta", "done"), frame
                if frame["type"] == "delta":
                    texts[frame["id"]] += frame["text"]
                else:
                    assert frame["finish_reason"] in ("stop", "length"), frame
                    open_ids.discard(frame["id"])
            return [texts[f"p{i}"] for i in range(first, first + len(group))]

    async def run():
        groups = await asyncio.gather(*(one_socket(first, prompts[first:first + per_socket])
                                        for first in range(0, len(prompts), per_socket)))
        return [text for group in groups for text in group]

    return asyncio.run(run())


def batch_chat(server, prompts):
    items = [{"custom_id": f"p{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": chat_body(p)} for i, p in enumerate(prompts)]
    r = requests.post(server.base_url + "/v1/batch", json={"requests": items}, timeout=600)
    assert r.status_code == 200, r.text
    results = r.json()["data"]
    assert [x["custom_id"] for x in results] == [f"p{i}" for i in range(len(prompts))]
    for x in results:
        assert x["response"]["status_code"] == 200, x
    return [x["response"]["body"]["choices"][0]["message"]["content"] for x in results]


# ---------------------------------------------------------------------------------------------
# Fixtures.

@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("disagg")


class Reference:
    """The combined server and its greedy answers, computed once per prompt."""

    def __init__(self, server):
        self.server = server
        self.chats = {}
        self.completion_texts = {}
        self.prompt_tokens = {}
        self.lock = threading.Lock()

    def chat(self, prompts):
        missing = [p for p in dict.fromkeys(prompts) if p not in self.chats]
        client = openai_client(self.server)

        def one(prompt):
            r = client.chat.completions.create(model=MODEL_ID,
                                               messages=[{"role": "user", "content": prompt}],
                                               max_tokens=MAX_TOKENS, temperature=0)
            with self.lock:
                self.chats[prompt] = r.choices[0].message.content
                self.prompt_tokens[prompt] = r.usage.prompt_tokens

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, missing))
        for p in prompts:  # the prompt set is what it claims to be
            if is_long(p):
                assert self.prompt_tokens[p] > 1000, (self.prompt_tokens[p], p[:80])
            else:
                assert self.prompt_tokens[p] < MIN_REMOTE_PREFILL_TOKENS, (self.prompt_tokens[p], p)
        return [self.chats[p] for p in prompts]

    def completions(self, prompts):
        missing = [p for p in dict.fromkeys(prompts) if p not in self.completion_texts]
        for prompt, text in zip(missing, http_completions(self.server, missing)):
            self.completion_texts[prompt] = text
        return [self.completion_texts[p] for p in prompts]


@pytest.fixture(scope="module")
def reference(log_dir):
    server = start(log_dir, "reference")
    yield Reference(server)
    server.stop()


def pair_of(log_dir, transport):
    prefill, decode = start_pair(log_dir, "pair-" + transport, transport)
    yield transport, prefill, decode
    decode.stop()
    prefill.stop()


@pytest.fixture(scope="module")
def tcp_pair(log_dir):
    """The pair over tcp, for the tests that run on tcp only (and `pair`'s tcp case)."""
    yield from pair_of(log_dir, "tcp")


@pytest.fixture(scope="module", params=["tcp", "ucx-tcp"])
def pair(request, log_dir):
    if request.param == "tcp":
        yield request.getfixturevalue("tcp_pair")
    else:
        yield from pair_of(log_dir, request.param)


def assert_texts(got, want, prompts, surface):
    mismatches = [(i, prompts[i][-60:], w, g) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not mismatches, (f"{surface}: {len(mismatches)} of {len(prompts)} differ from the "
                            f"reference: (index, prompt end, reference, decode server) {mismatches}")


# ---------------------------------------------------------------------------------------------
# 1. Parity on every surface.

def test_decode_server_gives_the_reference_text_on_every_surface(pair, reference):
    transport, prefill, decode = pair
    prompts = ALL if transport == "tcp" else SUBSET
    want = reference.chat(prompts)
    # /v1/completions too (raw prompts: no chat template), on the two HTTP surfaces.
    completion_prompts = [COMPLETION_PROMPT, SHORT[1]]
    want_completions = reference.completions(completion_prompts)
    before = metrics(decode)
    surfaces = {"http": lambda: http_chat(decode, prompts),
                "http stream": lambda: http_chat(decode, prompts, stream=True),
                "websocket": lambda: ws_chat(decode, prompts),
                "batch": lambda: batch_chat(decode, prompts)}
    for surface, run in surfaces.items():
        assert_texts(run(), want, prompts, f"{transport} {surface}")
    for stream in (False, True):
        assert_texts(http_completions(decode, completion_prompts, stream=stream), want_completions,
                     completion_prompts, f"{transport} completions{' stream' if stream else ''}")
    after = metrics(decode)
    deltas = counter_deltas(before, after, TRANSFER_COUNTERS)
    print(f"{transport}: {deltas}")
    # Every long prompt on every surface was prefilled remotely and its KV pulled (the long
    # completion prompt twice: stream and not); no short one.
    num_remote = sum(map(is_long, prompts)) * len(surfaces) + 2
    assert deltas["troupe:remote_prefills_total"] == num_remote, deltas
    assert deltas["troupe:kv_transfers_total{'outcome': 'ok'}"] >= num_remote, deltas
    assert deltas["troupe:kv_transfers_total{'outcome': 'failed'}"] == 0, deltas
    assert deltas["troupe:kv_transfer_fallbacks_total"] == 0, deltas
    assert deltas["troupe:kv_transfer_blocks_total"] > 0, deltas
    wait_idle([prefill, decode])


# ---------------------------------------------------------------------------------------------
# 2. vLLM's explicit two-step flow with a plain HTTP client.

VLLM_PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                       "remote_block_ids": None, "remote_host": None, "remote_port": None}


def test_explicit_two_step_flow(pair, reference):
    transport, prefill, decode = pair
    engine_id = requests.get(prefill.base_url + "/v1/kv/metadata", timeout=30).json()["engine_id"]
    completion = {"model": MODEL_ID, "prompt": COMPLETION_PROMPT, "max_tokens": MAX_TOKENS,
                  "temperature": 0}
    cases = [("/v1/completions", completion, reference.completions([COMPLETION_PROMPT])[0]),
             ("/v1/chat/completions", chat_body(LONG[0]), reference.chat([LONG[0]])[0])]
    for route, body, want in cases:
        before_prefill, before_decode = metrics(prefill), metrics(decode)
        r = requests.post(prefill.base_url + route, timeout=600, json=dict(
            body, max_tokens=1, stream=False, kv_transfer_params=VLLM_PREFILL_PARAMS))
        assert r.status_code == 200, r.text
        answer = r.json()
        kv = answer["kv_transfer_params"]
        prompt_tokens = answer["usage"]["prompt_tokens"]
        assert prompt_tokens > 1000
        assert kv["do_remote_prefill"] is True and kv.get("do_remote_decode") in (False, None), kv
        assert kv["remote_engine_id"] == engine_id, kv
        assert isinstance(kv["remote_request_id"], str) and kv["remote_request_id"], kv
        assert kv["remote_host"] == "127.0.0.1" and kv["remote_port"] == prefill.port, kv
        assert kv["remote_num_tokens"] == prompt_tokens, kv
        assert isinstance(kv["first_token_id"], int), kv
        assert kv["tp_size"] == 1, kv
        block_ids = kv["remote_block_ids"]
        assert all(isinstance(b, int) and b >= 0 for b in block_ids), kv
        assert len(block_ids) == -(-prompt_tokens // 16) and len(set(block_ids)) == len(block_ids), \
            (prompt_tokens, block_ids)
        first = answer["choices"][0]
        assert first["finish_reason"] == "length"
        first_text = first["text"] if route == "/v1/completions" else first["message"]["content"]
        assert want.startswith(first_text), (first_text, want)
        assert metric(metrics(prefill), "troupe:kv_transfer_leases") == 1  # held for the pull

        r = requests.post(decode.base_url + route, json=dict(body, kv_transfer_params=kv), timeout=600)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        got = choice["text"] if route == "/v1/completions" else choice["message"]["content"]
        assert got == want, (route, got, want)
        assert r.json()["usage"]["prompt_tokens"] == prompt_tokens

        deltas = counter_deltas(before_decode, metrics(decode), TRANSFER_COUNTERS)
        assert deltas["troupe:kv_transfers_total{'outcome': 'ok'}"] == 1, deltas
        assert deltas["troupe:kv_transfer_fallbacks_total"] == 0, deltas
        assert deltas["troupe:remote_prefills_total"] == 0, deltas  # the client did the first step
        # The decode server released the lease: freed at once, not by expiry.
        wait_until("the prefill server's lease released",
                   lambda: metric(metrics(prefill), "troupe:kv_transfer_leases") == 0,
                   timeout=PAIR_LEASE_MS / 1000 + 30)
        after_prefill = metrics(prefill)
        assert (metric(after_prefill, "troupe:kv_transfer_leases_released_total") -
                metric(before_prefill, "troupe:kv_transfer_leases_released_total")) == 1
        assert (metric(after_prefill, "troupe:kv_transfer_leases_expired_total") ==
                metric(before_prefill, "troupe:kv_transfer_leases_expired_total"))
        wait_idle([prefill, decode])


# ---------------------------------------------------------------------------------------------
# 3. Bad input.

def error_of(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]


def test_bad_kv_transfer_params(tcp_pair, reference):
    _, prefill, decode = tcp_pair
    combined = reference.server
    completion = {"model": MODEL_ID, "prompt": "Hello there", "max_tokens": 2, "temperature": 0}
    routes = (("/v1/completions", completion), ("/v1/chat/completions", chat_body("Hi", max_tokens=2)))
    for server in (prefill, decode, combined):
        for route, body in routes:
            for bad in ("yes", 7, ["do_remote_decode"], True):
                error = error_of(requests.post(server.base_url + route, timeout=60,
                                               json=dict(body, kv_transfer_params=bad)), 400)
                assert error["param"] == "kv_transfer_params", error
                assert "kv_transfer_params" in error["message"], error
    # A field of the wrong type.
    error = error_of(requests.post(prefill.base_url + "/v1/completions", timeout=60, json=dict(
        completion, kv_transfer_params={"do_remote_decode": "true"})), 400)
    assert error["param"] == "kv_transfer_params", error
    error = error_of(requests.post(decode.base_url + "/v1/completions", timeout=60, json=dict(
        completion, kv_transfer_params={"do_remote_prefill": True, "remote_block_ids": "0,1"})), 400)
    assert error["param"] == "kv_transfer_params", error
    # do_remote_decode answers with the params in one JSON body: no stream.
    for route, body in routes:
        error = error_of(requests.post(prefill.base_url + route, timeout=60, json=dict(
            body, stream=True, kv_transfer_params=VLLM_PREFILL_PARAMS)), 400)
        assert error["param"] == "kv_transfer_params", error
    # A combined server moves no KV.
    error = error_of(requests.post(combined.base_url + "/v1/completions", timeout=60, json=dict(
        completion, max_tokens=1, kv_transfer_params=VLLM_PREFILL_PARAMS)), 400)
    assert error["param"] == "kv_transfer_params", error
    assert requests.get(combined.base_url + "/v1/kv/metadata", timeout=30).status_code == 404
    # do_remote_prefill without the prefill server's coordinates.
    error = error_of(requests.post(decode.base_url + "/v1/completions", timeout=60, json=dict(
        completion, kv_transfer_params={"do_remote_prefill": True})), 400)
    assert error["param"] == "kv_transfer_params", error
    # Everyone still serves, and nothing was leased or left allocated.
    for server in (prefill, decode, combined):
        r = requests.post(server.base_url + "/v1/completions", json=completion, timeout=120)
        assert r.status_code == 200, r.text
    wait_idle([prefill, decode, combined])


# ---------------------------------------------------------------------------------------------
# 4. 100 concurrent requests, a third of them abandoned mid-way.

def test_concurrent_requests_with_disconnects_leak_nothing(tcp_pair, reference):
    _, prefill, decode = tcp_pair
    want = dict(zip(ALL, reference.chat(ALL)))
    rng = random.Random(17)
    num_requests = 100
    abandon = set(rng.sample(range(num_requests), num_requests // 3))
    plan = [{"prompt": ALL[rng.randrange(len(ALL))], "stream": rng.random() < 0.5,
             "abandon_after_s": rng.uniform(0.05, 4.0) if i in abandon else None,
             "abandon_after_chunks": rng.randint(1, 3)} for i in range(num_requests)]
    url = decode.base_url + "/v1/chat/completions"
    # The parity test left every prompt in the decode server's prefix cache, so a pull would
    # move only the last block: flush it, so that the long prompts' KV is really pulled (whole)
    # while clients come and go.
    wait_until("the admin socket", decode.admin_socket.exists, timeout=10)
    flushed = admin_cli(decode.admin_socket, "flush-prefix-cache")
    assert flushed.returncode == 0, flushed.stderr

    async def one(client, p):
        body = chat_body(p["prompt"], stream=p["stream"])
        if not p["stream"]:
            r = await client.post(url, json=body)
            if r.status_code != 200:
                return r.status_code, r.text
            return r.status_code, r.json()["choices"][0]["message"]["content"]
        text = ""
        chunks = 0
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                return r.status_code, (await r.aread()).decode()
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                    text += chunk["choices"][0]["delta"]["content"]
                    chunks += 1
                    if p["abandon_after_s"] is not None and chunks == p["abandon_after_chunks"]:
                        return "abandoned", text  # leaving the block closes the connection
        return r.status_code, text

    async def run():
        limits = httpx.Limits(max_connections=num_requests * 2, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            async def guarded(p):
                if p["abandon_after_s"] is None:
                    return await one(client, p)
                try:
                    return await asyncio.wait_for(one(client, p), p["abandon_after_s"])
                except asyncio.TimeoutError:
                    return "abandoned", None
            return await asyncio.gather(*(guarded(p) for p in plan))

    before, before_prefill = metrics(decode), metrics(prefill)
    results = asyncio.run(run())
    deltas = counter_deltas(before, metrics(decode), TRANSFER_COUNTERS)
    abandoned = sum(status == "abandoned" for status, _ in results)
    print(f"{abandoned} abandoned; decode counters: {deltas}")
    assert abandoned >= 10, "the disconnects did not happen mid-way"
    for p, (status, text) in zip(plan, results):
        if status != "abandoned":
            assert status == 200, (status, text)
            assert text == want[p["prompt"]], (p, text, want[p["prompt"]])
    assert deltas["troupe:remote_prefills_total"] > 0, deltas
    assert deltas["troupe:kv_transfer_blocks_total"] > 200, deltas  # whole prompts were pulled
    # The decode server still answers correctly, and both servers free everything (a lease
    # whose release was lost with its client expires after PAIR_LEASE_MS).
    assert http_chat(decode, [LONG[1], SHORT[0]]) == [want[LONG[1]], want[SHORT[0]]]
    wait_idle([prefill, decode], timeout=PAIR_LEASE_MS / 1000 + 60)
    leases = counter_deltas(before_prefill, metrics(prefill), [
        ("troupe:kv_transfer_leases_released_total", ()),
        ("troupe:kv_transfer_leases_expired_total", ())])
    print("prefill server leases: " + str(leases))
    # A prefill answer whose client (the decode server's call) left is released at once, not at
    # expiry (before that fix 6-11 of ~57 expired here). Only a client leaving in the instant
    # between the answer and its delivery can still leave one to expire.
    assert leases["troupe:kv_transfer_leases_expired_total"] <= 2, leases


# ---------------------------------------------------------------------------------------------
# 5. The prefill server dies mid-request; a new one on the same port is used again.

def test_prefill_server_killed_mid_request_then_restarted(log_dir, reference):
    prompts = SHARED[:4]
    want = reference.chat(prompts)
    prefill, decode = start_pair(log_dir, "kill", "tcp")
    restarted = None
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(http_chat, decode, [p], stream=i % 2 == 1)
                       for i, p in enumerate(prompts)]
            # Kill while the prefill server is working on them (a fresh server: no prefix cache).
            wait_until("the prefill server busy with the decode server's prompts", lambda: (
                metric(metrics(prefill), "troupe:num_requests_running") +
                metric(metrics(prefill), "troupe:num_requests_waiting")) > 0, timeout=120, interval=0.02)
            prefill.stop(signal.SIGKILL)
            got = [f.result(timeout=600)[0] for f in futures]
        assert_texts(got, want, prompts, "after SIGKILL of the prefill server")
        assert requests.get(decode.base_url + "/health", timeout=30).status_code == 200
        after_kill = metrics(decode)
        assert metric(after_kill, "troupe:kv_transfer_fallbacks_total") > 0
        wait_idle([decode])

        restarted = start(log_dir, "kill-prefill-restarted", "--role", "prefill",
                          "--kv-transport", "tcp", port=prefill.port,
                          disagg={"kv_lease_ms": PAIR_LEASE_MS})
        again = SHARED[4:6]
        assert_texts(http_chat(decode, again), reference.chat(again), again, "after the restart")
        deltas = counter_deltas(after_kill, metrics(decode), TRANSFER_COUNTERS)
        assert deltas["troupe:remote_prefills_total"] == len(again), deltas
        assert deltas["troupe:kv_transfers_total{'outcome': 'ok'}"] >= len(again), deltas
        assert deltas["troupe:kv_transfer_fallbacks_total"] == 0, deltas
        wait_idle([restarted, decode])
    finally:
        decode.stop()
        prefill.stop()
        if restarted:
            restarted.stop()


def test_shared_memory_alone_is_refused_at_start(log_dir):
    """UCX 1.13's posix/cma cannot report a dead peer: pulls over them could hang, so a server
    told to use only them stops at start, naming the reason (it used to start and fall back on
    every request)."""
    server = Server("--role", "prefill", "--kv-transport", "ucx", "--ucx-tls", "posix,cma",
                    "--admin-socket",
                    str(log_dir / "refused.sock"), log_path=log_dir / "refused.log")
    try:
        assert server.process.wait(timeout=120) != 0
        assert "cannot report a dead peer" in server.read_log()
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# 6. A lease nobody pulls expires.

def test_unpulled_lease_expires(log_dir):
    prefill = start(log_dir, "lease", "--role", "prefill", "--kv-transport", "tcp",
                    disagg={"kv_lease_ms": 1000})
    try:
        r = requests.post(prefill.base_url + "/v1/completions", timeout=300, json={
            "model": MODEL_ID, "prompt": SHARED_PREFIX[:1500], "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": VLLM_PREFILL_PARAMS})
        assert r.status_code == 200, r.text
        assert r.json()["kv_transfer_params"]["remote_block_ids"]
        wait_until("the lease expired", lambda: metric(
            metrics(prefill), "troupe:kv_transfer_leases_expired_total") == 1, timeout=30)
        wait_idle([prefill], timeout=10)
        final = metrics(prefill)
        assert metric(final, "troupe:kv_transfer_leases_expired_total") == 1
        assert metric(final, "troupe:kv_transfer_leases_released_total") == 0
    finally:
        prefill.stop()


# ---------------------------------------------------------------------------------------------
# 7. A prefill server on another model file is refused at the handshake.

def altered_model(directory):
    """A copy of the model with one byte of one tensor's quantized data changed."""
    copy = directory / "altered.gguf"
    shutil.copyfile(MODEL, copy)
    tensor = next(t for t in gguf.GGUFReader(MODEL).tensors if t.name == "blk.0.ffn_down.weight")
    assert tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1
    # Q4_1 blocks are 20 bytes (f16 scale, f16 min, 16 bytes of nibbles): byte 10 of block 1000
    # is a pair of 4-bit weights, any value of which is valid.
    offset = int(tensor.data_offset) + 20 * 1000 + 10
    assert offset < int(tensor.data_offset) + int(tensor.n_bytes)
    with open(copy, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x11]))
    return copy


def test_incompatible_prefill_server_is_refused_and_requests_still_succeed(log_dir, tmp_path,
                                                                             reference):
    prompts = SHARED[:2]
    want = reference.chat(prompts)
    prefill, decode = start_pair(log_dir, "mismatch", "tcp", prefill_model=altered_model(tmp_path))
    try:
        assert_texts(http_chat(decode, prompts), want, prompts, "with an incompatible prefill server")
        final = metrics(decode)
        assert metric(final, "troupe:kv_transfer_handshake_failures_total") > 0
        assert metric(final, "troupe:kv_transfers_total", outcome="ok") == 0
        assert metric(final, "troupe:kv_transfer_fallbacks_total") == len(prompts)
        log = decode.read_log()
        assert re.search(r"\[error\].*compatibility hash", log), log[-3000:]
        wait_idle([prefill, decode], timeout=PAIR_LEASE_MS / 1000 + 60)
    finally:
        decode.stop()
        prefill.stop()


# ---------------------------------------------------------------------------------------------
# 8. A prefill server that requires an API key: the decode server presents
#    $TROUPE_PREFILL_API_KEY; without it every prompt falls back to a local prefill.

def test_key_protected_prefill_server(log_dir, reference, monkeypatch):
    prompts = LONG[:1]
    want = reference.chat(prompts)
    prefill = start(log_dir, "keyed-prefill", "--role", "prefill", "--kv-transport", "tcp",
                    "--api-key", "prefill-secret")
    try:
        assert requests.get(prefill.base_url + "/v1/kv/metadata", timeout=30).status_code == 401
        monkeypatch.setenv("TROUPE_PREFILL_API_KEY", "prefill-secret")
        keyed = start(log_dir, "keyed-decode", "--role", "decode", "--kv-transport", "tcp",
                      "--prefill-url", f"127.0.0.1:{prefill.port}")
        monkeypatch.delenv("TROUPE_PREFILL_API_KEY")
        keyless = start(log_dir, "keyless-decode", "--role", "decode", "--kv-transport", "tcp",
                        "--prefill-url", f"127.0.0.1:{prefill.port}")
        try:
            assert http_chat(keyed, prompts) == want
            keyed_metrics = metrics(keyed)
            assert metric(keyed_metrics, "troupe:kv_transfers_total", outcome="ok") == 1
            assert metric(keyed_metrics, "troupe:kv_transfer_fallbacks_total") == 0
            assert http_chat(keyless, prompts) == want  # computed locally
            keyless_metrics = metrics(keyless)
            assert metric(keyless_metrics, "troupe:kv_transfers_total", outcome="ok") == 0
            assert metric(keyless_metrics, "troupe:kv_transfer_fallbacks_total") == 1
        finally:
            keyed.stop()
            keyless.stop()
    finally:
        prefill.stop()


# ---------------------------------------------------------------------------------------------
# 9. A q8_0 KV cache (issue 38): two q8_0 servers move q8_0 blocks and answer as a combined
#    q8_0 server does; a q8_0 decode server never pulls an f16 server's bytes (the layout and
#    the compatibility hash carry the dtype): it prefills locally and says why.

Q8_KV = ("--kv-cache-dtype", "q8_0")


def q8_reference_chats(log_dir, name, prompts):
    """What a combined q8_0 server answers (the ground truth for a q8_0 decode server)."""
    combined = start(log_dir, name, *Q8_KV)
    try:
        return Reference(combined).chat(prompts)
    finally:
        combined.stop()


def test_q8_0_kv_moves_between_q8_0_servers(log_dir):
    prompts = SHARED[:3]
    assert all(is_long(p) for p in prompts)
    want = q8_reference_chats(log_dir, "q8-reference", prompts)
    prefill, decode = start_pair(log_dir, "q8", "tcp", prefill_args=Q8_KV, decode_args=Q8_KV)
    try:
        assert_texts(http_chat(decode, prompts), want, prompts, "q8_0 KV moved over tcp")
        final = metrics(decode)
        assert metric(final, "troupe:kv_transfers_total", outcome="ok") == len(prompts)
        assert metric(final, "troupe:kv_transfer_fallbacks_total") == 0
        wait_idle([prefill, decode], timeout=PAIR_LEASE_MS / 1000 + 60)
    finally:
        decode.stop()
        prefill.stop()


def test_a_kv_dtype_mismatch_is_refused_and_requests_still_succeed(log_dir):
    prompts = SHARED[:2]
    want = q8_reference_chats(log_dir, "q8-mismatch-reference", prompts)
    prefill, decode = start_pair(log_dir, "dtype-mismatch", "tcp", decode_args=Q8_KV)
    try:
        assert_texts(http_chat(decode, prompts), want, prompts, "f16 prefill, q8_0 decode")
        final = metrics(decode)
        assert metric(final, "troupe:kv_transfer_handshake_failures_total") > 0
        assert metric(final, "troupe:kv_transfers_total", outcome="ok") == 0
        assert metric(final, "troupe:kv_transfer_fallbacks_total") == len(prompts)
        log = decode.read_log()
        assert re.search(r"\[error\].*compatibility hash.*KV dtype", log), log[-3000:]
        wait_idle([prefill, decode], timeout=PAIR_LEASE_MS / 1000 + 60)
    finally:
        decode.stop()
        prefill.stop()
