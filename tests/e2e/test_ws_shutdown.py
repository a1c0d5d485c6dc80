"""End-to-end tests of WebSocket chat sessions when `troupe serve` shuts down (SIGTERM), with the
`websockets` client against a dedicated real server: every open socket gets a close frame with
1001 (going away) once its own generations have sent their final frames, and new upgrades during
the drain are refused with 503.

Each server here runs with a long shutdown grace (60 s): a session that is not closed properly
would hold the exit for the whole grace and then end without a close frame (code 1006), so "the
close frame came, code 1001, and the process exited well within the grace" is the behaviour under
test, not a speed threshold. The latency from SIGTERM to the close frame is printed (pytest -s).
"""
import asyncio
import json
import signal
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
import ws_chat_client
from ws_chat_client import recv_json, ws_url

GOING_AWAY = 1001
LONG_GRACE_MS = 60_000
EXIT_TIMEOUT = 40  # well within the grace


def chat(chat_id, content="Tell me a long story about a cat.", **params):
    return ws_chat_client.chat(chat_id, content, **params)


def start_with(start_server, tmp_path, **top_level):
    config = tmp_path / "shutdown.json"
    config.write_text(json.dumps({"http": {"shutdown_grace_ms": LONG_GRACE_MS}, **top_level}))
    return start_server("--config", str(config)).wait_ready()


async def frames_until_closed(ws):
    """Every frame up to the server's close; then (frames, seconds when the close arrived)."""
    frames = []
    try:
        while True:
            frames.append(await recv_json(ws))
    except ConnectionClosed:
        return frames, time.monotonic()


def assert_exits_cleanly(server):
    # A session that never closed would hold the process for the whole 60 s grace.
    assert server.process.wait(timeout=EXIT_TIMEOUT) == 0, server.read_log()


def test_idle_session_gets_going_away_on_sigterm(start_server, tmp_path):
    server = start_with(start_server, tmp_path)

    async def scenario():
        async with connect(ws_url(server)) as ws:
            await ws.send(chat("warm-up", content="Say hi.", max_tokens=4))
            while (await recv_json(ws))["type"] != "done":
                pass
            sent = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            frames, closed_at = await frames_until_closed(ws)
            return frames, ws.close_code, ws.close_reason, closed_at - sent

    frames, code, reason, latency = asyncio.run(scenario())
    print(f"\nidle session: close frame {latency * 1000:.0f} ms after SIGTERM")
    assert frames == []
    assert code == GOING_AWAY, (code, reason, server.read_log())
    assert reason == "server shutting down"
    assert_exits_cleanly(server)


def test_streaming_session_gets_its_done_frame_then_going_away(start_server, tmp_path):
    server = start_with(start_server, tmp_path)

    async def scenario():
        async with connect(ws_url(server)) as ws:
            await ws.send(chat("c1", max_tokens=48, ignore_eos=True))
            first = await recv_json(ws)
            sent = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            frames, closed_at = await frames_until_closed(ws)
            return [first, *frames], ws.close_code, closed_at - sent

    frames, code, latency = asyncio.run(scenario())
    print(f"\nstreaming session: close frame {latency * 1000:.0f} ms after SIGTERM "
          f"({len(frames)} frames)")
    assert frames[0]["type"] == "delta", frames[0]
    assert all(f["type"] == "delta" for f in frames[:-1]), frames
    last = frames[-1]
    assert last["type"] == "done" and last["id"] == "c1", last
    assert last["finish_reason"] == "length", last  # the drain let it finish
    assert last["usage"]["completion_tokens"] == 48
    assert code == GOING_AWAY, (code, server.read_log())
    assert_exits_cleanly(server)


def test_drain_deadline_error_frame_then_going_away_and_late_upgrade_refused(start_server,
                                                                             tmp_path):
    # A generation far longer than the drain: the drain deadline cancels it.
    server = start_with(start_server, tmp_path, drain_timeout_ms=3000)

    async def scenario():
        async with connect(ws_url(server)) as ws:
            await ws.send(chat("long", max_tokens=4000, ignore_eos=True))
            first = await recv_json(ws)
            sent = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            # Wait for the drain to begin (the server logs it once new requests get 503).
            deadline = time.monotonic() + 30
            while "draining:" not in server.read_log():
                assert time.monotonic() < deadline, server.read_log()
                await asyncio.sleep(0.02)
            with pytest.raises(InvalidStatus) as refused:
                async with connect(ws_url(server), open_timeout=30):
                    pass
            frames, closed_at = await frames_until_closed(ws)
            return refused.value.response.status_code, [first, *frames], ws.close_code, \
                closed_at - sent

    status, frames, code, latency = asyncio.run(scenario())
    print(f"\ndrain deadline: close frame {latency * 1000:.0f} ms after SIGTERM "
          f"(drain_timeout_ms 3000)")
    assert status == 503
    assert frames[0]["type"] == "delta", frames[0]
    last = frames[-1]
    # The engine ends what the drain deadline cut off with an error (or a cancelled "done").
    assert last["id"] == "long", last
    assert last["type"] == "error" or last.get("finish_reason") == "cancelled", last
    assert code == GOING_AWAY, (code, server.read_log())
    assert_exits_cleanly(server)
