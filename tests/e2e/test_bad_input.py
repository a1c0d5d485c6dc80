"""Every bad input gets its own OpenAI-shaped error, and the server keeps serving (issue 6)."""
import json
import socket

import pytest
import requests

from test_openai_api import MODEL_ID

CHAT = "/v1/chat/completions"
GOOD = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def post(server, path, body, content_type="application/json"):
    data = body if isinstance(body, bytes) else body.encode()
    return requests.post(server.base_url + path, data=data,
                         headers={"Content-Type": content_type}, timeout=60)


def assert_error(r, status, param=None):
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("temperature", 3), ("top_p", 0), ("top_p", 1.5), ("n", 17),
    ("max_tokens", 0), ("max_tokens", "4"), ("stop", 5), ("stop", ["a", "b", "c", "d", "e"]),
    ("seed", "x"), ("presence_penalty", 9), ("logprobs", "yes"), ("top_logprobs", 50),
    ("stream", "yes"), ("priority", "urgent"), ("top_k", 1.5), ("min_p", 2),
    ("repetition_penalty", 0), ("ignore_eos", 1), ("user", 5),
])
def test_bad_field_is_400_naming_it(server, field, value):
    body = dict(GOOD, **{field: value})
    if field == "top_logprobs":
        body["logprobs"] = True
    import json
    assert_error(post(server, CHAT, json.dumps(body)), 400, field)


def test_malformed_json_names_position(server):
    r = post(server, CHAT, '{"messages": [\n {"role" "user"}]}')
    assert_error(r, 400)
    assert "line 2" in r.json()["error"]["message"]


def test_invalid_utf8_is_400(server):
    assert_error(post(server, CHAT, b'{"messages":[{"role":"user","content":"a\xff"}]}'), 400)
    assert_error(post(server, CHAT, '{"messages":[{"role":"user","content":"a\\ud800"}]}'), 400)


def test_unknown_model_is_404(server):
    assert_error(post(server, CHAT, '{"model":"nope","messages":[{"role":"user","content":"x"}]}'),
                 404, "model")


def test_prompt_too_long_is_400(server):
    r = post(server, "/v1/completions", '{"prompt": "%s", "max_tokens": 4}' % ("hello " * 9000))
    assert_error(r, 400)
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_missing_and_wrong_shapes(server):
    assert_error(post(server, CHAT, "{}"), 400, "messages")
    assert_error(post(server, CHAT, "[]"), 400)
    assert_error(post(server, "/v1/completions", '{"prompt": {"a": 1}}'), 400, "prompt")
    assert_error(post(server, CHAT, '{"messages": []}'), 400, "messages")


def test_oversize_body_is_413(server):
    assert_error(post(server, CHAT, b"x" * (9 << 20)), 413)


def test_tokenize_detokenize(server):
    r = post(server, "/tokenize", '{"prompt": "Hello world"}')
    assert r.status_code == 200
    tokens = r.json()["tokens"]
    assert r.json()["count"] == len(tokens) > 0
    r = post(server, "/detokenize", '{"tokens": %s}' % tokens)
    assert "Hello world" in r.json()["prompt"]
    assert_error(post(server, "/detokenize", '{"tokens": [99999999]}'), 400, "tokens")


def test_server_still_serves_after_bad_inputs(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mess")
    r = post(server, CHAT, __import__("json").dumps(GOOD))
    assert r.status_code == 200


# ---------------------------------------------------------------------------------------------
# Issue 14: what OpenAI refuses is refused here too, naming the field.

@pytest.mark.parametrize("messages,param", [
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
    ([{"role": "user", "content": None}], "messages[0].content"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
     "messages[1].content"),
])
def test_bad_messages_are_400_naming_the_field(server, messages, param):
    import json
    r = post(server, CHAT, json.dumps({"model": MODEL_ID, "messages": messages, "max_tokens": 2}))
    assert_error(r, 400, param)


def test_assistant_tool_call_without_content_is_accepted(server):
    import json
    messages = [{"role": "user", "content": "What is the weather?"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r = post(server, CHAT, json.dumps({"model": MODEL_ID, "messages": messages, "max_tokens": 2}))
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("echo,status", [("yes", 400), (1, 400), (True, 200), (False, 200),
                                         (None, 200)])
def test_completions_echo(server, echo, status):
    import json
    r = post(server, "/v1/completions",
             json.dumps({"model": MODEL_ID, "prompt": "Hello", "max_tokens": 2, "echo": echo}))
    if status == 200:
        assert r.status_code == 200, r.text
    else:
        assert_error(r, 400, "echo")


def test_max_tokens_at_int32_max_is_400_with_the_true_total(server):
    import json
    r = post(server, "/v1/completions",
             json.dumps({"model": MODEL_ID, "prompt": "Hello", "max_tokens": 2147483647}))
    assert_error(r, 400, "max_tokens")
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "2147483647 for the completion" in error["message"], error
    assert "-" not in error["message"], error


def test_never_fits_the_kv_cache_names_the_prompt_field(start_server, tmp_path):
    """A prompt that fits the context but not the whole KV pool (8 blocks of 16 tokens here)."""
    import json
    config = tmp_path / "small-kv.json"
    config.write_text(json.dumps({"scheduler": {"num_blocks": 8}}))
    small = start_server("--config", str(config)).wait_ready()
    long_text = "knight castle dragon " * 60  # ~180 tokens: more than 128, far less than 8192
    r = post(small, "/v1/completions",
             json.dumps({"model": MODEL_ID, "prompt": long_text, "max_tokens": 4}))
    assert_error(r, 400, "prompt")
    r = post(small, CHAT, json.dumps({"model": MODEL_ID, "max_tokens": 4,
                                      "messages": [{"role": "user", "content": long_text}]}))
    assert_error(r, 400, "messages")


def raw_request(server, head: str, body: bytes = b""):
    """Sends one hand-written request; returns (status, JSON body, whether the server then closed
    the connection)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"connection closed before a response: {data!r}"
            data += chunk
        header, rest = data.split(b"\r\n\r\n", 1)
        lines = header.decode().split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in lines
                      if line.lower().startswith("content-length:"))
        while len(rest) < length:
            chunk = s.recv(65536)
            assert chunk, "connection closed mid-body"
            rest += chunk
        s.settimeout(10)
        try:
            closed = s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            closed = False
        return int(lines[0].split()[1]), json.loads(rest[:length]), closed


GOOD_BODY = json.dumps(GOOD).encode()


@pytest.mark.parametrize("framing,body", [
    # RFC 9112 §6.3: the final coding is not chunked, so the body length is undetermined.
    (f"Transfer-Encoding: gzip\r\nContent-Length: {len(GOOD_BODY)}\r\n", GOOD_BODY),
    ("Transfer-Encoding: gzip\r\n", GOOD_BODY),
    ("Transfer-Encoding: chunked, gzip\r\n", b"%x\r\n%s\r\n0\r\n\r\n" % (len(GOOD_BODY), GOOD_BODY)),
    # Transfer-Encoding with Content-Length: which one frames the body is ambiguous.
    (f"Content-Length: {len(GOOD_BODY)}\r\nTransfer-Encoding: chunked\r\n", GOOD_BODY),
])
def test_untrustworthy_transfer_encoding_is_400_naming_the_header(server, framing, body):
    status, payload, closed = raw_request(
        server, f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}",
        body)
    assert status == 400, payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Transfer-Encoding" in error["message"], error
    assert closed, "the connection must close: what follows cannot be trusted to be a request"
    r = post(server, CHAT, json.dumps(GOOD))
    assert r.status_code == 200, r.text
