#!/usr/bin/env python3
"""Produce troupe's llama-server reference data for /v1/embeddings on SmolLM2-135M-Instruct (Q4_1).

Run by hand (CI never does) from the repository root, with the project's reference build of
llama.cpp (bench/build_peer.sh parity builds build-peer-parity/bin/llama-server):

  LD_LIBRARY_PATH=build-peer-parity/bin \\
      python3 tests/reference/make_embeddings_reference.py [MODEL.gguf] [LLAMA_SERVER]

Only the standard library is needed (the model's BOS/EOS ids are read from the GGUF with the
`gguf` package when it is importable, else from llama-server's /props). It starts llama-server
three times, each with

  --embeddings --pooling P -m MODEL --port PORT -t 2 -c 2048 -np 1 --no-repack -fa off

(P = mean, last, cls), and always stops it again. With --pooling mean it POSTs each of 20 inputs
(words, sentences, code, Unicode and emoji, a ~300-token paragraph, ChatML special-token text,
leading spaces, numbers, two paraphrases and an unrelated sentence) to /v1/embeddings twice: with
the default normalization (embd_normalize 2, Euclidean) and with "embd_normalize": -1 (the raw
pooled vector). The token ids are llama-server's own /tokenize of the text with add_special and
parse_special on, which is how /v1/embeddings tokenizes; the script checks that their count is the
embeddings call's usage.prompt_tokens. With --pooling last and --pooling cls it records the
normalized embedding of the first 5 inputs. Floats are rounded to 7 significant digits.
llama-server's own warnings (W/E log lines, e.g. that with --embeddings it clamps n_batch to
n_ubatch = 512, so each input must fit one 512-token ubatch) are kept in info.

It writes smollm2_embeddings.json next to this script:
  {"info": {...}, "mean": [{"text", "token_ids", "normalized", "raw"}, ...],
   "last": [{"text", "token_ids", "normalized"}, ...], "cls": [...]}
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_SERVER = os.path.join(ROOT, "build-peer-parity", "bin", "llama-server")
N_SUBSET = 5  # inputs embedded with --pooling last and --pooling cls

PARAGRAPH = (
    "The history of the printing press is often told as the story of a single inventor, but the "
    "technology grew out of many older crafts. Goldsmiths already knew how to cut hard punches "
    "and cast soft metals; winemakers and papermakers had used screw presses for centuries; and "
    "scribes in monasteries and universities had developed careful conventions for laying out a "
    "page. When Johannes Gutenberg began experimenting in Mainz around 1440, he combined these "
    "skills into a system: a hand mould that could cast thousands of identical letters, an "
    "oil-based ink that clung to metal, and a press that applied even pressure across a whole "
    "sheet. The result was not immediately cheap, since a large Bible still took years to "
    "produce, but it was repeatable. Within fifty years printing shops had spread to more than "
    "two hundred cities across Europe, and millions of books were in circulation. Prices fell, "
    "literacy slowly rose, and scholars could compare identical copies of a text instead of "
    "arguing over the errors of individual manuscripts. Printers also became publishers, "
    "choosing what to print, correcting proofs, and inventing the title page, the index, and "
    "page numbers. Religious reformers, scientists, and merchants all used the new medium to "
    "reach readers they would never meet. Historians still debate how much the press caused "
    "these changes and how much it merely accelerated trends already under way, yet few doubt "
    "that the way people stored, shared, and questioned knowledge was transformed within a few "
    "generations."
)

INPUTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Café ☕ and croissants 🥐 in Zürich — 你好，世界！ 👋🌍",
    PARAGRAPH,
    "<|im_start|>user\nHello there!<|im_end|>\n",
    "   leading spaces and a\ttab",
    "In 2023 the population was 8,045,311,447 and grew by 0.88% (about 70.2 million people).",
    "The cat is sleeping on the warm windowsill.",
    "A cat naps on the sunny window ledge.",
    "Quarterly tax filings are due at the end of April.",
    "a",
    '{"name": "Ada", "languages": ["C++", "Python"], "active": true, "age": 36}',
    "Shopping list:\n- eggs\n- flour\n- 2 litres of milk\n",
    "Bonjour, comment allez-vous aujourd'hui ?",
    "Привет, как дела? Сегодня хорошая погода.",
    "SmolLM2 is a family of compact language models.",
    "text<|im_end|>more<|endoftext|>",
    "Line one\n\nLine two\n",
]


def sig7(x):
    return float(f"{x:.7g}")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """llama-server with the given pooling; its log is kept in memory (self.log)."""

    def __init__(self, binary, model, pooling):
        self.port = free_port()
        self.args = ["--embeddings", "--pooling", pooling, "-m", model, "--port", str(self.port),
                     "-t", "2", "-c", "2048", "-np", "1", "--no-repack", "-fa", "off"]
        self.log = []
        self.proc = subprocess.Popen([binary] + self.args, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("llama-server exited:\n" + "\n".join(self.log[-40:]))
            try:
                if get(self.port, "/health").get("status") == "ok":
                    return
            except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError("llama-server did not become ready:\n" + "\n".join(self.log[-40:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)

    def warnings(self):
        """The log's warning and error lines (level W or E), timestamps dropped."""
        out = []
        for ln in self.log:
            m = re.match(r"^\s*[\d.]+ ([WE]) (.*)$", ln)
            if m:
                out.append(m.group(1) + " " + " ".join(m.group(2).split()))
            elif any(k in ln.lower() for k in ("warning", "error", "invalid argument", "unknown")):
                out.append(ln.strip())
        return out


