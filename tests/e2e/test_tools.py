"""Tool calling (issue 19) end to end with the official `openai` client on the real model
(SmolLM2, ChatML: Hermes-style <tool_call> blocks): tool_choice required / named / auto, streamed
and not, a multi-turn conversation with a tool result, parallel_tool_calls, a /v1/batch item, the
WebSocket refusal and the bad-input 400s naming the field. The model is a 135M one: with `auto`
either answer (text or a call) is accepted, but its structure is checked."""
import json

import openai
import pytest
import requests

MODEL_ID = "SmolLM2-135M-Instruct"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current time in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 20}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def check_call(call):
    """A call's structure and its arguments against the tool's schema; returns the arguments."""
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) > 8, call.id
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(args) == {"city", "unit"}, args
        assert isinstance(args["city"], str) and len(args["city"]) <= 20
        assert args["unit"] in ("celsius", "fahrenheit")
    else:
        assert call.function.name == "get_time", call.function.name
        assert set(args) == {"timezone"} and isinstance(args["timezone"], str), args
    return args


def create(client, messages=QUESTION, **kwargs):
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", 80)
    return client.chat.completions.create(model=MODEL_ID, messages=messages, **kwargs)


def test_required_produces_a_valid_call(client):
    r = create(client, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    check_call(choice.message.tool_calls[0])


@pytest.mark.parametrize("temperature", [0, 1])
def test_named_function_is_called_with_matching_arguments(client, temperature):
    r = create(client, tools=TOOLS, temperature=temperature, seed=3,
               tool_choice={"type": "function", "function": {"name": "get_time"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_time"
    check_call(call)


def test_auto_answers_in_text_or_with_a_valid_call(client):
    for seed in (1, 2, 3):
        r = create(client, tools=TOOLS, tool_choice="auto", temperature=1, seed=seed)
        choice = r.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                check_call(call)
        else:
            assert choice.finish_reason in ("stop", "length")
            assert isinstance(choice.message.content, str) and "<tool_call>" not in choice.message.content


def test_none_renders_tools_but_never_parses_calls(client):
    r = create(client, tools=TOOLS, tool_choice="none", max_tokens=20)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")


def stream(client, **kwargs):
    chunks = list(create(client, stream=True, **kwargs))
    return chunks


def test_streamed_required_calls_assemble_to_the_same_answer(client):
    kwargs = dict(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    whole = create(client, **kwargs).choices[0].message.tool_calls[0]
    chunks = stream(client, **kwargs)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # OpenAI's shape: the first piece names the call, later ones carry argument fragments.
    assert pieces[0].index == 0 and pieces[0].id.startswith("call_")
    assert pieces[0].type == "function" and pieces[0].function.name == whole.function.name
    assert pieces[0].function.arguments == ""
    assert len(pieces) > 2, "arguments arrive in fragments"
    assert all(p.id is None and p.function.name is None for p in pieces[1:])
    arguments = "".join(p.function.arguments for p in pieces)
    assert arguments == whole.function.arguments
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == ""


def test_the_openai_stream_helper_assembles_the_call(client):
    with client.beta.chat.completions.stream(
            model=MODEL_ID, messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=80,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    check_call(call)


def test_streamed_auto_has_the_structure_of_the_whole_answer(client):
    for seed in (1, 2):
        kwargs = dict(tools=TOOLS, tool_choice="auto", temperature=1, seed=seed)
        whole = create(client, **kwargs).choices[0]
        chunks = stream(client, **kwargs)
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == [whole.finish_reason]
        assert content == (whole.message.content or "")
        names = [p.function.name for p in pieces if p.function.name]
        assert names == [c.function.name for c in whole.message.tool_calls or []]


def test_multi_turn_with_a_tool_result(client):
    first = create(client, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    call = first.choices[0].message.tool_calls[0]
    messages = QUESTION + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name,
                                      "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
    ]
    r = create(client, messages=messages, tools=TOOLS, max_tokens=40)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    for c in choice.message.tool_calls or []:
        check_call(c)
    # The same history with tool_choice none: a text answer.
    r = create(client, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content


def test_parallel_calls_when_allowed(client):
    r = create(client, tools=TOOLS, tool_choice="required", max_tokens=200,
               messages=[{"role": "user", "content": "Weather in Paris and time in Tokyo?"}])
    choice = r.choices[0]
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        check_call(call)
    if choice.finish_reason == "tool_calls":
        assert len({c.id for c in choice.message.tool_calls}) == len(choice.message.tool_calls)


def test_batch_item_parses_tool_calls(server):
    body = {"model": MODEL_ID, "messages": QUESTION, "max_tokens": 80, "temperature": 0,
            "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}
    r = requests.post(server.base_url + "/v1/batch",
                      json={"requests": [{"custom_id": "a", "url": "/v1/chat/completions",
                                          "body": body}]}, timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["data"][0]["response"]["body"]["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["unit"] in ("celsius", "fahrenheit")


def test_websocket_chat_refuses_parsed_tools(server):
    import asyncio

    import websockets
    from ws_chat_client import recv_json, ws_url

    async def run():
        async with websockets.connect(ws_url(server)) as ws:
            await ws.send(json.dumps({"type": "chat", "id": "t", "messages": QUESTION,
                                      "tools": TOOLS, "max_tokens": 5}))
            return await recv_json(ws)

    frame = asyncio.run(run())
    assert frame["type"] == "error", frame
    assert frame["code"] == "invalid_request" and "(field 'tools')" in frame["message"], frame


def bad_tool(**function):
    return [WEATHER, {"type": "function", "function": function}]


@pytest.mark.parametrize("kwargs,param", [
    ({"tools": bad_tool(description="no name")}, "tools[1].function.name"),
    ({"tools": bad_tool(name="has space")}, "tools[1].function.name"),
    ({"tools": bad_tool(name="get_weather")}, "tools[1].function.name"),
    ({"tools": bad_tool(name="f", parameters=[1])}, "tools[1].function.parameters"),
    ({"tools": bad_tool(name="f", parameters={"type": "nonsense"})}, "tools[1].function.parameters"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
])
def test_bad_tool_input_is_400_naming_the_field(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as bad:
        create(client, max_tokens=4, **kwargs)
    assert bad.value.body["param"] == param, bad.value.body


def test_bad_tool_call_history_is_400_naming_the_field(client):
    messages = QUESTION + [{"role": "assistant", "content": None,
                            "tool_calls": [{"id": "c", "type": "function",
                                            "function": {"name": "get_weather"}}]}]
    with pytest.raises(openai.BadRequestError) as bad:
        create(client, messages=messages, tools=TOOLS, max_tokens=4)
    assert bad.value.body["param"] == "messages[1].tool_calls[0].function.arguments"
