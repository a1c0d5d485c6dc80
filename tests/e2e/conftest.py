"""Shared fixtures for the end-to-end tests: a real `troupe serve` on a free port with the
default model, driven by real clients."""
import os
import re
import pathlib
import signal
import socket
import subprocess
import time

import openai
import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = pathlib.Path(os.environ.get("TROUPE_BINARY", ROOT / "build" / "bin" / "troupe"))
MODEL = pathlib.Path(os.environ.get("TROUPE_TEST_MODEL",
                                    ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A troupe process; stops it on exit and keeps its log for failure reports."""

    def __init__(self, *extra_args, log_path, preexec_fn=None):
        """`preexec_fn` runs in the child before exec (e.g. to lower its resource limits)."""
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        # Each server its own storage.dir (files, batches), beside its log, unless the test names
        # one: a shared one would let one test's batches run in another test's server.
        storage = []
        if not any(str(a) == "--storage-dir" or str(a).startswith("storage.dir") for a in extra_args):
            storage = ["--storage-dir", str(pathlib.Path(log_path).parent / f"{pathlib.Path(log_path).stem}-storage")]
        args = [str(BINARY), "serve", "--model", str(MODEL), "--port", str(self.port), *storage,
                *extra_args]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
                                        preexec_fn=preexec_fn)

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"troupe exited with {self.process.returncode}: {self.read_log()}")
            try:
                if requests.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"troupe not ready after {timeout}s: {self.read_log()}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode

    def read_log(self):
        self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")


@pytest.fixture(scope="session", autouse=True)
def _check_prerequisites():
    if not BINARY.exists():
        pytest.exit(f"troupe binary not found at {BINARY}; build first (scripts/build)", 1)
    if not MODEL.exists():
        pytest.exit(f"default model not found at {MODEL}; run scripts/setup", 1)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One shared server for read-only tests."""
    s = Server(log_path=tmp_path_factory.mktemp("server") / "troupe.log").wait_ready()
    yield s
    s.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "structured_output: needs a server built with xgrammar; skipped where the "
        "server answers constrained requests with its 'not built' 400 (-DTROUPE_XGRAMMAR=OFF)")


NOT_BUILT = "structured output is not built into this server"


@pytest.fixture(scope="session")
def structured_output_built(server):
    """Whether the shared server has structured output, probed once. A server built without
    xgrammar must answer with its clean 400 naming the field; anything else fails the probe, so
    a broken build can never pass for one without xgrammar."""
    r = requests.post(server.base_url + "/v1/completions",
                      json={"prompt": "x", "max_tokens": 1,
                            "structured_outputs": {"choice": ["a"]}}, timeout=120)
    if r.status_code == 200:
        return True
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "structured_outputs" \
        and NOT_BUILT in error["message"], r.text
    return False


@pytest.fixture(autouse=True)
def _skip_without_structured_output(request):
    if request.node.get_closest_marker("structured_output") is None:
        return
    if not request.getfixturevalue("structured_output_built"):
        pytest.skip(f"this server is built without xgrammar: '{NOT_BUILT}' "
                    "(test_schema_suite.py checks that 400)")


def wait_until(predicate, what, timeout=120):
    """Polls `predicate` (an event the test cannot be told of) until it holds; fails naming
    `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def skip_unless_prompt_outputs(response):
    """Only the CPU backend computes prompt outputs (embeddings, prompt logprobs) so far: a
    server on another one (a CUDA device present) refuses them with a 400 naming that backend,
    and the calling module skips. Any other answer goes on to the tests, so a broken CPU server
    can never pass for that."""
    if response.status_code != 400:
        return
    message = response.json()["error"]["message"]
    m = re.search(r"not supported by the (\S+) backend", message)
    if m and m.group(1) != "cpu":
        pytest.skip(f"the server's backend has no prompt outputs: {message}")


@pytest.fixture
def client(server):
    """The official `openai` client against the shared server."""
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture
def start_server(tmp_path):
    """Starts a dedicated server (for tests that stop or break it)."""
    started = []

    def start(*args, **kwargs):
        s = Server(*args, log_path=tmp_path / f"troupe{len(started)}.log", **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