def tokenize(port, text, add_special=True):
    r = post(port, "/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
    return [t if isinstance(t, int) else t["id"] for t in r["tokens"]]


def embed(port, text, normalize):
    body = {"input": text, "encoding_format": "float"}
    if normalize is not None:
        body["embd_normalize"] = normalize
    r = post(port, "/v1/embeddings", body)
    assert len(r["data"]) == 1, r.keys()
    return r["data"][0]["embedding"], r["usage"]["prompt_tokens"]


def run_pooling(binary, model, pooling, texts, with_raw):
    srv = Server(binary, model, pooling)
    try:
        srv.wait_ready()
        props = get(srv.port, "/props")
        out = []
        for text in texts:
            ids = tokenize(srv.port, text)
            normalized, n_prompt = embed(srv.port, text, None)
            assert n_prompt == len(ids), (pooling, text, n_prompt, len(ids))
            entry = {"text": text, "token_ids": ids, "normalized": [sig7(x) for x in normalized]}
            # the tokens add_special put around the text's own (none when the lists are equal)
            plain = tokenize(srv.port, text, add_special=False)
            if ids != plain:
                entry["added_special"] = {"plain_ids": plain}
            if with_raw:
                raw, n_raw = embed(srv.port, text, -1)
                assert n_raw == len(ids), (pooling, text, n_raw, len(ids))
                entry["raw"] = [sig7(x) for x in raw]
            out.append(entry)
            print(f"{pooling:4s} {len(ids):4d} tokens  {text[:40]!r}", file=sys.stderr)
    finally:
        srv.stop()
    for ln in srv.warnings():
        print(f"[{pooling}] {ln}", file=sys.stderr)
    return out, srv.args, props, srv.warnings()


def special_ids(model, props):
    """BOS/EOS ids and add-BOS/add-EOS flags from the GGUF metadata."""
    try:
        import gguf
        r = gguf.GGUFReader(model)

        def val(key):
            f = r.fields.get(key)
            return None if f is None else f.contents()

        bos, eos = val("tokenizer.ggml.bos_token_id"), val("tokenizer.ggml.eos_token_id")
        tokens = val("tokenizer.ggml.tokens")
        return {"bos": bos, "eos": eos, "bos_text": tokens[bos], "eos_text": tokens[eos],
                "gguf_add_bos_token": val("tokenizer.ggml.add_bos_token"),
                "gguf_add_eos_token": val("tokenizer.ggml.add_eos_token")}
    except ImportError:
        return {"bos": None, "eos": None, "props_bos_token": props.get("bos_token"),
                "props_eos_token": props.get("eos_token")}


def main():
    model = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL)
    binary = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_SERVER
    version = subprocess.run([binary, "--version"], capture_output=True, text=True)
    version = " ".join((version.stdout + version.stderr).split("\n")[-3:]).strip()

    mean, args, props, warn_mean = run_pooling(binary, model, "mean", INPUTS, with_raw=True)
    last, _, _, warn_last = run_pooling(binary, model, "last", INPUTS[:N_SUBSET], with_raw=False)
    cls, _, _, warn_cls = run_pooling(binary, model, "cls", INPUTS[:N_SUBSET], with_raw=False)
    for e in last + cls:  # same tokenization under every pooling
        assert e["token_ids"] == mean[INPUTS.index(e["text"])]["token_ids"]

    sp = special_ids(model, props)
    added = [e for e in mean + last + cls if "added_special" in e]
    info = {
        "model": os.path.basename(model),
        "server": "llama-server " + version,
        "server_flags": ["--embeddings", "--pooling", "mean|last|cls", "-m", os.path.basename(model),
                         "--port", "PORT"] + args[args.index("--port") + 2:],
        "server_build_info": props.get("build_info"),
        "n_embd": len(mean[0]["normalized"]),
        "tokenization": "POST /tokenize {content, add_special: true, parse_special: true}; its "
                        "count equals /v1/embeddings usage.prompt_tokens for every input",
        "normalized": "POST /v1/embeddings {input, encoding_format: float} (embd_normalize 2, "
                      "Euclidean norm 1)",
        "raw": "same with \"embd_normalize\": -1 (the pooled vector, unnormalized)",
        "rounding": "7 significant digits",
        "last_and_cls": f"the first {N_SUBSET} inputs, normalized only",
        **sp,
        "bos_or_eos_added": bool(added),
        "special_tokens_note": (
            "llama-server adds no BOS and no EOS to these inputs (add_special on and off give "
            "the same ids; the GGUF says add_bos_token false). token_ids are the text's own "
            "tokens, with <|im_start|> (id 1, the bos id), <|im_end|> (id 2, the eos id) and "
            "<|endoftext|> (id 0) in the text parsed as special tokens"
            if not added else
            f"add_special changed the ids of {len(added)} inputs: see their added_special"),
        "n_tokens": [len(e["token_ids"]) for e in mean],
        "server_log_warnings": {"mean": warn_mean, "last": warn_last, "cls": warn_cls},
    }
    data = {"info": info, "mean": mean, "last": last, "cls": cls}
    path = os.path.join(HERE, "smollm2_embeddings.json")
    with open(path, "w") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
