"""`n` > 1 (several choices per request) end to end with the official `openai` client on the
real model: one engine request of n sequences; a seed makes choice i use seed + i."""
import openai
import requests
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
PROMPT = "Write one short sentence about the sea."


def chat(client, **kwargs):
    return client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": PROMPT}], **kwargs)


def test_n3_seeded_is_reproducible_with_summed_usage(client):
    first = chat(client, n=3, temperature=1, seed=7, max_tokens=12)
    assert [c.index for c in first.choices] == [0, 1, 2]
    for choice in first.choices:
        assert choice.message.role == "assistant"
        assert choice.message.content
        assert choice.finish_reason in ("stop", "length")
    single = chat(client, temperature=1, seed=7, max_tokens=12)
    assert first.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt counted once
    assert first.usage.completion_tokens <= 3 * 12
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    again = chat(client, n=3, temperature=1, seed=7, max_tokens=12)
    assert [c.message.content for c in again.choices] == [c.message.content for c in first.choices]
    assert again.usage.completion_tokens == first.usage.completion_tokens
    # choice 0 samples with seed 7, as the n = 1 request does
    assert first.choices[0].message.content == single.choices[0].message.content
    # seed + i: choice i samples exactly as an n = 1 request with seed 7 + i does
    for i in (1, 2):
        alone = chat(client, temperature=1, seed=7 + i, max_tokens=12)
        assert first.choices[i].message.content == alone.choices[0].message.content, i
    # ... so the choices differ (12 tokens at temperature 1 colliding is vanishingly rare)
    assert len({c.message.content for c in first.choices}) > 1


def test_n3_completions_summed_usage(client):
    r = client.completions.create(model=MODEL_ID, prompt="The sea is", n=3, temperature=1,
                                  seed=7, max_tokens=6)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert 3 <= r.usage.completion_tokens <= 3 * 6
    assert all(c.text for c in r.choices)


def test_n2_stream_collects_two_complete_choices(client):
    texts = {0: "", 1: ""}
    finishes = {}
    usage = None
    with chat(client, n=2, temperature=1, seed=3, max_tokens=10, stream=True,
              stream_options={"include_usage": True}) as stream:
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    assert choice.index not in finishes
                    finishes[choice.index] = choice.finish_reason
    assert set(finishes) == {0, 1}
    assert all(texts.values())
    whole = chat(client, n=2, temperature=1, seed=3, max_tokens=10)
    assert [c.message.content for c in whole.choices] == [texts[0], texts[1]]
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_n_out_of_range_is_400_naming_n(client):
    with pytest.raises(openai.BadRequestError) as bad:
        chat(client, n=17)
    assert bad.value.body["param"] == "n"


def test_n2_on_a_batch_item_and_a_websocket_chat_match_the_http_answer(server, client):
    """Every surface runs n choices the same way: a /v1/batch item and a WebSocket chat with
    n = 2 and seed 5 give the choices the HTTP endpoint gives."""
    from ws_chat_client import chat_over_websocket

    http = chat(client, n=2, temperature=1, seed=5, max_tokens=8)
    expected = [c.message.content for c in http.choices]

    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": PROMPT}], "n": 2,
            "temperature": 1, "seed": 5, "max_tokens": 8}
    r = requests.post(server.base_url + "/v1/batch",
                      json={"requests": [{"custom_id": "a", "url": "/v1/chat/completions",
                                          "body": body}]}, timeout=120)
    assert r.status_code == 200, r.text
    item = r.json()["data"][0]
    choices = item["response"]["body"]["choices"]
    assert [c["message"]["content"] for c in choices] == expected

    texts, ends, done = chat_over_websocket(server, body)
    assert set(ends) == {0, 1}
    assert [texts[0], texts[1]] == expected
    assert done["usage"]["completion_tokens"] == http.usage.completion_tokens
