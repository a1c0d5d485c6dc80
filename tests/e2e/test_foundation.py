"""The executable and the info endpoints, end to end (issue: foundation)."""
import signal
import subprocess

import requests

from conftest import BINARY, MODEL


def test_models_lists_the_default_model(server):
    r = requests.get(server.base_url + "/v1/models", timeout=5)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    (model,) = body["data"]
    assert model["id"] == "SmolLM2-135M-Instruct"
    assert model["object"] == "model"
    meta = model["meta"]
    assert meta["architecture"] == "llama"
    assert meta["num_layers"] == 30
    assert meta["context_length"] == 8192
    assert meta["quantization"] == "Q4_1"
    assert 130_000_000 < meta["num_parameters"] < 140_000_000


def test_health_is_ok(server):
    r = requests.get(server.base_url + "/health", timeout=5)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_retrieve_model_and_unknown_model(server):
    assert requests.get(server.base_url + "/v1/models/SmolLM2-135M-Instruct", timeout=5).status_code == 200
    r = requests.get(server.base_url + "/v1/models/gpt-4", timeout=5)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


def test_unknown_route_and_wrong_method(server):
    r = requests.get(server.base_url + "/nope", timeout=5)
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert requests.post(server.base_url + "/health", timeout=5).status_code == 405


def test_oversize_body_is_413_and_server_keeps_serving(server):
    r = requests.post(server.base_url + "/health", data=b"x" * (9 << 20), timeout=30)
    assert r.status_code == 413
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200


def test_sigterm_and_sigint_stop_cleanly(start_server):
    for sig in (signal.SIGTERM, signal.SIGINT):
        s = start_server().wait_ready()
        assert s.stop(sig) == 0, s.read_log()


def run_troupe(*args):
    return subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=30)


def test_version_and_help():
    r = run_troupe("--version")
    assert r.returncode == 0 and r.stdout.startswith("troupe ")
    r = run_troupe("--help")
    assert r.returncode == 0 and "troupe serve" in r.stdout
    r = run_troupe("serve", "--help")
    assert r.returncode == 0 and "--backend" in r.stdout


def test_usage_and_config_errors_exit_2_with_one_line(tmp_path):
    cases = [
        (["serve", "--bogus"], "unknown option"),
        (["serve", "--model", str(tmp_path / "missing.gguf")], "missing.gguf"),
        (["serve", "--model", str(MODEL), "--port", "99999"], "--port"),
        (["serve", "--model", str(MODEL), "--backend", "tpu"], "--backend"),
    ]
    bad_key = tmp_path / "bad_key.json"
    bad_key.write_text('{"http": {"prot": 1}}')
    cases.append((["serve", "--config", str(bad_key)], "http.prot"))
    bad_type = tmp_path / "bad_type.json"
    bad_type.write_text('{"http": {"port": "eighty"}}')
    cases.append((["serve", "--config", str(bad_type)], "http.port"))
    for args, needle in cases:
        r = run_troupe(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_corrupt_model_is_a_clear_error(tmp_path):
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(MODEL.read_bytes()[:100_000])
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_text("hello, I am not a model")
    for path, needle in ((truncated, "truncated"), (not_gguf, "not a GGUF file")):
        r = run_troupe("serve", "--model", str(path), "--port", "0")
        assert r.returncode == 1, r.stderr
        assert needle in (r.stdout + r.stderr)
