"""The OpenAI-compatible API end to end with the official `openai` client (issue 6)."""
import json
import re
import socket
import time

import openai
import pytest
import requests

MODEL_ID = "SmolLM2-135M-Instruct"


def chat(client, content="Say hello.", **kwargs):
    return client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": content}], **kwargs)


def test_chat_completion(client):
    r = chat(client, max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == MODEL_ID
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_with_usage(client):
    chunks = list(chat(client, max_tokens=8, temperature=0, stream=True,
                       stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 8
    whole = chat(client, max_tokens=8, temperature=0)
    assert text == whole.choices[0].message.content  # greedy: same text streamed or not


def test_completion_and_stream(client):
    r = client.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                  max_tokens=6, temperature=0, logprobs=2)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].text
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt="The capital of France is", max_tokens=6, temperature=0,
        stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_stop_string(client):
    r = client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=20,
                                  temperature=0, stop=[" 7"])
    assert " 7" not in r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


def test_seed_reproducibility(client):
    a = chat(client, "Tell me a story.", max_tokens=16, temperature=1.0, seed=1234)
    b = chat(client, "Tell me a story.", max_tokens=16, temperature=1.0, seed=1234)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_chat_logprobs(client):
    r = chat(client, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_completion_top_logprobs_keys_are_unique(server):
    """Issue 14: tokens holding parts of a UTF-8 character all became U+FFFD, so one position's
    top_logprobs object repeated keys (a JSON client keeps one and silently loses the rest).
    Such tokens are keyed "bytes:\\xNN..." as OpenAI's legacy completions write them."""
    class Pairs(dict):
        def __init__(self, pairs):
            super().__init__(pairs)
            self.pairs = pairs

    r = requests.post(server.base_url + "/v1/completions", timeout=120, json={
        "model": MODEL_ID, "prompt": "日本の首都は", "max_tokens": 6, "temperature": 0,
        "logprobs": 20})
    assert r.status_code == 200, r.text
    logprobs = json.loads(r.text, object_pairs_hook=Pairs)["choices"][0]["logprobs"]
    keys_seen = []
    for top in logprobs["top_logprobs"]:
        keys = [key for key, _ in top.pairs]
        assert len(keys) == len(set(keys)) == 20, keys
        keys_seen += keys
    # the prompt makes the model weigh partial characters: the case above is exercised
    assert any(key.startswith("bytes:\\x") for key in keys_seen)


def test_return_tokens_as_token_ids(server, client):
    """vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N", the chosen tokens and
    the alternatives alike, and those ids are the completion (they detokenize to its text)."""
    r = client.completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=8,
                                  temperature=0, logprobs=3,
                                  extra_body={"return_tokens_as_token_ids": True})
    tokens = r.choices[0].logprobs.tokens
    assert len(tokens) == r.usage.completion_tokens
    assert all(re.fullmatch(r"token_id:\d+", t) for t in tokens), tokens
    for top in r.choices[0].logprobs.top_logprobs:
        assert len(top) == 3 and all(re.fullmatch(r"token_id:\d+", k) for k in top), top
    ids = [int(t.split(":")[1]) for t in tokens]
    text = requests.post(server.base_url + "/detokenize", json={"tokens": ids}, timeout=60).json()
    assert text["prompt"] == r.choices[0].text
    # Greedy: the chosen token is the best alternative.
    assert all(max(top, key=top.get) == t for t, top in zip(tokens, r.choices[0].logprobs.top_logprobs))
    plain = client.completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=8,
                                      temperature=0, logprobs=3)
    assert plain.choices[0].text == r.choices[0].text
    assert not any(t.startswith("token_id:") for t in plain.choices[0].logprobs.tokens)
    c = chat(client, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2,
             extra_body={"return_tokens_as_token_ids": True})
    content = c.choices[0].logprobs.content
    assert content and all(re.fullmatch(r"token_id:\d+", t.token) for t in content)
    assert all(re.fullmatch(r"token_id:\d+", a.token) for t in content for a in t.top_logprobs)
    assert b"".join(bytes(t.bytes) for t in content).decode() == c.choices[0].message.content


