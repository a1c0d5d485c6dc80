"""POST /v1/embeddings end to end (issue 37) with the official `openai` client on the real model,
checked against llama.cpp's vectors (tests/reference/smollm2_embeddings.json: llama-server
--embeddings --pooling mean|last|cls on the same GGUF), plus the extension fields (`pooling`,
`normalize`, `embd_normalize`), token-id inputs, base64, the 400s, embeddings sharing the engine
with a running generation, and /metrics. `requests` where the client cannot say it (extension
fields, error bodies). Nothing waits on time or asserts on speed."""
import base64
import json
import re
import subprocess
import threading

import numpy as np
import openai
import pytest
import requests

from conftest import BINARY, ROOT, skip_unless_prompt_outputs, wait_until

MODEL_ID = "SmolLM2-135M-Instruct"
REFERENCE = json.loads((ROOT / "tests" / "reference" / "smollm2_embeddings.json").read_text())
MEAN = REFERENCE["mean"]  # 20 inputs: token_ids, "normalized" and "raw" vectors
TEXTS = [item["text"] for item in MEAN]
N_EMBD = REFERENCE["info"]["n_embd"]
MIN_COSINE = 0.999
WAIT_S = 120  # generous: the CPU backend on a shared machine is slow


def cosine(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def post(server, body):
    return requests.post(server.base_url + "/v1/embeddings", json=body, timeout=WAIT_S)


def embed(server, inputs, **fields):
    """The response body of a successful request (float vectors unless asked otherwise)."""
    r = post(server, {"input": inputs, **fields})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == MODEL_ID
    assert [d["index"] for d in body["data"]] == list(range(len(body["data"])))
    assert all(d["object"] == "embedding" for d in body["data"])
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]
    return body


def vectors(body):
    return [d["embedding"] for d in body["data"]]


def error_of(r, status=400):
    assert r.status_code == status, r.text
    return r.json()["error"]


@pytest.fixture(scope="module", autouse=True)
def _needs_a_backend_with_prompt_outputs(server):
    skip_unless_prompt_outputs(post(server, {"input": "x"}))


@pytest.fixture(scope="module")
def one_by_one(server):
    """Each reference input alone: (vector, prompt_tokens), default (normalized) output."""
    out = []
    for text in TEXTS:
        body = embed(server, text, encoding_format="float")
        assert len(body["data"]) == 1
        out.append((body["data"][0]["embedding"], body["usage"]["prompt_tokens"]))
    return out


# --- llama.cpp's vectors -------------------------------------------------------------------------

def test_batched_normalized_vectors_match_llama_cpp(client, one_by_one):
    """All 20 reference inputs in one request: each vector is llama.cpp's (cosine), of unit L2
    norm, and the usage counts llama.cpp's tokens."""
    r = client.embeddings.create(model=MODEL_ID, input=TEXTS, encoding_format="float")
    assert len(r.data) == len(MEAN)
    assert r.usage.prompt_tokens == sum(len(item["token_ids"]) for item in MEAN)
    for i, item in enumerate(MEAN):
        ours = r.data[i].embedding
        assert len(ours) == N_EMBD
        assert cosine(ours, item["normalized"]) >= MIN_COSINE, (i, item["text"])
        assert abs(np.linalg.norm(np.asarray(ours, dtype=np.float64)) - 1) <= 1e-5, i


def test_each_input_alone_counts_llama_cpps_tokens(one_by_one):
    for (_, prompt_tokens), item in zip(one_by_one, MEAN):
        assert prompt_tokens == len(item["token_ids"]), item["text"]


def test_batching_does_not_change_a_vector(server, one_by_one):
    """The 20 inputs batched give exactly (bit for bit) the vectors each gives alone."""
    batched = vectors(embed(server, TEXTS, encoding_format="float"))
    for i, (alone, _) in enumerate(one_by_one):
        assert batched[i] == alone, (i, TEXTS[i])
    for (alone, _), item in zip(one_by_one, MEAN):
        assert cosine(alone, item["normalized"]) >= MIN_COSINE, item["text"]


