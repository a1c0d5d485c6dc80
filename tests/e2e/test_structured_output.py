"""Structured output (issue 19) end to end with the official `openai` client on the real model:
`response_format` json_schema and json_object, vLLM's `structured_outputs` (choice, regex) through
extra_body, streamed and not, on chat, completions, a /v1/batch item and the WebSocket chat; the
bad-input cases are 400s naming the field."""
import json
import re

import openai
import pydantic
import pytest
import requests

MODEL_ID = "SmolLM2-135M-Instruct"
# Skipped (the 400 checked in test_schema_suite.py) where the server is built without xgrammar.
pytestmark = pytest.mark.structured_output

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 24},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def chat(client, content, **kwargs):
    return client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": content}], **kwargs)


def check_person(text):
    person = json.loads(text)
    assert isinstance(person, dict), text
    assert isinstance(person["name"], str), text
    assert isinstance(person["age"], int) and not isinstance(person["age"], bool), text
    assert set(person) <= {"name", "age", "city"}, text
    return person


@pytest.mark.parametrize("temperature", [0, 1])
def test_json_schema_response_format_parses_and_matches(client, temperature):
    r = chat(client, "Describe a fictional person as JSON with their name, age and city.",
             temperature=temperature, seed=11, max_tokens=120,
             response_format={"type": "json_schema",
                              "json_schema": {"name": "person", "schema": PERSON_SCHEMA,
                                              "strict": True}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    check_person(choice.message.content)


def test_parse_with_a_pydantic_model(client):
    class Person(pydantic.BaseModel):
        name: str
        age: int

    # openai 1.x/2.x: beta.chat.completions.parse (chat.completions.parse in later releases).
    completions = getattr(client.chat.completions, "parse", None) and client.chat.completions
    completions = completions or client.beta.chat.completions
    r = completions.parse(
        model=MODEL_ID, max_tokens=120, temperature=0,
        messages=[{"role": "user", "content": "Describe a person as JSON with name and age."}],
        response_format=Person)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person)
    assert isinstance(person.age, int)


def test_json_object_response_format_starts_an_object(client):
    r = chat(client, "Describe a cat as a JSON object.", temperature=0, max_tokens=60,
             response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.startswith("{"), text
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # this small model may nest objects until max_tokens
        assert r.choices[0].finish_reason == "length"


def test_choice_through_extra_body_streamed_and_not(client):
    colors = ["red", "green", "blue"]
    extra = {"structured_outputs": {"choice": colors}}
    r = chat(client, "What color is the sky?", temperature=1, seed=3, max_tokens=10,
             extra_body=extra)
    assert r.choices[0].message.content in colors
    assert r.choices[0].finish_reason == "stop"
    text, finish = "", None
    with chat(client, "What color is the sky?", temperature=1, seed=3, max_tokens=10,
              extra_body=extra, stream=True) as stream:
        for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
    assert text == r.choices[0].message.content
    assert finish == "stop"


def test_json_schema_streamed_equals_whole(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}
    whole = chat(client, "Describe a person as JSON.", temperature=0, max_tokens=120,
                 response_format=fmt)
    text = ""
    with chat(client, "Describe a person as JSON.", temperature=0, max_tokens=120,
              response_format=fmt, stream=True) as stream:
        for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
    assert text == whole.choices[0].message.content
    check_person(text)


def test_regex_on_completions_and_older_guided_name(client):
    r = client.completions.create(model=MODEL_ID, prompt="My PIN is", max_tokens=10,
                                  temperature=1, seed=4,
                                  extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
    assert re.fullmatch(r"[0-9]{3}", r.choices[0].text), r.choices[0].text
    assert r.choices[0].finish_reason == "stop"
    older = chat(client, "Pick a number.", max_tokens=10, temperature=0,
                 extra_body={"guided_regex": "[0-9]{3}"})
    assert re.fullmatch(r"[0-9]{3}", older.choices[0].message.content)


def test_n2_choice_each_choice_is_constrained(client):
    r = chat(client, "Yes or no?", n=2, temperature=1, seed=9, max_tokens=5,
             extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert [c.message.content in ("yes", "no") for c in r.choices] == [True, True]


def test_batch_item_and_websocket_chat_are_constrained(server, client):
    from ws_chat_client import chat_over_websocket

    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Pick a number."}],
            "max_tokens": 10, "temperature": 0,
            "structured_outputs": {"regex": "[0-9]{3}"}}
    r = requests.post(server.base_url + "/v1/batch",
                      json={"requests": [{"custom_id": "a", "url": "/v1/chat/completions",
                                          "body": body}]}, timeout=120)
    assert r.status_code == 200, r.text
    text = r.json()["data"][0]["response"]["body"]["choices"][0]["message"]["content"]
    assert re.fullmatch(r"[0-9]{3}", text), text

    texts, _, _ = chat_over_websocket(server, body)
    assert texts[0] == text


@pytest.mark.parametrize("kwargs,param", [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}},
     "response_format.json_schema.schema"),
    ({"extra_body": {"structured_outputs": {"regex": "[0-9"}}}, "structured_outputs"),
    ({"extra_body": {"structured_outputs": {"regex": "a", "choice": ["b"]}}},
     "structured_outputs.choice"),
    ({"extra_body": {"structured_outputs": {"json": {"type": "nonsense"}}}}, "structured_outputs"),
    ({"response_format": {"type": "json_object"},
      "extra_body": {"structured_outputs": {"choice": ["a"]}}}, "structured_outputs"),
    # Tool calling's own 400s are in test_tools.py.
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "response_format": {"type": "json_object"}}, "response_format"),
])
def test_bad_structured_output_is_400_naming_the_field(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as bad:
        chat(client, "hi", max_tokens=4, **kwargs)
    assert bad.value.body["param"] == param, bad.value.body
