"""`logit_bias` (OpenAI) and `min_tokens` (vLLM) end to end on the real model, with the official
`openai` client. Behaviour only: which tokens come out, never how fast."""
import openai
import pytest
import requests

MODEL_ID = "SmolLM2-135M-Instruct"
PROMPT = "The capital of France is"


def single_token_id(server, text):
    """The id of `text` when the tokenizer makes it one token (checked by a round trip)."""
    r = requests.post(server.base_url + "/tokenize",
                      json={"prompt": text, "add_special_tokens": False}, timeout=10)
    tokens = r.json()["tokens"]
    assert len(tokens) == 1, f"{text!r} is {len(tokens)} tokens: {tokens}"
    back = requests.post(server.base_url + "/detokenize", json={"tokens": tokens}, timeout=10)
    assert back.json()["prompt"] == text
    return tokens[0]


def first_token(client, **kwargs):
    r = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=1, temperature=0,
                                  **kwargs)
    return r.choices[0].text


def test_logit_bias_bans_the_greedy_first_token(server, client):
    greedy = first_token(client)
    banned = single_token_id(server, greedy)
    other = first_token(client, logit_bias={str(banned): -100})
    assert other != greedy
    # A bias on some unrelated token leaves greedy decoding where it was.
    unrelated = single_token_id(server, " banana")
    assert first_token(client, logit_bias={str(unrelated): -100}) == greedy


def test_logit_bias_forces_a_token(server, client):
    forced = single_token_id(server, " banana")
    r = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=3, temperature=0.8,
                                  seed=5, logit_bias={str(forced): 100})
    assert r.choices[0].text == " banana" * 3


def test_chat_logit_bias_applies_too(server, client):
    base = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=1,
        temperature=0)
    greedy = base.choices[0].message.content
    banned = single_token_id(server, greedy)
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=1,
        temperature=0, logit_bias={str(banned): -100})
    assert r.choices[0].message.content != greedy


def test_min_tokens_holds_back_the_end_of_generation(client):
    messages = [{"role": "user", "content": "Reply with just the word yes."}]
    short = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=64,
                                           temperature=0)
    # The premise: without min_tokens this prompt ends early on EOS.
    assert short.choices[0].finish_reason == "stop"
    assert short.usage.completion_tokens < 20
    long = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=64,
                                          temperature=0, extra_body={"min_tokens": 20})
    assert long.usage.completion_tokens >= 20
    # Greedy either way: the forced continuation starts with the same text.
    assert long.choices[0].message.content.startswith(short.choices[0].message.content)


def test_include_stop_str_in_output_keeps_the_stop_string(client):
    greedy = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=24,
                                       temperature=0).choices[0].text
    words = greedy.split()
    assert len(words) >= 4, greedy
    stop = " " + words[2]   # a stop string that occurs in the greedy text, not at its start
    cut = greedy[:greedy.index(stop)]
    plain = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=24,
                                      temperature=0, stop=[stop])
    assert plain.choices[0].text == cut
    assert plain.choices[0].finish_reason == "stop"
    kept = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=24,
                                     temperature=0, stop=[stop],
                                     extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == cut + stop
    assert kept.choices[0].finish_reason == "stop"


def test_invalid_values_are_400_naming_the_field(client):
    cases = [
        (dict(logit_bias={"5": 101}), "logit_bias"),
        (dict(logit_bias={"not-a-token": 1}), "logit_bias"),
        (dict(max_tokens=5, extra_body={"min_tokens": 6}), "min_tokens"),
        (dict(extra_body={"min_tokens": -1}), "min_tokens"),
    ]
    for kwargs, param in cases:
        with pytest.raises(openai.BadRequestError) as bad:
            client.completions.create(model=MODEL_ID, prompt=PROMPT, **kwargs)
        assert bad.value.body["param"] == param, kwargs
