"""Every request ends in exactly one access-log line and one count in
troupe:request_success_total{finished_reason} or troupe:request_failure_total, whatever ends it
(issue 14, defect 2) — above all streams whose client goes away mid-generation, which used to
leave no trace at all.

Each test runs its own server so that its counters and its log hold only its own requests. Waits
poll /metrics for an event (idle, a counter reaching its value); nothing asserts on speed."""
import asyncio
import json
import re
import socket
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests
from websockets.asyncio.client import connect

from conftest import wait_until

MODEL_ID = "SmolLM2-135M-Instruct"
NUM_STREAMS = 10
WAIT_S = 120  # generous: the CPU backend on a shared machine is slow


def metric_samples(server):
    """{(name, finished_reason or None): value} for the troupe:* samples of /metrics."""
    samples = {}
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        m = re.match(r"^(troupe:[a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if not m:
            continue
        reason = re.search(r'finished_reason="([a-z_]+)"', m.group(2) or "")
        samples[(m.group(1), reason.group(1) if reason else None)] = float(m.group(3))
    return samples


def counts(server):
    s = metric_samples(server)
    return {
        "stop": s[("troupe:request_success_total", "stop")],
        "length": s[("troupe:request_success_total", "length")],
        "cancelled": s[("troupe:request_success_total", "cancelled")],
        "failed": s[("troupe:request_failure_total", None)],
    }


def wait_idle(server):
    def idle():
        s = metric_samples(server)
        return (s[("troupe:num_requests_running", None)] == 0
                and s[("troupe:num_requests_waiting", None)] == 0)
    wait_until(idle, "the server to be idle")


def wait_counts(server, expected):
    """Waits until the counters reach `expected` (the sinks may hear the end a moment after the
    scheduler reports idle), then checks that none went past it."""
    wait_until(lambda: all(counts(server)[k] >= v for k, v in expected.items()),
               f"counters {expected} (now {counts(server)})")
    assert counts(server) == expected


def access_lines(server, request_id):
    """The access-log lines of one request (its response or chat id)."""
    return [line for line in server.read_log().splitlines() if f" id={request_id} " in line]


def open_and_drop(client, index):
    """A stream dropped by its client after a few tokens; returns its response id."""
    stream = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": f"Write a long essay, part {index}."}],
        stream=True, max_tokens=2000, temperature=0, extra_body={"ignore_eos": True})
    response_id = None
    num_content_chunks = 0
    for chunk in stream:
        response_id = chunk.id
        if chunk.choices and chunk.choices[0].delta.content:
            num_content_chunks += 1
        if num_content_chunks >= 3:
            break
    stream.close()  # closes the connection mid-generation
    return response_id


def test_streams_dropped_mid_generation_are_counted_and_logged_once(start_server):
    server = start_server().wait_ready()
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    before = counts(server)
    with ThreadPoolExecutor(NUM_STREAMS) as pool:
        ids = list(pool.map(lambda i: open_and_drop(client, i), range(NUM_STREAMS)))
    assert len(set(ids)) == NUM_STREAMS
    wait_idle(server)
    wait_counts(server, {**before, "cancelled": before["cancelled"] + NUM_STREAMS})
    for response_id in ids:
        lines = access_lines(server, response_id)
        assert len(lines) == 1, (response_id, lines)
        assert "finish=cancelled" in lines[0] and "client_gone" in lines[0], lines[0]
    assert sum("finish=cancelled" in line for line in server.read_log().splitlines()) == NUM_STREAMS


