"""cpu.prefill_attention = "bf16": a server on a CPU with AVX512-BF16 serves a long prompt with
bf16 attention (its log says so) and still answers it right; where the kernels cannot run (here:
the ISA capped at AVX2) it refuses to start and names the setting."""
import json
import pathlib

import openai
import pytest

MODEL_ID = "SmolLM2-135M-Instruct"


def cpu_has_bf16():
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    return "avx512_bf16" in flags and "avx512_vnni" in flags


def long_prompt():
    facts = ["Paris is the capital of France.", "Water boils at 100 degrees Celsius.",
             "The Moon orbits the Earth.", "Bees make honey from nectar.",
             "Rome is the capital of Italy.", "Ice melts at 0 degrees Celsius."]
    lines = [f"Fact {i + 1}: {facts[i % 6]}" for i in range(150)]
    return "\n".join(lines) + "\nFact 151: Paris is the capital of"


def bf16_config(tmp_path):
    config = tmp_path / "bf16.json"
    config.write_text(json.dumps({"backend": "cpu", "cpu": {"prefill_attention": "bf16"}}))
    return config


def test_bf16_prefill_attention_serves_a_long_prompt(start_server, tmp_path):
    if not cpu_has_bf16():
        pytest.skip("no AVX512-BF16 on this CPU (the refusal is tested below)")
    server = start_server("--config", str(bf16_config(tmp_path))).wait_ready()
    assert "prompt attention in bf16" in server.read_log()
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    answer = client.completions.create(model=MODEL_ID, prompt=long_prompt(), max_tokens=2,
                                       temperature=0)
    assert answer.usage.prompt_tokens > 1200
    assert answer.choices[0].text.strip().startswith("France"), answer.choices[0].text


def test_bf16_prefill_attention_is_refused_where_it_cannot_run(start_server, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("TROUPE_CPU_ISA", "avx2")
    server = start_server("--config", str(bf16_config(tmp_path)))
    assert server.process.wait(timeout=60) != 0
    log = server.read_log()
    assert "prefill_attention" in log and "AVX512-BF16" in log, log
