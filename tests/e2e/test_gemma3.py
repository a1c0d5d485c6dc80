"""Gemma 3 270M Q4_K_M served end to end (issue 36): `troupe serve --model` on the second real
model family, driven by the official `openai` client. Greedy completions and Gemma-format chats
through HTTP equal llama.cpp's reference tokens (tests/reference/gemma3_greedy.json, up to the
first end-of-generation token, where the server stops), streaming equals non-streaming, and
concurrent requests equal sequential ones. scripts/test fetches the model; elsewhere these skip
unless models/gemma-3-270m-q4_k_m.gguf (or $TROUPE_GEMMA3_MODEL) exists."""
import concurrent.futures
import json
import os
import pathlib
import time

import openai
import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMMA3 = pathlib.Path(os.environ.get("TROUPE_GEMMA3_MODEL",
                                     ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
REFERENCE = json.loads((ROOT / "tests" / "reference" / "gemma3_greedy.json").read_text())
MODEL_ID = "gemma-3-270m"

pytestmark = pytest.mark.skipif(not GEMMA3.exists(),
                                reason=f"no {GEMMA3} (TROUPE_MODELS=gemma3-270m ./scripts/setup)")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    from conftest import Server
    server = Server("--model", str(GEMMA3),
                    log_path=tmp_path_factory.mktemp("gemma3") / "troupe.log").wait_ready()
    yield server
    server.stop()


@pytest.fixture
def client(gemma):
    return openai.OpenAI(base_url=gemma.base_url + "/v1", api_key="unused", max_retries=0)


def expected_text(gemma, prompt):
    """llama.cpp's greedy tokens up to the first end-of-generation id, as text."""
    eog = set(REFERENCE["info"]["eog_ids"])
    ids = []
    for token in prompt["generated_ids"]:
        if token in eog:
            break
        ids.append(token)
    r = requests.post(gemma.base_url + "/detokenize", json={"tokens": ids}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["prompt"], len(ids)


def raw_prompts():
    return [p for p in REFERENCE["prompts"] if p["kind"] == "raw"]


def chat_prompts():
    return [p for p in REFERENCE["prompts"] if p["kind"] == "chat"]


def test_model_card_names_gemma3(gemma):
    card = requests.get(gemma.base_url + "/v1/models", timeout=30).json()["data"][0]
    assert card["id"] == MODEL_ID
    assert card["meta"]["architecture"] == "gemma3"
    assert card["meta"]["vocab_size"] == 262144


@pytest.mark.parametrize("index", range(len(raw_prompts())))
def test_raw_completion_equals_llama_cpp(gemma, client, index):
    prompt = raw_prompts()[index]
    text, count = expected_text(gemma, prompt)
    n = REFERENCE["n_generated"]
    answer = client.completions.create(model=MODEL_ID, prompt=prompt["text"], max_tokens=n,
                                       temperature=0)
    assert answer.usage.prompt_tokens == len(prompt["prompt_ids"])
    assert answer.choices[0].text == text
    assert answer.choices[0].finish_reason == ("length" if count == n else "stop")


def test_chats_equal_llama_cpp_streamed_and_concurrent(gemma, client):
    """Every chat prompt through /v1/chat/completions (Gemma's format from the server's own
    template), four at a time, then one streamed: llama.cpp's tokens up to its first
    end-of-generation token."""
    n = REFERENCE["n_generated"]
    prompts = chat_prompts()

    def ask(prompt):
        answer = client.chat.completions.create(model=MODEL_ID, messages=prompt["messages"],
                                                max_tokens=n, temperature=0)
        return answer.usage.prompt_tokens, answer.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, prompts))
    for prompt, (prompt_tokens, content) in zip(prompts, answers):
        assert prompt_tokens == len(prompt["prompt_ids"]), prompt["messages"]
        assert content == expected_text(gemma, prompt)[0], prompt["messages"]
    stream = client.chat.completions.create(model=MODEL_ID, messages=prompts[-1]["messages"],
                                            max_tokens=n, temperature=0, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed == answers[-1][1]


def refused_at_start(tmp_path, name, *args):
    """Starts a Gemma 3 server that must refuse to start; returns its log."""
    from conftest import Server
    server = Server("--model", str(GEMMA3), "--admin-socket", str(tmp_path / f"{name}.sock"),
                    *args, log_path=tmp_path / f"{name}.log")
    try:
        assert server.process.wait(timeout=120) != 0
        return server.read_log()
    finally:
        server.stop()


def test_kv_events_are_refused_for_a_sliding_window_model(tmp_path):
    """The router's block hashes cannot describe the sliding groups' cached pages: KV events are
    refused for such a model, named."""
    config = tmp_path / "events.json"
    config.write_text(json.dumps({"kv_events": {"enabled": True}}))
    log = refused_at_start(tmp_path, "events", "--config", str(config))
    assert "kv_events.enabled" in log and "sliding-window" in log


def test_disaggregated_prefill_moves_every_kv_groups_pages(gemma, tmp_path):
    """P/D on the sliding-window model over troupe's TCP transport: the prefill server holds each
    KV group's pages (the sliding ones from the window of the next token on), the decode server
    pulls them and answers as the combined server does, for prompts past the 512-token window;
    both end with no KV block in use."""
    from conftest import Server

    def server(name, *args):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"admin": {"enabled": False},
                                      "disagg": {"kv_lease_ms": 3000}}))
        return Server("--model", str(GEMMA3), "--config", str(config), "--kv-transport", "tcp",
                      *args, log_path=tmp_path / f"{name}.log").wait_ready()

    def metric(s, name, labels=""):
        text = requests.get(s.base_url + "/metrics", timeout=30).text
        for line in text.splitlines():
            if line.startswith(name + "{") and labels in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name}{{{labels}}} missing")

    prefill = server("prefill", "--role", "prefill")
    try:
        decode = server("decode", "--role", "decode", "--prefill-url", f"127.0.0.1:{prefill.port}")
        try:
            prompts = [[2] + [50000 + 7 * i + k for i in range(n)] for k, n in ((0, 700), (1, 1100))]
            for ids in prompts:
                body = {"prompt": ids, "max_tokens": 20, "temperature": 0}
                want = requests.post(gemma.base_url + "/v1/completions", json=body, timeout=300)
                got = requests.post(decode.base_url + "/v1/completions", json=body, timeout=300)
                assert want.status_code == 200 and got.status_code == 200, got.text
                assert got.json()["choices"][0]["text"] == want.json()["choices"][0]["text"]
            assert metric(decode, "troupe:kv_transfers_total", 'outcome="ok"') == len(prompts)
            for s in (prefill, decode):
                for _ in range(100):
                    if metric(s, "troupe:kv_blocks_used") == 0:
                        break
                    time.sleep(0.1)
                assert metric(s, "troupe:kv_blocks_used") == 0, s.base_url
        finally:
            decode.stop()
    finally:
        prefill.stop()