def test_websocket_chats_are_counted_and_logged_once(start_server):
    """A chat that finishes, one cancelled by a message, one cut off by its socket closing and
    one refused as invalid: four access lines, four counts."""
    server = start_server().wait_ready()
    before = counts(server)

    async def run():
        async with connect(f"ws://127.0.0.1:{server.port}/v1/chat/ws", open_timeout=60) as ws:
            def chat(chat_id, **params):
                body = {"type": "chat", "id": chat_id, "temperature": 0,
                        "messages": [{"role": "user", "content": "Write a long essay."}]}
                body.update(params)
                return json.dumps(body)
            await ws.send(chat("done", max_tokens=3, ignore_eos=True))
            await ws.send(chat("cancel-me", max_tokens=2000, ignore_eos=True))
            await ws.send(chat("bad", max_tokens=-5))
            ended = {}
            cancel_sent = False
            while len(ended) < 3:
                frame = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
                if frame["type"] in ("done", "error"):
                    ended[frame["id"]] = frame
                elif frame["id"] == "cancel-me" and not cancel_sent:
                    cancel_sent = True
                    await ws.send(json.dumps({"type": "cancel", "id": "cancel-me"}))
            assert ended["done"]["finish_reason"] == "length"
            assert ended["cancel-me"]["finish_reason"] == "cancelled"
            assert ended["bad"]["type"] == "error"
        async with connect(f"ws://127.0.0.1:{server.port}/v1/chat/ws", open_timeout=60) as ws:
            await ws.send(json.dumps({"type": "chat", "id": "vanish", "max_tokens": 2000,
                                      "ignore_eos": True,
                                      "messages": [{"role": "user", "content": "Write an essay."}]}))
            frame = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            assert frame["type"] == "delta", frame
        # the socket closed with "vanish" mid-generation

    asyncio.run(run())
    wait_idle(server)
    wait_counts(server, {**before, "length": before["length"] + 1,
                         "cancelled": before["cancelled"] + 2, "failed": before["failed"] + 1})
    for chat_id, finish in (("done", "length"), ("cancel-me", "cancelled"), ("vanish", "cancelled"),
                            ("bad", "invalid_value")):
        lines = access_lines(server, chat_id)
        assert len(lines) == 1, (chat_id, lines)
        assert " ws /v1/chat/ws " in lines[0], lines[0]
        assert f"finish={finish}" in lines[0], lines[0]


def drop_non_streamed_mid_generation(server):
    """A non-streamed request whose client leaves once the server has generated for it."""
    body = json.dumps({"model": MODEL_ID, "prompt": "Write an essay.", "max_tokens": 2000,
                       "ignore_eos": True}).encode()
    generated_before = metric_samples(server)[("troupe:generation_tokens_total", None)]
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_until(lambda: metric_samples(server)[("troupe:generation_tokens_total", None)]
                   > generated_before + 2, "tokens generated for the non-streamed request")


def test_every_http_ending_is_counted_once(start_server):
    """Non-stream, n > 2, an invalid request, a batch (one good item, one bad) and a
    non-streamed request whose client leaves: one count each (per item for the batch)."""
    server = start_server().wait_ready()
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    before = counts(server)
    r = client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=2, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    multi = client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=2, n=2,
                                      extra_body={"ignore_eos": True})
    assert [c.finish_reason for c in multi.choices] == ["length", "length"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=-3)
    lines = [{"custom_id": "good", "method": "POST", "url": "/v1/completions",
              "body": {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 2, "ignore_eos": True}},
             {"custom_id": "bad", "method": "POST", "url": "/v1/completions",
              "body": {"model": MODEL_ID, "prompt": "Hi", "max_tokens": "two"}}]
    batch = requests.post(server.base_url + "/v1/batch", timeout=WAIT_S,
                          data="\n".join(json.dumps(x) for x in lines),
                          headers={"Content-Type": "application/jsonl"})
    assert batch.status_code == 200
    drop_non_streamed_mid_generation(server)
    wait_idle(server)
    wait_counts(server, {**before, "length": before["length"] + 3,
                         "cancelled": before["cancelled"] + 1, "failed": before["failed"] + 2})
    for request_id in (r.id, multi.id):
        assert len(access_lines(server, request_id)) == 1
    for custom_id in ("good", "bad"):
        lines = [line for line in server.read_log().splitlines() if f"custom_id={custom_id} " in line]
        assert len(lines) == 1, lines
