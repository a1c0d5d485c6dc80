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


def chat_over_websocket(server, body, chat_id="w"):
    """Runs one chat (an OpenAI chat body; `model` is dropped) over a fresh socket to its end.
    Returns (text per choice index, finish_reason per choice_done frame, the done frame)."""
    import websockets

    async def run():
        texts, ends = {}, {}
        async with websockets.connect(ws_url(server)) as ws:
            frame = {k: v for k, v in body.items() if k != "model"}
            await ws.send(json.dumps({"type": "chat", "id": chat_id, **frame}))
            while True:
                frame = await recv_json(ws)
                if frame["type"] == "delta":
                    index = frame.get("index", 0)
                    texts[index] = texts.get(index, "") + frame["text"]
                elif frame["type"] == "choice_done":
                    ends[frame["index"]] = frame["finish_reason"]
                else:
                    assert frame["type"] == "done", frame
                    return texts, ends, frame

    return asyncio.run(run())
