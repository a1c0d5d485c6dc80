"""Back-pressure and drain against the real engine, each step waiting for the state it needs
(issue 15): a full queue answers 429 with Retry-After, and a draining server answers 503 to new
requests while the one in flight keeps streaming to its end."""
import json
import signal
import threading
import time

import requests

MODEL_ID = "SmolLM2-135M-Instruct"


def metric(server, name):
    for line in requests.get(server.base_url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def wait_until(cond, what, timeout=60):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def body(max_tokens, stream=False):
    return {"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": stream}


def start_long_stream(server, max_tokens):
    """Starts a streamed completion on its own thread; returns (thread, chunks received)."""
    chunks = []

    def run():
        try:
            with requests.post(server.base_url + "/v1/completions",
                               json=body(max_tokens, True), stream=True, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        chunks.append(json.loads(line[6:]))
        except requests.RequestException:
            pass                                               # cut off when the test stops

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: chunks, "the long stream's first chunk")
    return thread, chunks


def test_a_full_queue_answers_429_with_retry_after(start_server, tmp_path):
    config = tmp_path / "tight.json"
    # A short drain: stopping the server must not wait for the 4000-token stream to end.
    config.write_text(json.dumps({"scheduler": {"max_num_seqs": 1, "max_queue": 1},
                                  "drain_timeout_ms": 500}))
    server = start_server("--config", str(config)).wait_ready()
    start_long_stream(server, 4000)                            # the one running slot
    def wait_in_queue():
        try:
            requests.post(server.base_url + "/v1/completions", json=body(4), timeout=300)
        except requests.RequestException:
            pass                                               # cut off when the test stops

    threading.Thread(target=wait_in_queue, daemon=True).start()  # the one queue place
    wait_until(lambda: metric(server, "troupe:num_requests_waiting") == 1, "a waiting request")
    refused = requests.post(server.base_url + "/v1/completions", json=body(4), timeout=60)
    assert refused.status_code == 429, refused.text
    assert refused.headers.get("Retry-After") == "1"
    assert refused.json()["error"]["message"]
    server.stop()


def test_drain_refuses_new_requests_and_finishes_the_one_in_flight(start_server, tmp_path):
    config = tmp_path / "drain.json"
    config.write_text(json.dumps({"drain_timeout_ms": 120000}))
    server = start_server("--config", str(config)).wait_ready()
    thread, chunks = start_long_stream(server, 200)
    server.process.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining:" in server.read_log(), "the drain to begin")
    late = requests.post(server.base_url + "/v1/completions", json=body(4), timeout=60)
    assert late.status_code == 503, late.text
    thread.join(timeout=300)
    assert not thread.is_alive()
    finish = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]]
    assert finish[-1] == "length", finish[-5:]                  # it ran to its end
    assert sum(len(c["choices"][0]["text"]) > 0 for c in chunks if c["choices"]) > 100
    assert server.process.wait(timeout=120) == 0
