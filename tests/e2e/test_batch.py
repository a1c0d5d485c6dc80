"""POST /v1/batch end to end (issue 6): a 100-item JSONL batch with some bad items gets one
result per item, in input order, and the bad items do not fail the others."""
import json

import pytest
import requests

from test_openai_api import MODEL_ID


def item(i):
    if i % 10 == 3:
        return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                           "body": {"messages": [{"role": "user", "content": "hi"}], "temperature": 9}})
    if i % 10 == 7:
        return "{this is not json"
    url, body = (("/v1/chat/completions", {"messages": [{"role": "user", "content": f"Count to {i}."}]})
                 if i % 2 else ("/v1/completions", {"prompt": f"Number {i}:"}))
    body.update(model=MODEL_ID, max_tokens=4, temperature=0)
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": body})


def test_jsonl_batch_of_100_with_bad_items(server):
    lines = [item(i) for i in range(100)]
    r = requests.post(server.base_url + "/v1/batch", data="\n".join(lines).encode(),
                      headers={"Content-Type": "application/jsonl"}, timeout=600)
    assert r.status_code == 200
    results = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    assert len(results) == 100
    for i, result in enumerate(results):
        if i % 10 == 7:
            assert result["response"] is None and result["error"]["code"] == "invalid_json"
            continue
        assert result["custom_id"] == f"r{i}"
        if i % 10 == 3:
            assert result["response"]["status_code"] == 400
            assert result["response"]["body"]["error"]["param"] == "temperature"
        else:
            assert result["response"]["status_code"] == 200, result
            body = result["response"]["body"]
            assert body["object"] == ("chat.completion" if i % 2 else "text_completion")
            assert body["usage"]["completion_tokens"] <= 4


def test_json_batch_and_limits(server):
    requests_ = [{"custom_id": "a", "url": "/v1/completions",
                  "body": {"prompt": "Hi", "max_tokens": 2}}]
    r = requests.post(server.base_url + "/v1/batch", json={"requests": requests_}, timeout=120)
    assert r.status_code == 200
    assert r.json()["data"][0]["response"]["status_code"] == 200
    assert requests.post(server.base_url + "/v1/batch", data=b"\n",
                         headers={"Content-Type": "application/jsonl"}, timeout=10).status_code == 400
    too_many = "\n".join([json.dumps({"custom_id": str(i), "url": "/v1/completions",
                                      "body": {"prompt": "x"}}) for i in range(5000)])
    r = requests.post(server.base_url + "/v1/batch", data=too_many.encode(),
                      headers={"Content-Type": "application/jsonl"}, timeout=10)
    assert r.status_code in (400, 413)
    assert r.json()["error"]["code"] == "batch_too_large"
