"""End-to-end tests of the WebSocket chat (GET /v1/chat/ws) with the `websockets` client against a
real server: multiplexing, cancel, sockets that vanish mid-stream, bad frames and close codes.

The CPU backend on a shared machine is slow (100-500 ms a token under load): every wait is
generous and generations are kept short unless a test needs them long."""
import asyncio
import base64
import json
import os
import re
import socket
import struct
import time

import pytest
import requests
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from ws_chat_client import FRAME_TIMEOUT, chat, recv_json, ws_url  # noqa: F401


async def collect_until_done(ws, ids, timeout=600):
    """Reads frames until every id in `ids` got its done or error; returns {id: [frames]}."""
    frames = {i: [] for i in ids}
    open_ids = set(ids)
    deadline = time.monotonic() + timeout
    while open_ids:
        frame = await recv_json(ws, max(1, deadline - time.monotonic()))
        frames.setdefault(frame.get("id"), []).append(frame)
        if frame["type"] in ("done", "error"):
            open_ids.discard(frame.get("id"))
    return frames


def text_of(frames):
    return "".join(f["text"] for f in frames if f["type"] == "delta")


def metrics(server):
    values = {}
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        m = re.match(r"^(troupe:[a-z_]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def wait_idle(server, timeout=90):
    """Polls /metrics until no request runs or waits and no KV block is in use."""
    deadline = time.time() + timeout
    last = {}
    while time.time() < deadline:
        last = metrics(server)
        if (last.get("troupe:kv_blocks_used") == 0 and last.get("troupe:num_requests_running") == 0
                and last.get("troupe:num_requests_waiting") == 0
                and last.get("troupe:num_requests_preempted", 0) == 0):
            return last
        time.sleep(0.5)
    pytest.fail(f"server not idle after {timeout}s: " +
                str({k: v for k, v in last.items() if "kv_blocks" in k or "num_requests" in k}))


async def assert_serves(server, chat_id="check"):
    """A fresh socket gets a complete answer."""
    async with connect(ws_url(server), open_timeout=60) as ws:
        await ws.send(chat(chat_id, "Say hi.", max_tokens=3))
        frames = await collect_until_done(ws, [chat_id])
        done = frames[chat_id][-1]
        assert done["type"] == "done", done
        assert done["finish_reason"] in ("stop", "length")


# ---------------------------------------------------------------------------------------------
# A raw client, for frames `websockets` will not send (invalid UTF-8 in a text frame).

def raw_handshake(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/chat/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        assert chunk, "server closed during the handshake"
        response += chunk
    assert response.startswith(b"HTTP/1.1 101"), response
    return sock


def raw_send(sock, opcode, payload):
    mask = os.urandom(4)
    header = bytes([0x80 | opcode])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    else:
        header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(header + mask + masked)


def raw_read_close_code(sock):
    """Reads frames until the server's close frame; returns its status code."""
    buffer = b""

    def need(n):
        nonlocal buffer
        while len(buffer) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection ended without a close frame")
            buffer += chunk

    while True:
        need(2)
        opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
        offset = 2
        if length == 126:
            need(4)
            length, offset = struct.unpack("!H", buffer[2:4])[0], 4
        elif length == 127:
            need(10)
            length, offset = struct.unpack("!Q", buffer[2:10])[0], 10
        need(offset + length)
        payload, buffer = buffer[offset:offset + length], buffer[offset + length:]
        if opcode == 0x8:
            return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None


# ---------------------------------------------------------------------------------------------

def test_multiplexed_chats_cancel_one_others_finish(server):
    async def run():
        async with connect(ws_url(server), open_timeout=60) as ws:
            ids = ["a", "b", "c"]
            for i in ids:
                # "b" is far too long to finish before the cancel reaches it.
                await ws.send(chat(i, max_tokens=4000 if i == "b" else 16, ignore_eos=True))
            frames = {i: [] for i in ids}
            # Cancel "b" as soon as it has streamed something.
            while not any(f["type"] == "delta" for f in frames["b"]):
                frame = await recv_json(ws)
                frames[frame["id"]].append(frame)
                assert frame["type"] != "error", frame
            await ws.send(json.dumps({"type": "cancel", "id": "b"}))
            rest = await collect_until_done(
                ws, [i for i in ids if not frames[i] or frames[i][-1]["type"] != "done"])
            for i in ids:
                frames[i] += rest.get(i, [])
            return frames

    frames = asyncio.run(run())
    for i in ("a", "c"):
        done = frames[i][-1]
        assert done["type"] == "done", frames[i]
        assert done["finish_reason"] == "length"
        assert done["usage"]["completion_tokens"] == 16
        assert text_of(frames[i])
        assert set(done["timings"]) >= {"ttft_ms", "tokens_per_s"}
        assert sum(f["type"] == "done" for f in frames[i]) == 1
    cancelled = frames["b"][-1]
    assert cancelled["type"] == "done"
    assert cancelled["finish_reason"] == "cancelled"
    assert cancelled["usage"]["completion_tokens"] < 4000


def test_duplicate_live_id_is_an_error_for_that_message_only(server):
    async def run():
        async with connect(ws_url(server), open_timeout=60) as ws:
            await ws.send(chat("dup", max_tokens=8, ignore_eos=True))
            await ws.send(chat("dup", max_tokens=8, ignore_eos=True))
            frames = []
            while not any(f["type"] == "done" for f in frames):
                frames.append(await recv_json(ws))
            # The id is free again once its generation is done.
            await ws.send(chat("dup", max_tokens=2))
            again = await collect_until_done(ws, ["dup"])
            return frames, again["dup"]

    frames, again = asyncio.run(run())
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 1 and errors[0]["id"] == "dup" and errors[0]["code"] == "duplicate_id"
    done = [f for f in frames if f["type"] == "done"]
    assert done[0]["finish_reason"] == "length" and done[0]["usage"]["completion_tokens"] == 8
    assert again[-1]["type"] == "done"


def test_bad_frames_get_errors_and_the_socket_stays_usable(server):
    async def run():
        async with connect(ws_url(server), open_timeout=60) as ws:
            replies = []
            for frame in ["{not json", json.dumps({"type": "hello", "id": "x"}),
                          json.dumps({"type": "chat", "messages": []}), b"\x00\x01binary",
                          json.dumps({"type": "cancel", "id": "never-started"}),
                          json.dumps({"type": "chat", "id": "bad-params", "messages": "nope"})]:
                await ws.send(frame)
                replies.append(await recv_json(ws))
            await ws.send(chat("after", "Say hi.", max_tokens=3))
            after = await collect_until_done(ws, ["after"])
            return replies, after["after"]

    replies, after = asyncio.run(run())
    assert [r["type"] for r in replies] == ["error"] * 6, replies
    assert [r["code"] for r in replies[:5]] == [
        "invalid_json", "unknown_type", "invalid_message", "unsupported_frame", "unknown_id"]
    assert replies[0]["id"] is None and replies[1]["id"] == "x"
    assert replies[4]["id"] == "never-started"
    assert replies[5]["id"] == "bad-params" and replies[5]["message"]
    assert all(r["message"] for r in replies)
    assert after[-1]["type"] == "done"


def test_oversized_and_invalid_utf8_frames_close_the_socket_others_keep_going(start_server, tmp_path):
    config = tmp_path / "ws.json"
    config.write_text(json.dumps({"http": {"ws_max_message_bytes": 4096}}))
    server = start_server("--config", str(config)).wait_ready()

    async def run():
        async with connect(ws_url(server), open_timeout=60) as bystander:
            await bystander.send(chat("long", max_tokens=24, ignore_eos=True))
            first = await recv_json(bystander)
            assert first["type"] == "delta", first

            # Oversized: a 5000-byte text frame closes the socket with 1009 (message too big).
            async with connect(ws_url(server), open_timeout=60, max_size=None) as big:
                await big.send(chat("big", "x" * 5000))
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(big.recv(), FRAME_TIMEOUT)
                assert big.close_code == 1009, (big.close_code, big.close_reason)

            # Invalid UTF-8 in a text frame: close 1007 (raw frame; clients refuse to send it).
            def invalid_utf8():
                sock = raw_handshake(server.port)
                try:
                    raw_send(sock, 0x1, b'{"type":"chat","id":"\xc3\x28"}')
                    return raw_read_close_code(sock)
                finally:
                    sock.close()
            assert await asyncio.to_thread(invalid_utf8) == 1007

            # Frames at the limit are still fine.
            async with connect(ws_url(server), open_timeout=60) as ok:
                await ok.send(chat("fits", "y" * 1000, max_tokens=1))
                fits = await collect_until_done(ok, ["fits"])
                assert fits["fits"][-1]["type"] == "done", fits

            rest = await collect_until_done(bystander, ["long"])
            return [first] + rest["long"]

    frames = asyncio.run(run())
    assert frames[-1]["type"] == "done" and frames[-1]["finish_reason"] == "length", frames[-1]
    assert frames[-1]["usage"]["completion_tokens"] == 24
    asyncio.run(assert_serves(server))


def test_vanished_sockets_free_their_generations(server):
    """100 sockets each start a long generation and disappear mid-stream (half without a close
    handshake, half with one): afterwards nothing runs or waits and no KV block is in use."""
    num_sockets = 100

    async def one(index, started, vanish):
        ws = await connect(ws_url(server), open_timeout=120)
        await ws.send(chat(f"v{index}", f"Write a long essay about the number {index}.",
                           max_tokens=2000, ignore_eos=True))
        # The first frame (a delta, or a refusal: a full queue is an answer too), unless the
        # socket vanishes first: with 64 sequences per step (the default max_num_seqs) the rest
        # stay queued until one of the 2000-token generations ends, and queued counts as busy.
        first = asyncio.ensure_future(recv_json(ws, timeout=600))
        vanished = asyncio.ensure_future(vanish.wait())
        await asyncio.wait({first, vanished}, return_when=asyncio.FIRST_COMPLETED)
        started.append(first.result()["type"] if first.done() else "still waiting")
        first.cancel()
        await vanish.wait()
        if index % 2 == 0:
            ws.transport.abort()  # vanish: no close frame, the TCP connection just ends
        else:
            await ws.close()  # a clean close with the generation still running

    def all_admitted():
        counts = metrics(server)
        return counts["troupe:num_requests_running"] + counts["troupe:num_requests_waiting"]

    async def run():
        started = []
        vanish = asyncio.Event()
        clients = [asyncio.create_task(one(i, started, vanish)) for i in range(num_sockets)]
        # Every socket is mid-stream or queued now: the server holds their requests (an event the
        # server cannot tell the test of, so polled), and half or more stream.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(c.done() for c in clients):
            if (len(started) >= num_sockets // 2
                    and await asyncio.to_thread(all_admitted) >= num_sockets):
                break
            await asyncio.sleep(0.1)
        busy = await asyncio.to_thread(metrics, server)
        vanish.set()
        await asyncio.gather(*clients)
        return started, busy

    started, busy = asyncio.run(run())
    assert len(started) == num_sockets
    assert busy["troupe:kv_blocks_used"] > 0
    assert busy["troupe:num_requests_running"] + busy["troupe:num_requests_waiting"] >= num_sockets // 2
    assert started.count("delta") >= num_sockets // 2, started  # most were mid-stream
    wait_idle(server, timeout=90)
    asyncio.run(assert_serves(server))
    wait_idle(server, timeout=60)


def test_keepalive_pings_and_idle_timeout(start_server, tmp_path):
    """A client that answers pings stays connected while idle; one that never answers is closed
    after the idle timeout."""
    config = tmp_path / "idle.json"
    config.write_text(json.dumps({"http": {"ws_idle_timeout_ms": 1000}}))
    server = start_server("--config", str(config)).wait_ready()

    def silent_client():
        sock = raw_handshake(server.port)  # reads, never answers a ping
        started = time.monotonic()
        saw_ping = False
        try:
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    return saw_ping, time.monotonic() - started
                saw_ping = saw_ping or chunk[0] & 0x0F == 0x9
        except OSError:
            return saw_ping, time.monotonic() - started
        finally:
            sock.close()

    async def run():
        async with connect(ws_url(server), open_timeout=60, ping_interval=None) as polite:
            silent = asyncio.create_task(asyncio.to_thread(silent_client))
            await asyncio.sleep(4)  # idle, answering the server's pings (websockets does)
            await polite.send(chat("alive", "Say hi.", max_tokens=2))
            frames = await collect_until_done(polite, ["alive"])
            return await asyncio.wait_for(silent, 60), frames["alive"]

    (saw_ping, silent_lifetime), frames = asyncio.run(run())
    assert saw_ping
    assert silent_lifetime < 30
    assert frames[-1]["type"] == "done"
