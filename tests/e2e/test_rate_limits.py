"""Per-key rate limits (issue 41) against a real server: requests and tokens per minute from the
keys file's columns, answered as OpenAI answers (429, x-ratelimit-* headers, Retry-After, error
type "requests"/"tokens", code "rate_limit_exceeded"), one budget across HTTP, the WebSocket chat
and batch items, other keys untouched, and `troupe admin keys` showing the use."""
import json

import httpx
import openai
import pytest
from websockets.sync.client import connect

from conftest import wait_until
from test_admin import admin_cli, start_with_admin
from test_batches import line, chat_body, upload, wait_for_batch, lines_of

MODEL_ID = "SmolLM2-135M-Instruct"
KEYS = {"tight": "sk-rl-tight-1", "tok": "sk-rl-tok-2", "free": "sk-rl-free-3",
        "items": "sk-rl-items-4", "durable": "sk-rl-durable-5"}


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    from conftest import Server
    directory = tmp_path_factory.mktemp("limits")
    keys = directory / "keys"
    keys.write_text(f"tight:{KEYS['tight']} rpm=3\n"
                    f"tok:{KEYS['tok']} tpm=40\n"
                    f"free:{KEYS['free']}\n"
                    f"items:{KEYS['items']} rpm=2\n"
                    f"durable:{KEYS['durable']} rpm=60\n")
    sock = directory / "admin.sock"
    server = Server("--set", f"api.keys_file={keys}", "--admin-socket", str(sock),
                    log_path=directory / "troupe.log").wait_ready()
    server.admin_socket = sock
    yield server
    server.stop()


def post(server, key, path="/v1/completions", **body):
    body = {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1, "temperature": 0, **body}
    return httpx.post(server.base_url + path, json=body, timeout=120,
                      headers={"Authorization": f"Bearer {key}"})


def ws_chat(server, key, chat_id):
    """One chat over a new WebSocket; its last frame (done or error)."""
    with connect(f"ws://127.0.0.1:{server.port}/v1/chat/ws", open_timeout=30,
                 additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps({"type": "chat", "id": chat_id, "max_tokens": 1, "temperature": 0,
                            "messages": [{"role": "user", "content": "Hi"}]}))
        while True:
            frame = json.loads(ws.recv(timeout=120))
            if frame["type"] in ("done", "error"):
                return frame


def test_requests_per_minute_span_http_and_the_websocket(limited):
    first = post(limited, KEYS["tight"])
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-requests"] == "3"
    assert first.headers["x-ratelimit-remaining-requests"] == "2"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in first.headers  # no token limit on this key

    streamed = httpx.post(limited.base_url + "/v1/chat/completions", timeout=120,
                          headers={"Authorization": f"Bearer {KEYS['tight']}"},
                          json={"model": MODEL_ID, "stream": True, "max_tokens": 1,
                                "messages": [{"role": "user", "content": "Hi"}]})
    assert streamed.status_code == 200
    assert streamed.headers["x-ratelimit-remaining-requests"] == "1"  # on a stream's head too
    assert ws_chat(limited, KEYS["tight"], "w1")["type"] == "done"  # the third, over the socket

    refused = post(limited, KEYS["tight"])
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded", error
    assert "tight" in error["message"] and KEYS["tight"] not in error["message"]
    frame = ws_chat(limited, KEYS["tight"], "w2")
    assert frame["type"] == "error" and frame["code"] == "rate_limit_exceeded", frame

    # The official client sees OpenAI's RateLimitError; another key is not disturbed.
    client = openai.OpenAI(base_url=limited.base_url + "/v1", api_key=KEYS["tight"], max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=1)
    for _ in range(5):
        assert post(limited, KEYS["free"]).status_code == 200


def test_tokens_per_minute_are_spent_as_requests_end(limited):
    first = post(limited, KEYS["tok"], max_tokens=48, ignore_eos=True)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-tokens"] == "40"
    assert first.headers["x-ratelimit-remaining-tokens"] == "40"  # spent when it ends
    refused = post(limited, KEYS["tok"])
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["type"] == "tokens"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    # ~10 tokens over 40 per minute: about 15 s until the next one is admitted.
    assert 5 <= int(refused.headers["retry-after"]) <= 30, refused.headers


def test_batch_items_count_one_request_each(limited):
    items = [{"custom_id": f"i{i}", "url": "/v1/completions",
              "body": {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1}} for i in range(3)]
    r = httpx.post(limited.base_url + "/v1/batch", json={"requests": items}, timeout=120,
                   headers={"Authorization": f"Bearer {KEYS['items']}"})
    assert r.status_code == 200, r.text
    statuses = sorted(d["response"]["status_code"] if d["response"] else d["error"]["code"]
                      for d in r.json()["data"])
    codes = [d["response"]["body"]["error"]["code"] for d in r.json()["data"]
             if d["response"] and d["response"]["status_code"] == 429]
    assert statuses == [200, 200, 429], r.json()
    assert codes == ["rate_limit_exceeded"]


def test_a_durable_batch_waits_for_its_key_instead_of_failing(limited):
    """63 items on a key of 60 a minute: the last three wait for the bucket (a second each) and
    the batch completes with no failure; the waits are not refusals anyone saw."""
    client = openai.OpenAI(base_url=limited.base_url + "/v1", api_key=KEYS["durable"], max_retries=0)
    lines = [line(f"d{i}", "/v1/chat/completions", {**chat_body("Hi", max_tokens=1), "model": MODEL_ID})
             for i in range(63)]
    batch = client.batches.create(input_file_id=upload(client, lines).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_for_batch(client, batch.id, timeout=300)
    assert done.status == "completed", done
    assert done.request_counts.completed == 63 and done.request_counts.failed == 0
    assert len(lines_of(client, done.output_file_id)) == 63

    r = admin_cli(limited.admin_socket, "--json", "keys")
    assert r.returncode == 0, r.stderr
    keys = {k["name"]: k for k in json.loads(r.stdout)["keys"]}
    assert keys["durable"]["requests"] == 63 and keys["durable"]["refused"] == 0, keys["durable"]
    assert keys["tight"]["rpm"] == 3, keys["tight"]
    assert keys["free"]["rpm"] == 0
    metrics = httpx.get(limited.base_url + "/metrics", timeout=30,
                        headers={"Authorization": f"Bearer {KEYS['free']}"}).text
    durable = [line for line in metrics.splitlines()
               if line.startswith("troupe:api_key_requests_total{") and 'key="durable"' in line]
    assert durable and durable[0].endswith(" 63"), durable
    assert any(line.startswith("troupe:api_key_rate_limit_remaining{") and 'key="tight"' in line
               and 'limit="requests"' in line for line in metrics.splitlines())
    table = admin_cli(limited.admin_socket, "keys")
    assert table.returncode == 0 and "durable" in table.stdout and "/60" in table.stdout, table.stdout
    for secret in KEYS.values():
        assert secret not in r.stdout + table.stdout + limited.read_log()
