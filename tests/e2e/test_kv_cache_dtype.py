"""A q8_0 KV cache served end to end (issue 38): `troupe serve --kv-cache-dtype q8_0` holds
128/68 the blocks of the f16 cache in the same memory, says so in /v1/models, `troupe admin
stats` and its start-up log, and its greedy completions of the 20 reference prompts, sent
together, equal llama.cpp's with `-ctk q8_0 -ctv q8_0 -fa on` (tests/reference/
smollm2_kv_q8_greedy.json, up to the first end-of-generation token, where the server stops)."""
import concurrent.futures
import json
import pathlib
import subprocess
import time

import openai
import pytest
import requests

from conftest import BINARY, Server

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = json.loads((ROOT / "tests" / "reference" / "smollm2_kv_q8_greedy.json").read_text())
# The same model's end-of-generation ids (the q8_0 file's prompts and model are those of this one).
EOG = set(json.loads((ROOT / "tests" / "reference" / "smollm2_greedy.json").read_text())
          ["info"]["eog_ids"])
MODEL_ID = "SmolLM2-135M-Instruct"
# SmolLM2's block of 16 tokens over 30 layers, 3 KV heads of 64: 368,640 bytes in f16, 195,840
# in q8_0 (34 bytes per 32 values); the default cpu.kv_memory_mb is 256.
F16_BLOCKS = (256 << 20) // 368640
Q8_BLOCKS = (256 << 20) // 195840


@pytest.fixture(scope="module")
def q8(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kv_q8")
    server = Server("--kv-cache-dtype", "q8_0", "--admin-socket", str(directory / "admin.sock"),
                    log_path=directory / "troupe.log").wait_ready()
    server.admin_socket = directory / "admin.sock"
    yield server
    server.stop()


def test_the_model_card_and_the_log_give_the_capacity(q8):
    kv = requests.get(q8.base_url + "/v1/models", timeout=30).json()["data"][0]["meta"]["kv_cache"]
    assert kv["dtype"] == "q8_0"
    assert kv["blocks"] == Q8_BLOCKS and Q8_BLOCKS > 1.85 * F16_BLOCKS
    assert kv["block_size"] == 16 and kv["tokens"] == 16 * Q8_BLOCKS
    assert kv["conversation_tokens"] == 8192  # SmolLM2's context length (max_model_len 0)
    assert kv["conversations"] == Q8_BLOCKS // (8192 // 16)
    assert f"{Q8_BLOCKS} blocks of 16 tokens" in q8.read_log()
    assert "(q8_0," in q8.read_log()


def test_the_cache_config_metric_names_the_dtype(q8):
    text = requests.get(q8.base_url + "/metrics", timeout=30).text
    line = next(l for l in text.splitlines() if l.startswith("vllm:cache_config_info{"))
    assert 'cache_dtype="q8_0"' in line and f'num_gpu_blocks="{Q8_BLOCKS}"' in line, line


def test_admin_stats_give_the_capacity(q8):
    deadline = time.time() + 10
    while not q8.admin_socket.exists() and time.time() < deadline:
        time.sleep(0.05)
    out = subprocess.run([str(BINARY), "admin", "--socket", str(q8.admin_socket), "--json",
                          "stats"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert stats["kv_cache"]["dtype"] == "q8_0"
    assert stats["kv_cache"]["blocks"] == Q8_BLOCKS


def expected(prompt):
    ids = []
    for token in prompt["generated_ids"]:
        if token in EOG:
            break
        ids.append(token)
    return ids


def test_twenty_concurrent_completions_equal_llama_cpp_with_its_q8_0_cache(q8):
    client = openai.OpenAI(base_url=q8.base_url + "/v1", api_key="unused", max_retries=0)
    n = REFERENCE["n_generated"]

    def complete(prompt):
        answer = client.completions.create(model=MODEL_ID, prompt=prompt["prompt_ids"],
                                           max_tokens=n, temperature=0, logprobs=1)
        return answer.choices[0]

    with concurrent.futures.ThreadPoolExecutor(len(REFERENCE["prompts"])) as pool:
        choices = list(pool.map(complete, REFERENCE["prompts"]))
    for prompt, choice in zip(REFERENCE["prompts"], choices):
        ids = expected(prompt)
        text = requests.post(q8.base_url + "/detokenize", json={"tokens": ids},
                             timeout=30).json()["prompt"]
        assert choice.text == text, (prompt.get("text", "")[:40], prompt["f16_first_difference"])
        assert choice.finish_reason == ("length" if len(ids) == n else "stop")


def test_a_cuda_only_format_is_refused_by_name(tmp_path):
    server = Server("--kv-cache-dtype", "fp8_e4m3", "--backend", "cpu",
                    log_path=tmp_path / "troupe.log")
    assert server.process.wait(timeout=60) != 0
    log = server.read_log()
    server.stop()
    assert 'cache.kv_dtype "fp8_e4m3" needs the CUDA backend' in log, log
    assert "CPU backend (configured)" in log, log  # and why the CUDA one was not taken