def test_raw_vectors_match_llama_cpp(client):
    """`embd_normalize: -1` (llama.cpp's "none"): the pooled vector itself, as llama.cpp's."""
    r = client.embeddings.create(model=MODEL_ID, input=TEXTS, encoding_format="float",
                                 extra_body={"embd_normalize": -1})
    for i, item in enumerate(MEAN):
        ours = np.asarray(r.data[i].embedding, dtype=np.float64)
        assert cosine(ours, item["raw"]) >= MIN_COSINE, (i, item["text"])
        # raw means not normalized: its norm is llama.cpp's raw norm, not 1
        raw_norm = np.linalg.norm(np.asarray(item["raw"], dtype=np.float64))
        assert abs(np.linalg.norm(ours) - raw_norm) <= 1e-3 * raw_norm, i
        assert abs(raw_norm - 1) > 1e-2, i  # (so the check above tells raw from normalized)


@pytest.mark.parametrize("pooling", ["last", "cls"])
def test_last_and_cls_pooling_match_llama_cpp(server, pooling):
    items = REFERENCE[pooling]
    assert len(items) == 5
    ours = vectors(embed(server, [item["text"] for item in items], pooling=pooling))
    mean = vectors(embed(server, [item["text"] for item in items]))
    for i, item in enumerate(items):
        assert cosine(ours[i], item["normalized"]) >= MIN_COSINE, (pooling, item["text"])
    # (the pooling is applied: a multi-token input's vector is not the mean one)
    multi = [i for i, item in enumerate(items) if len(item["token_ids"]) > 1]
    assert multi and all(cosine(ours[i], mean[i]) < MIN_COSINE for i in multi)


# --- the extension fields ------------------------------------------------------------------------

def test_normalize_field_and_embd_normalize_numbers(server):
    """vLLM's `normalize` (true = Euclidean, false = raw) and llama.cpp's embd_normalize numbers
    (0 max-abs scaled to 32760, 1 taxicab, 2 Euclidean, p > 2 the p-norm) applied to the raw
    vector."""
    text = TEXTS[1]
    raw = np.asarray(vectors(embed(server, text, embd_normalize=-1))[0], dtype=np.float64)
    default = vectors(embed(server, text))[0]
    assert vectors(embed(server, text, normalize=True))[0] == default
    assert vectors(embed(server, text, embd_normalize=2))[0] == default
    assert vectors(embed(server, text, normalize=False))[0] == raw.tolist()
    expected = {
        0: raw * (32760.0 / np.abs(raw).max()),
        1: raw / np.abs(raw).sum(),
        2: raw / np.linalg.norm(raw),
        3: raw / (np.abs(raw) ** 3).sum() ** (1 / 3),
    }
    for norm, want in expected.items():
        got = np.asarray(vectors(embed(server, text, embd_normalize=norm))[0], dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max(),
                                   err_msg=f"embd_normalize {norm}")
    e = error_of(post(server, {"input": text, "normalize": True, "embd_normalize": 2}))
    assert e["param"] == "embd_normalize"


# --- inputs as token ids -------------------------------------------------------------------------

def test_token_id_inputs_give_the_text_inputs_vectors(server):
    """A list of ints is one input, a list of lists a batch: the vectors of the texts whose
    (llama.cpp) token ids they are, exactly."""
    picked = [MEAN[i] for i in (1, 6, 8, 18)]  # plain, ChatML specials, numbers, <|endoftext|>
    by_text = embed(server, [item["text"] for item in picked])
    by_ids = embed(server, [item["token_ids"] for item in picked])
    assert vectors(by_ids) == vectors(by_text)
    assert by_ids["usage"]["prompt_tokens"] == sum(len(item["token_ids"]) for item in picked)
    alone = embed(server, picked[0]["token_ids"])
    assert len(alone["data"]) == 1
    assert vectors(alone)[0] == vectors(by_text)[0]
    assert alone["usage"]["prompt_tokens"] == len(picked[0]["token_ids"])


def test_token_ids_through_the_openai_client(client):
    item = MEAN[2]
    by_ids = client.embeddings.create(model=MODEL_ID, input=[item["token_ids"]],
                                      encoding_format="float")
    by_text = client.embeddings.create(model=MODEL_ID, input=item["text"], encoding_format="float")
    assert by_ids.data[0].embedding == by_text.data[0].embedding


