"""Issue 19's schema suite: `response_format` json_schema over varied schemas (nested objects,
arrays with minItems/maxItems, enums, integers and numbers with bounds, required and optional
fields, booleans, strings with maxLength and patterns, a top-level array), each at temperature 0
and at temperature 1 with a seed, through the official `openai` client on the real model. Every
output must end by itself (finish_reason "stop") and validate with `jsonschema`; and
`beta.chat.completions.parse` fills a nested pydantic model.

Bounded so that SmolLM2-135M finishes: every string has a maxLength, an enum or a pattern
(unbounded strings let the small model ramble until max_tokens), every array a maxItems; the
whitespace runs between JSON tokens are capped by the server (structured_output.
json_max_whitespace, 4). The longest output measured was 82 tokens (149 for the pydantic order),
well under max_tokens.

A server built without xgrammar (-DTROUPE_XGRAMMAR=OFF) skips those tests (conftest's
`structured_output` marker) and must instead answer every constrained request with a clean 400
naming the field, checked here."""
import json
import typing

import jsonschema
import openai
import pydantic
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"
MAX_TOKENS = 200


def obj(properties, required):
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def text(max_length):
    return {"type": "string", "maxLength": max_length}


def integer(minimum, maximum):
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


SCHEMAS = {
    "person_optional_email": (
        "Describe a fictional person.",
        obj({"name": text(20), "age": integer(0, 120), "email": text(30)}, ["name", "age"])),
    "nested_address_with_pattern": (
        "Give a company with its address.",
        obj({"company": text(20),
             "address": obj({"street": text(24), "city": text(16),
                             "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                            ["street", "city", "zip"])},
            ["company", "address"])),
    "string_array_min_max_items": (
        "List some tags for a blog post about cooking.",
        obj({"tags": {"type": "array", "items": text(12), "minItems": 2, "maxItems": 4}},
            ["tags"])),
    "enums": (
        "What is the status of the order?",
        obj({"status": {"type": "string", "enum": ["pending", "shipped", "delivered", "cancelled"]},
             "priority": {"type": "string", "enum": ["low", "high"]}},
            ["status", "priority"])),
    "bounded_integer_and_number": (
        "Rate this movie.",
        obj({"stars": integer(1, 5), "score": {"type": "number", "minimum": 0, "maximum": 10}},
            ["stars", "score"])),
    "booleans": (
        "Is the store open on weekends?",
        obj({"open_saturday": {"type": "boolean"}, "open_sunday": {"type": "boolean"},
             "note": text(20)},
            ["open_saturday", "open_sunday"])),
    "array_of_objects": (
        "List items in a shopping cart.",
        obj({"items": {"type": "array", "minItems": 1, "maxItems": 3,
                       "items": obj({"name": text(12), "qty": integer(1, 9)}, ["name", "qty"])}},
            ["items"])),
    "patterns": (
        "Give a flight number and a date.",
        obj({"flight": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
             "date": {"type": "string", "pattern": "^2026-[01][0-9]-[0-3][0-9]$"}},
            ["flight", "date"])),
    "top_level_array_of_enums": (
        "List three primary colors.",
        {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue", "yellow"]},
         "minItems": 3, "maxItems": 3}),
    "three_levels_deep": (
        "Describe a book.",
        obj({"book": obj({"title": text(24),
                          "author": obj({"name": text(20), "born": integer(1800, 2010)},
                                        ["name", "born"])},
                         ["title", "author"])},
            ["book"])),
    "mostly_optional": (
        "Describe a pet.",
        obj({"species": {"type": "string", "enum": ["cat", "dog", "bird"]}, "name": text(12),
             "age": integer(0, 30), "vaccinated": {"type": "boolean"}},
            ["species"])),
    "integer_array_with_bounds": (
        "Give some lottery numbers.",
        obj({"numbers": {"type": "array", "items": integer(1, 49), "minItems": 3, "maxItems": 6},
             "bonus": integer(1, 10)},
            ["numbers", "bonus"])),
    "mixed_weather": (
        "What is the weather in Paris?",
        obj({"city": text(16), "temperature_c": {"type": "number", "minimum": -50, "maximum": 60},
             "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]},
             "humidity": integer(0, 100)},
            ["city", "temperature_c", "conditions"])),
}


@pytest.mark.structured_output
@pytest.mark.parametrize("temperature", [0, 1])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_output_completes_parses_and_validates(client, name, temperature):
    prompt, schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": prompt}],
        temperature=temperature, seed=7, max_tokens=MAX_TOKENS,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name, "schema": schema, "strict": True}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", (choice.finish_reason, choice.message.content)
    jsonschema.validate(json.loads(choice.message.content), schema,
                        cls=jsonschema.Draft202012Validator)


class Address(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=16)
    zip_code: str = pydantic.Field(pattern=r"^[0-9]{5}$")


class Item(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    quantity: int = pydantic.Field(ge=1, le=9)


class Order(pydantic.BaseModel):
    customer: str = pydantic.Field(max_length=20)
    shipping: Address
    items: list[Item] = pydantic.Field(min_length=1, max_length=3)
    status: typing.Literal["pending", "shipped"]
    gift: bool


@pytest.mark.structured_output
@pytest.mark.parametrize("temperature", [0, 1])
def test_parse_fills_a_nested_pydantic_model(client, temperature):
    # openai 1.x: beta.chat.completions.parse; the schema it sends has $defs/$ref for the nested
    # models, and pydantic validates the constraints again on the way back.
    r = client.beta.chat.completions.parse(
        model=MODEL_ID, temperature=temperature, seed=3, max_tokens=256,
        messages=[{"role": "user", "content": "Create an order for a customer as JSON."}],
        response_format=Order)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    order = choice.message.parsed
    assert isinstance(order, Order)
    assert isinstance(order.shipping, Address)
    assert 1 <= len(order.items) <= 3 and all(isinstance(i, Item) for i in order.items)


def test_without_xgrammar_a_constrained_request_is_a_clean_400(client, structured_output_built):
    if structured_output_built:
        pytest.skip("this server has structured output (the tests above ran)")
    _, schema = SCHEMAS["enums"]
    for kwargs, param in [
            ({"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "enums", "schema": schema}}},
             "response_format"),
            ({"response_format": {"type": "json_object"}}, "response_format"),
            ({"extra_body": {"structured_outputs": {"regex": "[0-9]{3}"}}}, "structured_outputs"),
            ({"extra_body": {"guided_choice": ["a", "b"]}}, "guided_choice")]:
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                **kwargs)
        assert bad.value.body["param"] == param, bad.value.body
        assert "structured output is not built into this server" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.beta.chat.completions.parse(
            model=MODEL_ID, max_tokens=4, messages=[{"role": "user", "content": "hi"}],
            response_format=Order)
