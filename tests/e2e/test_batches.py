"""OpenAI's Batch API on the durable store (issue 40): the official `openai` client uploads an
input file, creates a batch, polls it and downloads its output and error files; the answers equal
the same requests sent one by one (greedy). A bad file fails its batch with OpenAI's errors;
cancel keeps what was answered; the completion window leaves batch_expired lines; each API key
sees only its own batches; and a 2,000-item batch survives five SIGKILLs with every custom_id
answered exactly once and a database that passes PRAGMA integrity_check."""
import json
import os
import random
import sqlite3
import signal
import subprocess
import time

import openai
import pytest
import requests

from conftest import wait_until
from test_admin import admin_cli, start_with_admin

MODEL_ID = "SmolLM2-135M-Instruct"
CHAT_PROMPTS = ["Say hello.", "Name a colour.", "Count to five.", "What is 2+2?",
                "Write a haiku about rain.", "Give me a fruit.", "Spell 'cat'.", "One word: sky?"]


def client_of(server, key="unused"):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)


def line(custom_id, url, body):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def chat_body(prompt, max_tokens=12):
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}


def upload(client, lines):
    return client.files.create(file=("batch.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")


def wait_for_batch(client, batch_id, statuses=("completed", "failed", "expired", "cancelled"), timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        time.sleep(0.1)
    pytest.fail(f"batch {batch_id} still {batch.status} after {timeout} s")


def lines_of(client, file_id):
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).read().decode().splitlines()]


@pytest.fixture
def storage(tmp_path):
    return tmp_path / "storage"


def test_chat_batch_equals_the_requests_one_by_one(start_server, storage):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    lines = [line(f"chat-{i}", "/v1/chat/completions", chat_body(p)) for i, p in enumerate(CHAT_PROMPTS)]
    lines.append(line("bad-body", "/v1/chat/completions", {"messages": [], "max_tokens": 4}))
    input_file = upload(client, lines)
    batch = client.batches.create(input_file_id=input_file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "nightly"})
    assert batch.id.startswith("batch_") and batch.object == "batch"
    assert batch.status in ("validating", "in_progress", "finalizing", "completed")
    assert batch.metadata == {"job": "nightly"} and batch.input_file_id == input_file.id
    done = wait_for_batch(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (9, 8, 1)
    for stamp in ("created_at", "in_progress_at", "finalizing_at", "completed_at"):
        assert getattr(done, stamp) is not None, stamp
    assert done.errors is None
    output = {x["custom_id"]: x for x in lines_of(client, done.output_file_id)}
    assert sorted(output) == sorted(f"chat-{i}" for i in range(len(CHAT_PROMPTS)))
    for i, prompt in enumerate(CHAT_PROMPTS):
        item = output[f"chat-{i}"]
        assert item["error"] is None and item["response"]["status_code"] == 200
        body = item["response"]["body"]
        assert body["object"] == "chat.completion" and body["id"] == item["response"]["request_id"]
        alone = client.chat.completions.create(model=MODEL_ID, **chat_body(prompt))
        assert body["choices"][0]["message"]["content"] == alone.choices[0].message.content, prompt
        assert body["usage"]["completion_tokens"] == alone.usage.completion_tokens
    errors = lines_of(client, done.error_file_id)
    assert [x["custom_id"] for x in errors] == ["bad-body"]
    assert errors[0]["response"]["status_code"] == 400
    assert errors[0]["response"]["body"]["error"]["param"] == "messages"
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    metrics = requests.get(server.base_url + "/metrics", timeout=30).text
    assert 'troupe:batch_items_total{model_name="SmolLM2-135M-Instruct",outcome="succeeded"} 8' in metrics
    assert 'troupe:batch_items_total{model_name="SmolLM2-135M-Instruct",outcome="failed"} 1' in metrics
    assert 'troupe:batches_live{model_name="SmolLM2-135M-Instruct"} 0' in metrics
    # Listed newest first; the client's pager follows `after`.
    second = client.batches.create(input_file_id=input_file.id, endpoint="/v1/chat/completions",
                                   completion_window="24h")
    assert [b.id for b in client.batches.list(limit=1).data] == [second.id]
    assert [b.id for b in client.batches.list(limit=1)] == [second.id, batch.id]
    wait_for_batch(client, second.id)


def test_completions_and_embeddings_batches(start_server, storage):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    prompts = ["The capital of France is", "Once upon a time", "1, 2, 3,"]
    completions = upload(client, [line(f"c{i}", "/v1/completions",
                                       {"prompt": p, "max_tokens": 8, "temperature": 0, "logprobs": 2})
                                  for i, p in enumerate(prompts)])
    inputs = ["The cat sleeps.", ["A cat naps.", "Dogs bark."]]
    embeddings = upload(client, [line(f"e{i}", "/v1/embeddings", {"input": x}) for i, x in enumerate(inputs)])
    b1 = client.batches.create(input_file_id=completions.id, endpoint="/v1/completions", completion_window="24h")
    b2 = client.batches.create(input_file_id=embeddings.id, endpoint="/v1/embeddings", completion_window="24h")
    done = wait_for_batch(client, b1.id)
    assert done.status == "completed" and done.request_counts.completed == 3
    for item in lines_of(client, done.output_file_id):
        prompt = prompts[int(item["custom_id"][1:])]
        alone = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8, temperature=0, logprobs=2)
        choice = item["response"]["body"]["choices"][0]
        assert choice["text"] == alone.choices[0].text
        assert choice["logprobs"]["tokens"] == alone.choices[0].logprobs.tokens
    done = wait_for_batch(client, b2.id)
    if done.status == "failed":  # a backend without embeddings fails the items, never silently
        pytest.skip(f"embeddings: {done}")
    assert done.status == "completed" and done.request_counts.completed == 2, done
    for item in lines_of(client, done.output_file_id):
        x = inputs[int(item["custom_id"][1:])]
        alone = client.embeddings.create(model=MODEL_ID, input=x, encoding_format="float")
        got = [d["embedding"] for d in item["response"]["body"]["data"]]
        assert got == [d.embedding for d in alone.data]