def test_prompt_scores_past_the_window_equal_the_engines_own_sampling(gemma):
    """Issue 37 on the sliding-window model and its 262k vocabulary: a 700-token prompt scored by
    echo (max_tokens 0) gives, at position 600 (past the 512-token window), exactly the top
    logprob a request whose prompt stops there samples with."""
    ids = [2] + [100 + i for i in range(700)]
    url = gemma.base_url + "/v1/completions"
    common = {"logprobs": 1, "return_tokens_as_token_ids": True}
    scored = requests.post(url, json={"prompt": ids, "echo": True, "max_tokens": 0, **common},
                           timeout=300)
    assert scored.status_code == 200, scored.text
    logprobs = scored.json()["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"][0] is None and len(logprobs["token_logprobs"]) == len(ids)
    for j in (300, 600):
        sampled = requests.post(url, json={"prompt": ids[:j], "max_tokens": 1, "temperature": 0,
                                           **common}, timeout=300)
        assert sampled.status_code == 200, sampled.text
        assert sampled.json()["choices"][0]["logprobs"]["top_logprobs"][0] == \
            logprobs["top_logprobs"][j], j


def test_embeddings_pool_gemmas_hidden_states(gemma):
    """/v1/embeddings on Gemma 3: 640 values, unit length, one input's vector the same alone and
    beside a long one (1,200 tokens: its KV crosses the window)."""
    url = gemma.base_url + "/v1/embeddings"
    alone = requests.post(url, json={"input": "The cat sat on the mat."}, timeout=300)
    both = requests.post(url, json={"input": ["The cat sat on the mat.", "A long text " * 400]},
                         timeout=300)
    assert alone.status_code == 200 and both.status_code == 200, both.text
    vector = alone.json()["data"][0]["embedding"]
    assert len(vector) == 640
    assert abs(sum(v * v for v in vector) - 1.0) < 1e-5
    assert both.json()["data"][0]["embedding"] == vector


def test_prompts_past_the_window_share_their_start_through_the_prefix_cache(gemma):
    """Prefix caching on the sliding-window model (its sliding layers' window pages cached beside
    the global layers' blocks): a prompt sharing 700 tokens with an earlier one takes them from
    the cache (cached_tokens), a repeated prompt all but its last block, and every greedy answer
    is the one the same prompt got cold."""
    url = gemma.base_url + "/v1/completions"
    base = [2] + [20000 + 3 * i for i in range(900)]  # ids no other test sends

    def ask(ids):
        r = requests.post(url, json={"prompt": ids, "max_tokens": 24, "temperature": 0},
                          timeout=300)
        assert r.status_code == 200, r.text
        body = r.json()
        return body["choices"][0]["text"], body["usage"]["prompt_tokens_details"]["cached_tokens"]

    short = base[:700] + [30000 + i for i in range(20)]
    long = base + [40000 + i for i in range(30)]
    cold_short, cached = ask(short)
    assert cached == 0
    first_long, cached = ask(long)
    assert cached == 700 // 16 * 16  # the shared start's whole blocks
    again_long, cached = ask(long)
    assert cached == (len(long) - 1) // 16 * 16 and again_long == first_long
    hot_short, cached = ask(short)
    assert cached == (len(short) - 1) // 16 * 16 and hot_short == cold_short
