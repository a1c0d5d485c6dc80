"""Credential rotation without a restart (issue 41): SIGHUP and `troupe admin reload` re-read the
API keys file and the TLS certificate and key. Real TLS clients (httpx, Python's ssl) keep a
server busy across the rotation: no request fails, a streamed answer begun before it finishes,
new connections meet the new certificate and the new keys, and a file that cannot be used is
refused with a log line while the credentials in force stay."""
import hashlib
import os
import signal
import ssl
import subprocess
import threading
import time

import httpx
import pytest

from conftest import BINARY, wait_until
from test_auth import make_certificate, wait_ready_tls

MODEL_ID = "SmolLM2-135M-Instruct"
STAY, OLD, NEW = "sk-rotate-stay-1111", "sk-rotate-old-2222", "sk-rotate-new-3333"


def served_fingerprint(port):
    """SHA-256 of the certificate a new TLS connection to the server meets."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def fingerprint(cert_path):
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_path.read_text())).hexdigest()


def replace_file(path, content):
    """Atomically, as a deployment's secret update does (a rename, never a half-written file)."""
    staged = path.with_suffix(".staged")
    staged.write_bytes(content)
    os.replace(staged, path)


def status_with(base_url, trust, key):
    """A fresh TLS connection's answer to one short request with `key`."""
    with httpx.Client(verify=ssl.create_default_context(cafile=trust), timeout=120) as http:
        return http.post(base_url + "/v1/completions", headers={"Authorization": f"Bearer {key}"},
                         json={"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1}).status_code


def admin_reload(sock):
    return subprocess.run([str(BINARY), "admin", "--socket", str(sock), "reload"],
                          capture_output=True, text=True, timeout=60)


class Load:
    """Threads sending short completions with a key valid before and after the rotation, each
    over a new TLS connection, so every one of them meets whichever certificate is in force."""

    def __init__(self, base_url, trust, threads=3):
        self.base_url, self.trust = base_url, trust
        self.stop = threading.Event()
        self.ok, self.failures = 0, []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                status = status_with(self.base_url, self.trust, STAY)
                with self.lock:
                    if status == 200:
                        self.ok += 1
                    else:
                        self.failures.append(status)
            except Exception as e:  # a TLS or connection failure is what must not happen
                with self.lock:
                    self.failures.append(repr(e))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)


@pytest.fixture
def rotating(start_server, tmp_path):
    """A TLS server with a keys file; both certificates are trusted by the clients."""
    # Distinct subjects: two trust anchors of one name would leave the issuer to chance.
    cert_a, key_a = make_certificate(tmp_path, "a", "/CN=127.0.0.1/O=rotation-a")
    cert_b, key_b = make_certificate(tmp_path, "b", "/CN=127.0.0.1/O=rotation-b")
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    cert.write_bytes(cert_a.read_bytes())
    key.write_bytes(key_a.read_bytes())
    trust = tmp_path / "trust.pem"
    trust.write_bytes(cert_a.read_bytes() + cert_b.read_bytes())
    keys = tmp_path / "keys"
    keys.write_text(f"stay:{STAY}\nold:{OLD}\n")
    sock = tmp_path / "admin.sock"
    server = start_server("--ssl-cert", str(cert), "--ssl-key", str(key), "--set",
                          f"api.keys_file={keys}", "--admin-socket", str(sock))
    server.base_url = f"https://127.0.0.1:{server.port}"
    wait_ready_tls(server, trust)
    server.files = dict(cert=cert, key=key, keys=keys, sock=sock, trust=str(trust),
                        a=(cert_a, key_a), b=(cert_b, key_b))
    return server


def test_sighup_rotates_keys_and_certificate_under_load(rotating):
    f = rotating.files
    cert_a, _ = f["a"]
    cert_b, key_b = f["b"]
    assert served_fingerprint(rotating.port) == fingerprint(cert_a)
    assert status_with(rotating.base_url, f["trust"], OLD) == 200

    # A streamed answer that begins before the rotation and ends after it, on its old connection.
    stream_http = httpx.Client(verify=ssl.create_default_context(cafile=f["trust"]), timeout=300)
    response = stream_http.send(
        stream_http.build_request(
            "POST", rotating.base_url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {OLD}"},
            json={"model": MODEL_ID, "stream": True, "max_tokens": 160, "temperature": 0,
                  "ignore_eos": True, "messages": [{"role": "user", "content": "Count to 100."}]}),
        stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    first = next(line for line in lines if line.startswith("data: "))
    assert first != "data: [DONE]"

    load = Load(rotating.base_url, f["trust"])
    try:
        wait_until(lambda: load.ok >= 3, "the load to get going", timeout=120)
        replace_file(f["cert"], cert_b.read_bytes())
        replace_file(f["key"], key_b.read_bytes())
        replace_file(f["keys"], f"stay:{STAY}\nnew:{NEW}\n".encode())
        rotating.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload tls: certificate" in rotating.read_log(), "the reload's log line",
                   timeout=60)
        assert served_fingerprint(rotating.port) == fingerprint(cert_b)
        ok_before = load.ok
        wait_until(lambda: load.ok >= ok_before + 3, "load over the new certificate", timeout=120)
    finally:
        load.finish()
    assert load.failures == [], load.failures[:5]

    # The stream begun under the old key and certificate finished.
    rest = [line for line in lines if line.startswith("data: ")]
    response.close()
    stream_http.close()
    assert rest and rest[-1] == "data: [DONE]", rest[-3:]
    assert len(rest) > 100  # every token after the rotation arrived

    assert status_with(rotating.base_url, f["trust"], NEW) == 200
    assert status_with(rotating.base_url, f["trust"], OLD) == 401
    log = rotating.read_log()
    assert "reload api_keys: 2 keys in force" in log, log[-2000:]
    for secret in (STAY, OLD, NEW):
        assert secret not in log


def test_unusable_files_are_refused_and_the_old_credentials_stay(rotating):
    f = rotating.files
    cert_a, _ = f["a"]
    sock = f["sock"]

    # A certificate that is not PEM, and a keys file with a malformed line.
    replace_file(f["cert"], b"-----BEGIN CERTIFICATE-----\nnot a certificate\n")
    replace_file(f["keys"], f"stay:{STAY}\nbad key with spaces\n".encode())
    r = admin_reload(sock)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "api_keys: REFUSED" in r.stderr and "line 2" in r.stderr, r.stderr
    assert "tls: REFUSED" in r.stderr and "server.crt" in r.stderr, r.stderr
    assert served_fingerprint(rotating.port) == fingerprint(cert_a)
    assert status_with(rotating.base_url, f["trust"], OLD) == 200  # the old keys still rule
    log = rotating.read_log()
    assert "reload api_keys refused" in log and "reload tls refused" in log, log[-2000:]

    # An emptied keys file would open the server to anyone: refused too.
    replace_file(f["keys"], b"# rotated out\n")
    r = admin_reload(sock)
    assert r.returncode == 1 and "would open the API to anyone" in r.stderr, r.stderr
    assert status_with(rotating.base_url, f["trust"], "sk-nobody") == 401

    # Good files again: the admin command puts them in force and says so.
    cert_b, key_b = f["b"]
    replace_file(f["cert"], cert_b.read_bytes())
    replace_file(f["key"], key_b.read_bytes())
    replace_file(f["keys"], f"new:{NEW}\n".encode())
    r = admin_reload(sock)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "api_keys: 1 keys in force (were 2)" in r.stdout, r.stdout
    assert "tls: certificate" in r.stdout, r.stdout
    assert served_fingerprint(rotating.port) == fingerprint(cert_b)
    assert status_with(rotating.base_url, f["trust"], NEW) == 200
    assert status_with(rotating.base_url, f["trust"], STAY) == 401
