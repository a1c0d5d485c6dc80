"""The llama.cpp reference prompts (tests/reference/smollm2_greedy.json) are what SmolLM2's own
chat template renders: its Jinja source, read from the GGUF, rendered with jinja2 the way
Hugging Face's transformers does (trim_blocks, lstrip_blocks). The greedy-parity test's chat
prompts therefore test the model's real template, not a hand-written imitation of it."""
import json
import pathlib

import gguf
import jinja2

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
REFERENCE = ROOT / "tests" / "reference" / "smollm2_greedy.json"


def model_template() -> str:
    field = gguf.GGUFReader(str(MODEL)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def test_reference_chat_prompts_are_the_models_own_template():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(model_template())
    chats = [p for p in json.loads(REFERENCE.read_text())["prompts"] if p["kind"] == "chat"]
    assert len(chats) == 15
    for p in chats:
        rendered = template.render(messages=p["messages"], add_generation_prompt=True,
                                   bos_token="", eos_token="")
        assert rendered == p["text"], p["messages"]
