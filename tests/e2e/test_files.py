"""OpenAI's Files API on the durable store (issue 40, first part): the official `openai` client
uploads, lists (paged), retrieves, downloads and deletes; files survive a restart (kill -9
included); each API key sees only its own files; an unusable storage.dir stops the server at
start, naming it; an upload past storage.max_file_bytes is a 413."""
import json
import signal
import subprocess

import openai
import pytest
import requests

from conftest import BINARY, MODEL

LINES = [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
          "body": {"messages": [{"role": "user", "content": f"Say {i}\r\nthen stop."}],
                   "max_tokens": 4}} for i in range(3)]
JSONL = ("\n".join(json.dumps(line) for line in LINES) + "\n").encode()


def client_of(server, key="unused"):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def storage(tmp_path):
    return tmp_path / "storage"


def test_upload_list_retrieve_download_delete(start_server, storage, tmp_path):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(server)
    path = tmp_path / "batch.jsonl"
    path.write_bytes(JSONL)
    created = [client.files.create(file=open(path, "rb"), purpose="batch") for _ in range(3)]
    f = created[0]
    assert f.id.startswith("file-") and f.object == "file" and f.purpose == "batch"
    assert f.bytes == len(JSONL) and f.filename == "batch.jsonl"
    assert client.files.retrieve(f.id) == f
    assert client.files.content(f.id).read() == JSONL
    # newest first, two a page, the client's cursor follows `after`
    first = client.files.list(limit=2)
    assert [x.id for x in first.data] == [created[2].id, created[1].id] and first.has_more
    assert [x.id for x in client.files.list(limit=2, after=created[1].id).data] == [f.id]
    assert [x.id for x in client.files.list(limit=2)] == \
        [x.id for x in reversed(created)]
    assert [x.id for x in client.files.list(order="asc").data] == [x.id for x in created]
    assert client.files.list(purpose="batch").data and not client.files.list(purpose="evals").data
    deleted = client.files.delete(f.id)
    assert deleted.deleted and deleted.id == f.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(f.id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(f.id)


def test_bad_uploads_are_400s_naming_the_field(start_server, storage):
    server = start_server("--storage-dir", str(storage), "--set", "storage.max_file_bytes=100").wait_ready()
    client = client_of(server)
    with pytest.raises(openai.BadRequestError) as bad:
        client.files.create(file=("a.jsonl", b"{}\n"), purpose="fine-tune")
    assert bad.value.body["param"] == "purpose"
    r = requests.post(server.base_url + "/v1/files", files={"file": ("a.jsonl", b"{}\n")}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose", r.text
    r = requests.post(server.base_url + "/v1/files", data={"purpose": "batch"}, timeout=30)
    assert r.status_code == 400, r.text
    r = requests.post(server.base_url + "/v1/files", data=b"not multipart",
                      headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text
    r = requests.post(server.base_url + "/v1/files", data={"purpose": "batch", "extra": "x"},
                      files={"file": ("a.jsonl", b"{}\n")}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "extra", r.text
    with pytest.raises(openai.APIStatusError) as big:
        client.files.create(file=("big.jsonl", b"x" * 101), purpose="batch")
    assert big.value.status_code == 413
    assert client.files.create(file=("ok.jsonl", b"x" * 100), purpose="batch").bytes == 100
    r = requests.get(server.base_url + "/v1/files?limit=0", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "limit"
    r = requests.get(server.base_url + "/v1/files?order=sideways", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "order"


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL])
def test_files_survive_a_restart(start_server, storage, stop_signal):
    server = start_server("--storage-dir", str(storage)).wait_ready()
    created = client_of(server).files.create(file=("kept.jsonl", JSONL), purpose="batch")
    server.stop(stop_signal)
    again = start_server("--storage-dir", str(storage)).wait_ready()
    client = client_of(again)
    assert client.files.retrieve(created.id) == created
    assert client.files.content(created.id).read() == JSONL


def test_each_key_sees_only_its_own_files(start_server, storage, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("blue:sk-files-blue-1\nred:sk-files-red-2\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"api": {"keys_file": str(keys)}}))
    server = start_server("--storage-dir", str(storage), "--config", str(config)).wait_ready()
    blue, red = client_of(server, "sk-files-blue-1"), client_of(server, "sk-files-red-2")
    mine = blue.files.create(file=("blue.jsonl", JSONL), purpose="batch")
    assert [f.id for f in blue.files.list().data] == [mine.id]
    assert red.files.list().data == []
    for attempt in (red.files.retrieve, red.files.content, red.files.delete):
        with pytest.raises(openai.NotFoundError):
            attempt(mine.id)
    assert blue.files.content(mine.id).read() == JSONL
    with pytest.raises(openai.AuthenticationError):
        client_of(server, "sk-wrong").files.list()


def test_an_unusable_storage_dir_stops_the_start_naming_it(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    result = subprocess.run([str(BINARY), "serve", "--model", str(MODEL), "--port", "0",
                             "--storage-dir", str(blocker / "storage")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert str(blocker / "storage") in result.stdout + result.stderr, result.stdout + result.stderr