def test_a_bad_file_fails_the_batch_naming_its_lines(start_server, storage):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    lines = [line("a", "/v1/chat/completions", chat_body("hi")),
             "{not json",
             line("b", "/v1/completions", {"prompt": "x"}),
             line("a", "/v1/chat/completions", chat_body("again"))]
    batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    failed = wait_for_batch(client, batch.id)
    assert failed.status == "failed" and failed.failed_at is not None
    problems = [(e.code, e.line, e.param) for e in failed.errors.data]
    assert problems == [("invalid_json", 2, None), ("invalid_value", 3, "url"),
                        ("duplicate_custom_id", 4, "custom_id")], problems
    assert failed.output_file_id is None and failed.request_counts.total == 0
    empty = client.batches.create(input_file_id=upload(client, ["", "  "]).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    assert [e.code for e in wait_for_batch(client, empty.id).errors.data] == ["empty_file"]


def test_create_refuses_what_it_cannot_run_by_name(start_server, storage):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    input_id = upload(client, [line("a", "/v1/chat/completions", chat_body("hi"))]).id
    base = {"input_file_id": input_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    cases = [({"extra": 1}, 400, "extra"), ({"endpoint": "/v1/responses"}, 400, "endpoint"),
             ({"completion_window": "soon"}, 400, "completion_window"),
             ({"completion_window": "8d"}, 400, "completion_window"),
             ({"metadata": {"k": 1}}, 400, "metadata.k"),
             ({"metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
             ({"input_file_id": "file-nope"}, 404, "input_file_id"),
             ({"input_file_id": None}, 400, "input_file_id")]
    for change, status, param in cases:
        r = requests.post(server.base_url + "/v1/batches", json={**base, **change}, timeout=30)
        assert r.status_code == status and r.json()["error"]["param"] == param, (change, r.text)
    r = requests.post(server.base_url + "/v1/batches", data="{", timeout=30)
    assert r.status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError):
        client.batches.cancel("batch_nope")
    r = requests.get(server.base_url + "/v1/batches?limit=0", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "limit"


def test_each_key_sees_only_its_own_batches(start_server, storage, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("blue:sk-batch-blue-1\nred:sk-batch-red-2\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"api": {"keys_file": str(keys)}}))
    server = start_server("--storage-dir", str(storage), "--config", str(config)).wait_ready()
    blue, red = client_of(server, "sk-batch-blue-1"), client_of(server, "sk-batch-red-2")
    input_file = upload(blue, [line("a", "/v1/chat/completions", chat_body("hi", 2))])
    with pytest.raises(openai.NotFoundError):  # red cannot run blue's file
        red.batches.create(input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h")
    batch = blue.batches.create(input_file_id=input_file.id, endpoint="/v1/chat/completions",
                                completion_window="24h")
    done = wait_for_batch(blue, batch.id)
    assert done.status == "completed"
    assert red.batches.list().data == []
    for attempt in (red.batches.retrieve, red.batches.cancel):
        with pytest.raises(openai.NotFoundError):
            attempt(batch.id)
    with pytest.raises(openai.NotFoundError):
        red.files.content(done.output_file_id)
    assert len(lines_of(blue, done.output_file_id)) == 1


def test_cancel_keeps_the_answered_items(start_server, storage, tmp_path):
    sock = tmp_path / "admin.sock"
    server = start_with_admin(start_server, sock, "--storage-dir", str(storage), "--set",
                              "batches.max_in_flight=2")
    client = client_of(server)
    lines = [line(f"long-{i}", "/v1/completions", {"prompt": f"Story {i}:", "max_tokens": 200,
                                                    "temperature": 0, "ignore_eos": True}) for i in range(12)]
    batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/completions",
                                  completion_window="24h")
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 1, "a first answer")
    # `troupe admin batches` shows it running, two items in the engine (batches.max_in_flight).
    shown = admin_cli(sock, "batches")
    assert shown.returncode == 0, shown.stderr
    assert "2 in flight" in shown.stdout and batch.id in shown.stdout and "in_progress" in shown.stdout, shown.stdout
    as_json = json.loads(admin_cli(sock, "--json", "batches").stdout)
    assert as_json["batches"][0]["id"] == batch.id and as_json["items"]["in_flight"] == 2, as_json
    # Its items run in the idle capacity: at the lowest priority, so interactive requests come first.
    live = json.loads(admin_cli(sock, "--json", "requests").stdout)["requests"]
    assert [r["priority"] for r in live if r["origin"] == "batch"] == ["low", "low"], live
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    done = wait_for_batch(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    answered = [x["custom_id"] for x in lines_of(client, done.output_file_id)]
    assert len(answered) == done.request_counts.completed >= 1
    assert len(set(answered)) == len(answered) and done.request_counts.completed < 12
    assert client.batches.cancel(batch.id).status == "cancelled"  # cancelling again changes nothing
    # Nothing of it runs any more: the server is idle.
    wait_until(lambda: "troupe:num_requests_running{" in requests.get(server.base_url + "/metrics").text and
               float(requests.get(server.base_url + "/metrics").text.split("troupe:num_requests_running{")[1]
                     .split("}")[1].split()[0]) == 0, "an idle server")


def test_the_completion_window_expires_what_did_not_run(start_server, storage):
    server = start_server("--storage-dir", str(storage), "--set", "batches.max_in_flight=1").wait_ready()
    client = client_of(server)
    lines = [line(f"slow-{i}", "/v1/completions", {"prompt": f"Essay {i}:", "max_tokens": 300,
                                                    "temperature": 0, "ignore_eos": True}) for i in range(8)]
    batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/completions",
                                  completion_window="2s")
    assert batch.expires_at - batch.created_at == 2
    done = wait_for_batch(client, batch.id, timeout=120)
    assert done.status == "expired" and done.expired_at is not None, done
    answered = [x["custom_id"] for x in lines_of(client, done.output_file_id)]
    expired = lines_of(client, done.error_file_id)
    assert all(x["error"]["code"] == "batch_expired" and x["response"] is None for x in expired)
    ids = answered + [x["custom_id"] for x in expired]
    assert sorted(ids) == sorted(f"slow-{i}" for i in range(8)), ids  # each exactly once
    assert (done.request_counts.completed, done.request_counts.failed) == (len(answered), len(expired))


def test_a_batch_survives_five_sigkills_answering_every_item_exactly_once(start_server, storage):
    """The crash test of issue 40: 2,000 items, the server killed with SIGKILL at five random
    moments of the run and restarted on the same storage.dir."""
    num_items = 2000
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    words = ["apple", "river", "stone", "cloud", "tiger", "lamp", "honey", "north"]
    lines = [line(f"item-{i}", "/v1/completions",
                  {"prompt": f"{words[i % len(words)]} {i}", "max_tokens": 2, "temperature": 0})
             for i in range(num_items)]
    batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/completions",
                                  completion_window="24h")
    rng = random.Random(40)
    kills = sorted(rng.sample(range(50, num_items - 50), 5))
    for kill_at in kills:
        wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= kill_at,
                   f"{kill_at} items answered", timeout=300)
        server.stop(signal.SIGKILL)
        server = start_server("--storage-dir", str(storage)).wait_ready()
        client = client_of(server)
    done = wait_for_batch(client, batch.id, timeout=600)
    assert done.status == "completed", done
    answered = [x["custom_id"] for x in lines_of(client, done.output_file_id)]
    failed = [x["custom_id"] for x in lines_of(client, done.error_file_id)]
    assert len(answered) + len(failed) == num_items
    assert sorted(answered + failed) == sorted(f"item-{i}" for i in range(num_items))
    assert (done.request_counts.completed, done.request_counts.failed) == (len(answered), len(failed))
    # Answers written before a kill equal the engine's answers now (greedy).
    output = {x["custom_id"]: x for x in lines_of(client, done.output_file_id)}
    for i in rng.sample(range(num_items), 10):
        alone = client.completions.create(model=MODEL_ID, prompt=f"{words[i % len(words)]} {i}", max_tokens=2,
                                          temperature=0)
        assert output[f"item-{i}"]["response"]["body"]["choices"][0]["text"] == alone.choices[0].text
    server.stop()
    with sqlite3.connect(storage / "troupe.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT COUNT(*) FROM batch_items").fetchone()[0] == 0  # forgotten once done


def test_a_full_disk_fails_the_batch_with_its_reason_and_nothing_else(start_server, tmp_path):
    """storage.dir on a 2 MiB tmpfs, filled while the batch runs: the server keeps serving, the
    batch fails naming the reason once its end can be recorded, and its output file holds each
    answered item once."""
    storage = tmp_path / "small"
    storage.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(storage)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    server = None
    try:
        server = start_server("--storage-dir", str(storage)).wait_ready()
        client = client_of(server)
        lines = [line(f"item-{i}", "/v1/completions", {"prompt": f"Story {i}:", "max_tokens": 32,
                                                        "temperature": 0, "ignore_eos": True, "logprobs": 1})
                 for i in range(300)]
        input_file = upload(client, lines)
        free = os.statvfs(storage)
        filler = storage / "filler"
        filler.write_bytes(b"\0" * max(0, free.f_bavail * free.f_frsize - 192 * 1024))
        batch = client.batches.create(input_file_id=input_file.id, endpoint="/v1/completions",
                                      completion_window="24h")
        # The journal's write or SQLite's, whichever meets the full disk first.
        reasons = ("No space left on device", "database or disk is full")
        wait_until(lambda: any(r in server.read_log() for r in reasons), "the disk to fill", timeout=300)
        # Still serving everyone else.
        alone = client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=4, temperature=0)
        assert alone.choices[0].text
        filler.unlink()  # room again: the batch's end is recorded at the next tick
        done = wait_for_batch(client, batch.id, timeout=120)
        assert done.status == "failed", done
        assert done.errors.data[0].code == "storage_error", done.errors
        assert any(r in done.errors.data[0].message for r in reasons), done.errors
        answered = [x["custom_id"] for x in lines_of(client, done.output_file_id)]
        assert len(answered) == len(set(answered)) == done.request_counts.completed > 0
        assert done.request_counts.completed < 300
    finally:
        if server is not None:
            server.stop()
        subprocess.run(["umount", str(storage)], capture_output=True)
