"""/metrics as the Gateway API Inference Extension's endpoint picker and llm-d read it (issue
20; the extension's model-server protocol): parsed with Prometheus's own text parser
(prometheus_client), names, types and labels exactly as vLLM exposes them."""
import threading
import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def scrape(server):
    r = requests.get(server.base_url + "/metrics", timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(r.text)}


def only_sample(family):
    assert len(family.samples) == 1, family.samples
    return family.samples[0]


def test_the_endpoint_pickers_metrics(server):
    families = scrape(server)
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running",
                 "vllm:kv_cache_usage_perc"):
        assert families[name].type == "gauge", name
        assert only_sample(families[name]).value >= 0
    assert 0 <= only_sample(families["vllm:kv_cache_usage_perc"]).value <= 1

    # LoRA state: present with no adapters (a picker marks a pod without it unable to serve),
    # its value the time of the last update.
    lora = families["vllm:lora_requests_info"]
    assert lora.type == "gauge"
    sample = only_sample(lora)
    assert sample.labels["max_lora"] == "0"
    assert sample.labels["running_lora_adapters"] == ""
    assert sample.labels["waiting_lora_adapters"] == ""
    assert abs(sample.value - time.time()) < 300

    # The cache config the prefix-cache scorer reads: block size and number of blocks.
    cache = families["vllm:cache_config_info"]
    assert cache.type == "gauge"
    sample = only_sample(cache)
    assert sample.value == 1
    assert sample.labels["block_size"] == "16"
    total = only_sample(families["troupe:kv_blocks_total"]).value
    assert int(sample.labels["num_gpu_blocks"]) == total > 0
    assert sample.labels["enable_prefix_caching"] == "True"
    assert sample.labels["cache_dtype"] == "f16"

    # KV-event publisher counters (the parser names a counter family without "_total").
    for name in ("troupe:kv_events_published", "troupe:kv_events_dropped"):
        assert families[name].type == "counter", name
        assert only_sample(families[name]).name == name + "_total"


def test_queue_depth_moves_with_load(server):
    """vllm:num_requests_running counts a request while it generates."""
    done = threading.Event()

    def generate():
        requests.post(server.base_url + "/v1/completions",
                      json={"prompt": "Count slowly:", "max_tokens": 200, "ignore_eos": True},
                      timeout=300)
        done.set()

    threading.Thread(target=generate, daemon=True).start()
    seen = 0
    while not done.is_set() and not seen:
        seen = only_sample(scrape(server)["vllm:num_requests_running"]).value
    assert seen >= 1  # 200 tokens take seconds here: many scrapes see it running
    assert done.wait(300)