# --- base64 --------------------------------------------------------------------------------------

def test_base64_is_the_float_vectors_little_endian_float32(server, client):
    picked = TEXTS[:3]
    floats = vectors(embed(server, picked, encoding_format="float"))
    packed = vectors(embed(server, picked, encoding_format="base64"))
    for f, b in zip(floats, packed):
        assert isinstance(b, str)
        decoded = np.frombuffer(base64.b64decode(b), dtype="<f4")
        assert decoded.shape == (N_EMBD,)
        # the float text is the shortest round trip of each float32: equal after parsing
        assert np.array_equal(decoded, np.asarray(f, dtype=np.float32))
    # the openai client asks for base64 by default and decodes it itself
    r = client.embeddings.create(model=MODEL_ID, input=picked)
    for f, item in zip(floats, r.data):
        assert np.array_equal(np.asarray(item.embedding, dtype=np.float32),
                              np.asarray(f, dtype=np.float32))


# --- the 400s ------------------------------------------------------------------------------------

def test_empty_inputs_are_400_naming_them(server, client):
    assert error_of(post(server, {"input": ""}))["param"] == "input"
    assert error_of(post(server, {"input": []}))["param"] == "input"
    assert error_of(post(server, {"input": ["a", ""]}))["param"] == "input[1]"
    assert error_of(post(server, {"input": [[1, 2], []]}))["param"] == "input[1]"
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model=MODEL_ID, input="")
    assert bad.value.body["param"] == "input"


