"""The admin socket and `troupe admin` end to end (issue 7, docs/design.md §4), against a real
`troupe serve --admin-socket PATH`."""
import json
import os
import socket
import stat
import subprocess
import threading
import time

import pytest
import requests

from conftest import BINARY

MODEL_ID = "SmolLM2-135M-Instruct"


class AdminClient:
    """One connection to the admin socket: a JSON line out, a JSON line back."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buffer = b""

    def send_line(self, line: bytes):
        self.sock.sendall(line + b"\n")

    def read_line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, **command):
        self.send_line(json.dumps(command).encode())
        return self.read_line()

    def close(self):
        self.sock.close()


def admin_cli(sock_path, *args, timeout=60):
    return subprocess.run([str(BINARY), "admin", "--socket", str(sock_path), *args],
                          capture_output=True, text=True, timeout=timeout)


def start_with_admin(start_server, sock_path, *extra):
    s = start_server("--admin-socket", str(sock_path), *extra)
    s.wait_ready()
    deadline = time.time() + 10
    while not sock_path.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock_path.exists(), s.read_log()
    return s


@pytest.fixture
def admin_server(start_server, tmp_path):
    sock_path = tmp_path / "a.sock"
    s = start_with_admin(start_server, sock_path)
    s.admin_socket = sock_path
    return s


def wait_for_request(client, predicate, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        reply = client.ask(cmd="requests")
        assert reply["ok"], reply
        found = [r for r in reply["requests"] if predicate(r)]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("request never showed up in the admin 'requests' view")


def test_socket_file_is_private(admin_server):
    mode = os.lstat(admin_server.admin_socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_stats_and_requests_over_the_socket(admin_server):
    client = AdminClient(admin_server.admin_socket)
    stats = client.ask(cmd="stats")
    assert stats["ok"] is True
    assert stats["model"] == MODEL_ID
    assert stats["backend"] in ("cpu", "cuda")
    assert stats["uptime_s"] >= 0
    for key in ("waiting", "running", "preempted"):
        assert key in stats["requests"]
    for key in ("total", "used", "cached", "free"):
        assert key in stats["kv_blocks"]
    for key in ("prefix_cache", "tokens_per_s", "step_time_ms", "ttft_ms"):
        assert key in stats
    listed = client.ask(cmd="requests")
    assert listed == {"ok": True, "requests": []}
    # Errors keep the connection usable.
    client.send_line(b"{not json")
    assert client.read_line()["ok"] is False
    assert "unknown command" in client.ask(cmd="reboot")["error"]
    assert client.ask(cmd="stats")["ok"] is True
    client.close()


def test_admin_cli(admin_server):
    r = admin_cli(admin_server.admin_socket, "--json", "stats")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"] == MODEL_ID
    r = admin_cli(admin_server.admin_socket, "stats")
    assert r.returncode == 0, r.stderr
    assert MODEL_ID in r.stdout and "kv blocks" in r.stdout
    r = admin_cli(admin_server.admin_socket, "requests")
    assert r.returncode == 0 and "no live requests" in r.stdout
    r = admin_cli(admin_server.admin_socket, "watch", "--interval", "100", "--count", "3")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 4  # header + 3 rows (stdout is a pipe)
    r = admin_cli(admin_server.admin_socket, "log-level", "debug")
    assert r.returncode == 0 and "debug" in r.stdout
    r = admin_cli(admin_server.admin_socket, "flush-prefix-cache")
    assert r.returncode == 0, r.stderr
    r = admin_cli(admin_server.admin_socket, "log-level", "shouty")
    assert r.returncode == 1
    r = admin_cli(admin_server.admin_socket, "cancel")
    assert r.returncode == 2


def test_cli_without_a_server(tmp_path):
    r = admin_cli(tmp_path / "nobody.sock", "stats")
    assert r.returncode == 1
    assert "no troupe server is listening" in r.stderr


def test_cancel_a_live_http_stream(admin_server):
    body = {"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 2000,
            "ignore_eos": True, "stream": True, "temperature": 0}
    response = requests.post(admin_server.base_url + "/v1/completions", json=body, stream=True,
                             timeout=120)
    assert response.status_code == 200
    lines = response.iter_lines()
    first = next(line for line in lines if line.startswith(b"data: "))
    assert json.loads(first[6:])["choices"]

    client = AdminClient(admin_server.admin_socket)
    live = wait_for_request(client, lambda r: r["origin"] == "http")
    assert live["phase"] in ("waiting", "prefill", "decode", "preempted")
    reply = client.ask(cmd="cancel", id=str(live["id"]))
    assert reply == {"ok": True, "id": live["id"], "was_live": True}

    finish_reasons = []
    for line in lines:
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            if choice.get("finish_reason"):
                finish_reasons.append(choice["finish_reason"])
    assert finish_reasons == ["cancelled"]
    again = client.ask(cmd="cancel", id=live["id"])
    assert again["was_live"] is False
    client.close()


def test_drain_finishes_in_flight_then_exits_zero(admin_server):
    result = {}

    def complete():
        body = {"model": MODEL_ID, "prompt": "Count: 1, 2, 3,", "max_tokens": 48,
                "ignore_eos": True, "temperature": 0}
        result["response"] = requests.post(admin_server.base_url + "/v1/completions", json=body,
                                           timeout=120)

    worker = threading.Thread(target=complete)
    worker.start()
    client = AdminClient(admin_server.admin_socket)
    wait_for_request(client, lambda r: r["origin"] == "http")
    assert client.ask(cmd="drain") == {"ok": True, "draining": True}
    worker.join(timeout=120)
    response = result["response"]
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert response.json()["usage"]["completion_tokens"] == 48
    assert admin_server.process.wait(timeout=60) == 0
    assert not admin_server.admin_socket.exists()


def test_a_live_socket_is_not_taken_over(admin_server, start_server):
    second = start_server("--admin-socket", str(admin_server.admin_socket))
    assert second.process.wait(timeout=60) != 0
    assert "another troupe is serving on" in second.read_log()
    assert AdminClient(admin_server.admin_socket).ask(cmd="stats")["ok"] is True


def test_idle_connections_do_not_lock_operators_out(admin_server):
    """Issue 14: 32 connections that sent nothing filled the cap and the next `stats` was
    refused. Now the connection idle the longest makes room for the newcomer."""
    idle = [AdminClient(admin_server.admin_socket) for _ in range(32)]  # the default cap
    try:
        result = admin_cli(admin_server.admin_socket, "stats")
        assert result.returncode == 0, result.stdout + result.stderr
        assert MODEL_ID in result.stdout
        reply = idle[0].read_line()
        assert reply is not None and reply["ok"] is False, reply
        assert "make room" in reply["error"], reply
        assert idle[0].read_line() is None  # closed
        assert idle[1].ask(cmd="stats")["ok"] is True
    finally:
        for client in idle:
            client.close()


def test_an_idle_admin_connection_is_closed(start_server, tmp_path):
    config = tmp_path / "admin.json"
    config.write_text(json.dumps({"admin": {"idle_timeout_ms": 500}}))
    sock_path = tmp_path / "a.sock"
    start_with_admin(start_server, sock_path, "--config", str(config))
    client = AdminClient(sock_path)
    try:
        reply = client.read_line()  # nothing sent: the server speaks first, then closes
        assert reply is not None and reply["ok"] is False, reply
        assert "no command for 500 ms" in reply["error"], reply
        assert client.read_line() is None
    finally:
        client.close()
