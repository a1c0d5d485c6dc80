"""Speculative decoding with n-gram drafts, on by default (issue 21), through the real server
and the official openai client: an answer that copies its prompt is drafted and verified, and
the text — whole, streamed, or seeded — is exactly what a server without drafts answers.
Counters as vLLM names them on /metrics."""
import json

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server

MODEL_ID = "SmolLM2-135M-Instruct"

COPY = ("Repeat this text exactly: The keeper climbed the stairs each evening, cleaned the "
        "glass, and wrote the weather in a small book.")
COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens")


def spec_counters(server):
    text = requests.get(server.base_url + "/metrics", timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return {name: families[name].samples[0].value for name in COUNTERS}


def ask(server, stream=False, **params):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    request = dict(model=MODEL_ID, messages=[{"role": "user", "content": COPY}], max_tokens=48,
                   temperature=0)
    request.update(params)
    if not stream:
        return [c.message.content for c in client.chat.completions.create(**request).choices]
    parts = {}
    for chunk in client.chat.completions.create(stream=True, **request):
        for choice in chunk.choices:
            parts[choice.index] = parts.get(choice.index, "") + (choice.delta.content or "")
    return [parts[i] for i in sorted(parts)]


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plain")
    config = directory / "plain.json"
    config.write_text(json.dumps({"speculative": {"method": "none"}}))
    s = Server("--config", str(config), log_path=directory / "troupe.log").wait_ready()
    yield s
    s.stop()


def test_drafts_are_on_by_default_and_change_no_text(server, plain_server):
    before = spec_counters(server)
    greedy = ask(server)
    after = spec_counters(server)
    assert greedy == ask(plain_server)
    assert "keeper climbed the stairs" in greedy[0]
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    drafted = after["vllm:spec_decode_num_draft_tokens"] - before["vllm:spec_decode_num_draft_tokens"]
    accepted = (after["vllm:spec_decode_num_accepted_tokens"]
                - before["vllm:spec_decode_num_accepted_tokens"])
    assert drafts > 0 and 0 < accepted <= drafted
    # The server without drafts never drafts.
    assert spec_counters(plain_server)["vllm:spec_decode_num_drafts"] == 0


def test_streamed_and_seeded_answers_match_the_plain_server(server, plain_server):
    assert ask(server, stream=True) == ask(plain_server, stream=True) == ask(plain_server)
    seeded = dict(temperature=0.8, seed=11, n=2)
    assert ask(server, **seeded) == ask(plain_server, **seeded)
    assert ask(server, stream=True, **seeded) == ask(plain_server, **seeded)