def test_errors_map_to_client_exceptions(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as bad:
        chat(client, temperature=5)
    assert bad.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):
        chat(client, n=17)  # above api.max_n
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model=MODEL_ID, prompt="hello " * 9000, max_tokens=4)
    assert "context" in str(too_long.value) or too_long.value.body["code"] == "context_length_exceeded"


def metric(server, name):
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def test_metrics_names(server, client):
    chat(client, max_tokens=2)
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "troupe:kv_blocks_used", "troupe:time_to_first_token_seconds_bucket",
                 "troupe:inter_token_latency_seconds_bucket", "troupe:e2e_request_latency_seconds_count",
                 "troupe:prompt_tokens_total", "troupe:generation_tokens_total"):
        assert name in text, name


def step_loop_account(server):
    """troupe:step_loop_* from /metrics in one scrape: (wall s, {part: s}, {token kind: n})."""
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    wall = float(re.search(r"^troupe:step_loop_wall_seconds_total\{[^}]*\} (\S+)$", text, re.M).group(1))
    parts = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^troupe:step_loop_seconds_total\{[^}]*part="(\w+)"\} (\S+)$', text, re.M)}
    tokens = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^troupe:step_loop_tokens_total\{[^}]*kind="(\w+)"\} (\S+)$', text, re.M)}
    return wall, parts, tokens


def test_the_step_loop_accounts_for_its_wall_time(server, client):
    """The step loop's account (where a served run's time goes): a request's decode rows are
    booked as decode, its prompt as prompt tokens, and the parts add up to the wall time."""
    _, parts0, tokens0 = step_loop_account(server)
    r = chat(client, "Count from one to twenty.", max_tokens=8, temperature=0,
             extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 8
    # The snapshot is published after the step's tokens went out: wait for it, not for time.
    deadline = time.time() + 30
    while True:
        wall, parts, tokens = step_loop_account(server)
        if tokens["decode_row"] - tokens0["decode_row"] >= 7 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert tokens["decode_row"] - tokens0["decode_row"] == 7  # the first token came from the prompt
    prompt = tokens["prompt"] - tokens0["prompt"]
    assert 1 <= prompt <= r.usage.prompt_tokens  # less when a prefix was cached
    assert parts["decode_layers"] > parts0["decode_layers"]
    assert parts["prompt_layers"] > parts0["prompt_layers"]
    assert parts["logits"] > parts0["logits"] and parts["sampling"] > parts0["sampling"]
    assert set(parts) == {"idle", "engine", "decode_layers", "prompt_layers", "logits", "sampling",
                          "prompt_outputs", "backend_other", "interrupted"}
    assert sum(parts.values()) == pytest.approx(wall, rel=1e-6)


def test_dropped_streams_free_everything(server):
    body = (b'{"model":"%s","messages":[{"role":"user","content":"Write a long essay."}],'
            b'"stream":true,"max_tokens":2000,"ignore_eos":true}' % MODEL_ID.encode())
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    sockets = []
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        s.sendall(request)
        sockets.append(s)
    for s in sockets[:5]:
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    generated_at_drop = metric(server, "troupe:generation_tokens_total")
    for s in sockets:
        s.close()
    deadline = time.time() + 60
    while time.time() < deadline:
        if (metric(server, "vllm:num_requests_running") == 0
                and metric(server, "vllm:num_requests_waiting") == 0
                and metric(server, "troupe:kv_blocks_used") == 0):
            break
        time.sleep(0.2)
    assert metric(server, "vllm:num_requests_running") == 0
    assert metric(server, "vllm:num_requests_waiting") == 0
    assert metric(server, "troupe:kv_blocks_used") == 0
    # Cancelled, not merely finished by now: after the drop each stream may produce the few
    # tokens of steps already planned, never its 2,000 (50 x 2,000 = 100k had they run on).
    generated_after_drop = metric(server, "troupe:generation_tokens_total") - generated_at_drop
    assert generated_after_drop < 50 * 64, generated_after_drop
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200
