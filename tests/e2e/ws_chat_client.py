"""What the WebSocket chat end-to-end tests share (test_websocket.py, test_ws_shutdown.py): the
endpoint's URL, a chat frame, and reading one JSON frame with a timeout."""
import asyncio
import json

FRAME_TIMEOUT = 120  # seconds to wait for any one server frame


def ws_url(server):
    return f"ws://127.0.0.1:{server.port}/v1/chat/ws"


def chat(chat_id, content="Tell me a short story about a cat.", **params):
    body = {"type": "chat", "id": chat_id, "messages": [{"role": "user", "content": content}],
            "temperature": 0}
    body.update(params)
    return json.dumps(body)


async def recv_json(ws, timeout=FRAME_TIMEOUT):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))