def test_unknown_field_is_400_naming_it(server, client):
    e = error_of(post(server, {"input": "hello", "truncate_prompt_tokens": 4}))
    assert e["param"] == "truncate_prompt_tokens" and "truncate_prompt_tokens" in e["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model=MODEL_ID, input="hello", extra_body={"frobnicate": 1})
    assert bad.value.body["param"] == "frobnicate"


def test_too_long_input_in_a_list_is_400_naming_it(server):
    long_text = " ".join(["word"] * 20000)  # well past the model's context
    e = error_of(post(server, {"input": ["short", long_text, "also short"]}))
    assert e["param"] == "input[1]", e
    e = error_of(post(server, {"input": long_text}))
    assert e["param"] == "input", e
    # the server is fine afterwards
    assert vectors(embed(server, "short"))[0] == vectors(embed(server, ["short"]))[0]


def test_bad_encoding_format_and_pooling_are_400_naming_them(server):
    e = error_of(post(server, {"input": "hello", "encoding_format": "int8"}))
    assert e["param"] == "encoding_format"
    e = error_of(post(server, {"input": "hello", "pooling": "max"}))
    assert e["param"] == "pooling"


def test_wrong_model_is_404(server):
    r = post(server, {"input": "hello", "model": "no-such-model"})
    assert error_of(r, 404)["param"] == "model"


def test_dimensions_is_refused_unless_matryoshka_is_on(server, client):
    e = error_of(post(server, {"input": "hello", "dimensions": 64}))
    assert e["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model=MODEL_ID, input="hello", dimensions=64)
    assert bad.value.body["param"] == "dimensions"


def binary_knows_setting(key):
    out = subprocess.run([str(BINARY), "help", "settings"], capture_output=True, text=True,
                         timeout=60).stdout
    return f"`{key}`" in out


def test_dimensions_with_matryoshka_on_truncates_then_normalizes(start_server):
    if not binary_knows_setting("embeddings.matryoshka"):
        pytest.skip("this troupe binary has no embeddings.matryoshka setting")
    server = start_server("--set", "embeddings.matryoshka=true").wait_ready()
    text = TEXTS[1]
    raw = np.asarray(vectors(embed(server, text, embd_normalize=-1))[0], dtype=np.float64)
    got = np.asarray(vectors(embed(server, text, dimensions=64))[0], dtype=np.float64)
    assert got.shape == (64,)
    np.testing.assert_allclose(got, raw[:64] / np.linalg.norm(raw[:64]), rtol=1e-5, atol=1e-7)
    assert error_of(post(server, {"input": text, "dimensions": N_EMBD + 1}))["param"] \
        == "dimensions"
    assert vectors(embed(server, text, dimensions=N_EMBD))[0] == vectors(embed(server, text))[0]


# --- sharing the engine with generation ----------------------------------------------------------

def metric(server, name, **labels):
    """The troupe:* sample `name` with `labels` (summed over its other labels)."""
    total = None
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        m = re.match(r"^(troupe:[a-z0-9_]+)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name and all(f'{k}="{v}"' in (m.group(2) or "")
                                             for k, v in labels.items()):
            total = (total or 0.0) + float(m.group(3))
    assert total is not None, f"{name}{labels or ''} missing from /metrics"
    return total


def test_embeddings_while_a_generation_streams(server, client):
    """A greedy stream is running (its first chunk has come) when embeddings are asked for; both
    complete, the vectors are exactly the idle ones, and the stream's text is the idle one."""
    single, batch = TEXTS[3], TEXTS[:6]
    idle_single = vectors(embed(server, single))
    idle_batch = vectors(embed(server, batch))
    params = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Tell me a long story."}],
                  max_tokens=600, temperature=0, extra_body={"ignore_eos": True})
    idle_text = client.chat.completions.create(**params).choices[0].message.content

    stream = client.chat.completions.create(**params, stream=True,
                                            stream_options={"include_usage": True})
    chunks = iter(stream)
    text = ""
    while not text:  # the stream's first content: it is generating now
        chunk = next(chunks)
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert metric(server, "troupe:num_requests_running") >= 1
    busy_single = vectors(embed(server, single))
    busy_batch = vectors(embed(server, batch))
    # still generating after the embeddings came back: the two did overlap
    overlapped = metric(server, "troupe:num_requests_running") >= 1
    finish, usage = None, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert overlapped, "the stream ended before the embeddings came back: nothing overlapped"
    assert busy_single == idle_single
    assert busy_batch == idle_batch
    assert finish == "length" and usage is not None and usage.completion_tokens == 600
    assert text == idle_text


def test_concurrent_embedding_requests_match_the_sequential_ones(server):
    idle = [vectors(embed(server, text))[0] for text in TEXTS[:8]]
    results = [None] * 8

    def one(i):
        results[i] = vectors(embed(server, TEXTS[i]))[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == idle


# --- /metrics ------------------------------------------------------------------------------------

def test_metrics_count_embedding_requests(start_server):
    """/metrics renders with embeddings served; an embeddings request counts once in
    troupe:request_success_total, in troupe:requests_by_kind_total{kind="embedding"} and in the
    end-to-end latency and queue-time histograms, its tokens in troupe:prompt_tokens_total; a
    refused one in troupe:request_failure_total. (Its own server: the counters hold only these.)"""
    server = start_server().wait_ready()
    tokens = sum(len(item["token_ids"]) for item in MEAN[:4])
    assert embed(server, TEXTS[:4])["usage"]["prompt_tokens"] == tokens
    wait_until(lambda: metric(server, "troupe:request_success_total") >= 1
               and metric(server, "troupe:requests_by_kind_total") >= 1,
               "the embeddings request to be counted")
    assert metric(server, "troupe:request_success_total") == 1
    assert metric(server, "troupe:requests_by_kind_total", kind="embedding") == 1
    assert metric(server, "troupe:requests_by_kind_total") == 1  # (no other kind)
    assert metric(server, "troupe:prompt_tokens_total") == tokens
    assert metric(server, "troupe:generation_tokens_total") == 0
    assert metric(server, "troupe:e2e_request_latency_seconds_count") == 1
    assert metric(server, "troupe:request_queue_time_seconds_count") == 1
    failures = metric(server, "troupe:request_failure_total")
    error_of(post(server, {"input": "x", "bogus": 1}))
    wait_until(lambda: metric(server, "troupe:request_failure_total") >= failures + 1,
               "the refused request to be counted")
    assert metric(server, "troupe:request_failure_total") == failures + 1
    assert metric(server, "troupe:request_success_total") == 1
