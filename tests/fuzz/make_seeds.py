#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz harnesses (tests/fuzz/corpus/<name>/).

Seeds are small, meaningful inputs in each harness's input format (see the comment at the top
of tests/fuzz/<name>_fuzz.cpp): valid requests of every kind, a few classic malformed ones,
and tiny synthetic GGUF files (never the real model). Run it after changing a harness's input
format. Inputs that once found a bug are kept beside the seeds as corpus/<name>/regression_*
(this script leaves them alone); the fuzzer's other discoveries are not committed (scripts/fuzz
works on a scratch copy).
"""
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent / "corpus"


def write(name, seeds):
    """Rewrites corpus/<name>/seed_*; the regression_* inputs (findings, kept) stay."""
    out = ROOT / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("seed_*"):
        old.unlink()
    for i, seed in enumerate(seeds):
        data = seed.encode("utf-8", "surrogatepass") if isinstance(seed, str) else seed
        (out / f"seed_{i:02d}").write_bytes(data)


def j(value):
    return json.dumps(value, ensure_ascii=False)


CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hello!"}]}
CHAT_FULL = {
    "model": "smollm2",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Name a colour"}]},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "And another, in Fran\u00e7ais? \U0001F600"},
    ],
    "max_tokens": 16, "max_completion_tokens": 8, "temperature": 0.7, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "seed": 42, "stop": ["\n\n", "END"], "stop_token_ids": [2],
    "logprobs": True, "top_logprobs": 3, "logit_bias": {"15339": -100, "42": 2.5},
    "min_tokens": 2, "n": 2, "stream": True, "stream_options": {"include_usage": True},
    "user": "alice", "priority": "high", "ignore_eos": False,
    "include_stop_str_in_output": True,
}
COMPLETION = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8}
COMPLETION_IDS = {"prompt": [[1, 2, 3, 4]], "logprobs": 2, "echo": False, "stop": "."}
BAD = [
    '{"messages": [{"role": "user", "content": "\\ud800"}]}',
    '{"messages": [], "n": 18446744073709551615}',
    '{"messages": [{"role": "", "content": 1}], "temperature": 1e309}',
    '{"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}',
    '{"prompt": "x", "logit_bias": {"-1": 1, "01": 2, "1e3": 3}}',
    '{"prompt": "x", "max_tokens": 0, "min_tokens": 5, "top_p": 0}',
    '{"messages": [{"role": "user", "content": "unterminated}',
    '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
    '{"prompt": "x", "stream": false, "stream_options": {"include_usage": true}}',
]


def openai_request_seeds():
    seeds = [b"\x00" + j(CHAT).encode(), b"\x02" + j(CHAT_FULL).encode(),
             b"\x01" + j(COMPLETION).encode(), b"\x03" + j(COMPLETION_IDS).encode()]
    seeds += [bytes([i % 4]) + s.encode() for i, s in enumerate(BAD)]
    return seeds


def json_input_seeds():
    return [j(CHAT), j(CHAT_FULL), j(COMPLETION), '{"a":[1,-0.5e+3,true,false,null,"\\u00e9\\n"]}',
            '{"a" 1}', '{"a":1,}', '[1,2', '"\\x"', "\x7f\xff", b'{"k":"\xc3\x28"}',
            b"\xed\xa0\x80", b"\xf4\x90\x80\x80", "  \n\t {} \n", "01", "-", "1.", "1e"] + BAD


def batch_items():
    return [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": CHAT},
        {"custom_id": "b", "url": "/v1/completions", "body": COMPLETION},
        {"custom_id": "c", "method": "GET", "url": "/v1/chat/completions", "body": CHAT},
        {"custom_id": "d", "url": "/v1/embeddings", "body": {}},
        {"custom_id": "e", "url": "/v1/completions"},
        {"url": "/v1/completions", "body": COMPLETION},
        {"custom_id": "\u00e9\u0000", "url": "/v1/chat/completions", "body": CHAT_FULL},
    ]


def batch_codec_seeds():
    items = batch_items()
    jsonl = "\n".join(j(i) for i in items) + "\n"
    return [b"\x00" + jsonl.encode(), b"\x01" + j({"requests": items}).encode(),
            b"\x02" + (jsonl.replace("\n", "\r\n") + "not json\n  \n[1]\n").encode(),
            b"\x03" + j({"requests": []}).encode(), b"\x05" + j(items[0]).encode(),
            b"\x04" + b"\n\n\n"]


def ws_chat_seeds():
    chat = dict(CHAT, type="chat", id="c1")
    frames = [
        [j(chat)],
        [j(chat), j({"type": "cancel", "id": "c1"})],
        [j(chat), j(chat), j(dict(chat, id="c2")), j(dict(chat, id="c3")), j(dict(chat, id="c4")),
         j(dict(chat, id="c5"))],
        [j(dict(CHAT_FULL, type="chat", id="full", n=1, stream=False))],
        ["not json", "", j({"type": "chat"}), j({"type": "ping", "id": "p"}),
         j({"type": "cancel", "id": "nope"}), j({"type": "chat", "id": "x" * 300})],
        [j(dict(chat, messages=[{"role": "user", "content": "\ud800"}])), j({"type": 1, "id": 2})],
    ]
    seeds = []
    for i, f in enumerate(frames):
        script = bytes([(i * 37) % 256, [0x00, 0x01, 0x12, 0x03, 0x21, 0x00][i]])
        seeds.append(script + "\x1e".join(f).encode("utf-8", "surrogatepass"))
    return seeds


def admin_seeds():
    lines = ['{"cmd":"stats"}', '{"cmd":"watch","interval_ms":100}', '{"cmd":"requests"}',
             '{"cmd":"cancel","id":12}', '{"cmd":"cancel","id":"12"}', '{"cmd":"drain"}',
             '{"cmd":"log_level","level":"debug"}', '{"cmd":"flush_prefix_cache"}']
    bad = ['{"cmd":"nope"}', "stats", '{"cmd":"watch","interval_ms":1}', '{"cmd":"cancel","id":-1}',
           '{"cmd":"cancel","id":"1x"}', '{"cmd":"log_level","level":"loud"}', "[]", '{"cmd":7}']
    tcp = ['{"cmd":"stats","token":"s3cret"}', '{"cmd":"requests","token":"wrong"}', '{"cmd":"stats"}']
    return [b"\x00" + "\n".join(lines).encode(), b"\x00" + "\r\n".join(bad).encode(),
            b"\x01" + "\n".join(tcp).encode(), b"\x00  \n\t{\"cmd\":\"stats\"}  "]


def http(method, target, body=b"", headers=(), version="1.1"):
    head = f"{method} {target} HTTP/{version}\r\nHost: localhost\r\n"
    for h in headers:
        head += h + "\r\n"
    if body and not any(h.lower().startswith("transfer-encoding") for h in headers):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def chunked(body):
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                    for i in range(0, len(body), 7)) + b"0\r\n\r\n"


def http_seeds():
    chat = j(CHAT).encode()
    stream = j(dict(CHAT, stream=True, stream_options={"include_usage": True})).encode()
    multi = j(dict(CHAT, n=3, stream=True, logprobs=True, top_logprobs=2)).encode()
    batch = "\n".join(j(i) for i in batch_items()).encode()
    conns = [
        http("GET", "/health"),
        http("GET", "/v1/models") + http("GET", "/v1/models/smollm2") + http("GET", "/metrics"),
        http("POST", "/v1/chat/completions", chat, ["Content-Type: application/json",
                                                     "Authorization: Bearer k1"]),
        http("POST", "/v1/chat/completions", stream),
        http("POST", "/v1/chat/completions", multi),
        http("POST", "/v1/completions", j(COMPLETION_IDS).encode(), ["Connection: close"]),
        http("POST", "/v1/batch", batch, ["Content-Type: application/jsonl"]),
        http("POST", "/v1/batch", j({"requests": batch_items()}).encode(),
             ["Content-Type: application/json"]),
        http("POST", "/tokenize", b'{"prompt":"Hello world","add_special_tokens":false}') +
        http("POST", "/detokenize", b'{"tokens":[1,2,3,95]}') +
        http("POST", "/tokenize", b'{"content":"x"}'),
        http("POST", "/v1/chat/completions", chat, ["Transfer-Encoding: chunked"]).replace(
            b"\r\n\r\n" + chat, b"\r\n\r\n" + chunked(chat)),
        http("GET", "/") + http("DELETE", "/health") + http("GET", "/nope?x=1"),
        http("GET", "/v1/chat/ws", headers=["Upgrade: websocket", "Connection: Upgrade",
                                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                                            "Sec-WebSocket-Version: 13"]),
        b"GET /health HTTP/1.0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n{}",
        b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ]
    flags = [0, 0, 0, 2, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # client leaves; tiny stream buffer
    return [bytes([(i * 53) % 256, [0, 1, 7, 0, 64, 3, 0, 0, 5, 2, 0, 0, 0, 0, 0, 0][i], flags[i]]) + c
            for i, c in enumerate(conns)]


# --- GGUF ---------------------------------------------------------------------------------------
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v): return kv(key, 4, struct.pack("<I", v))
def kv_f32(key, v): return kv(key, 6, struct.pack("<f", v))
def kv_f64(key, v): return kv(key, 12, struct.pack("<d", v))
def kv_str(key, v): return kv(key, 8, gstr(v))
def kv_bool(key, v): return kv(key, 7, struct.pack("<B", v))


def kv_arr(key, etype, items):
    enc = {8: gstr, 5: lambda v: struct.pack("<i", v), 6: lambda v: struct.pack("<f", v)}[etype]
    return kv(key, 9, struct.pack("<IQ", etype, len(items)) + b"".join(enc(i) for i in items))


def gguf(kvs, tensors=(), version=3, alignment=32, data=b""):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, dims, ttype, offset in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def tiny_llama(tokenizer_kvs, float64=False, extra=()):
    f = kv_f64 if float64 else kv_f32
    kvs = [kv_str("general.architecture", "llama"), kv_str("general.name", "Tiny"),
           kv_u32("general.file_type", 0), kv_u32("llama.context_length", 64),
           kv_u32("llama.embedding_length", 32), kv_u32("llama.block_count", 1),
           kv_u32("llama.feed_forward_length", 32), kv_u32("llama.attention.head_count", 4),
           kv_u32("llama.attention.head_count_kv", 2), f("llama.rope.freq_base", 10000.0),
           f("llama.attention.layer_norm_rms_epsilon", 1e-5), *tokenizer_kvs, *extra]
    names = ["token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
             "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
             "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
             "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"]
    shapes = [[32, 8], [32], [32], [32, 32], [32, 16], [32, 16], [32, 32], [32], [32, 32],
              [32, 32], [32, 32]]
    tensors, offset = [], 0
    for name, dims in zip(names, shapes):
        tensors.append((name, dims, 1, offset))  # F16
        size = 2
        for d in dims:
            size *= d
        offset += size + (-size % 32)
    return gguf(kvs, tensors, data=b"\x00\x3c" * (offset // 2))


BPE_TOKENIZER = [kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", "smollm"),
                 kv_arr("tokenizer.ggml.tokens", 8, ["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                                     "a", "b", "ab", "\u0120", "\u0120a"]),
                 kv_arr("tokenizer.ggml.token_type", 5, [3, 3, 3, 1, 1, 1, 1, 1]),
                 kv_arr("tokenizer.ggml.merges", 8, ["a b", "\u0120 a"]),
                 kv_u32("tokenizer.ggml.bos_token_id", 1), kv_u32("tokenizer.ggml.eos_token_id", 2),
                 kv_bool("tokenizer.ggml.add_bos_token", 0),
                 kv_str("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m.role }}"
                        "\n{{ m.content }}<|im_end|>\n{% endfor %}You are a helpful AI assistant "
                        "named SmolLM, trained by Hugging Face")]
SPM_TOKENIZER = [kv_str("tokenizer.ggml.model", "llama"),
                 kv_arr("tokenizer.ggml.tokens", 8, ["<unk>", "<s>", "</s>", "<0x41>", "\u2581", "a",
                                                     "\u2581a", "[INST]"]),
                 kv_arr("tokenizer.ggml.scores", 6, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -9.0]),
                 kv_arr("tokenizer.ggml.token_type", 5, [2, 3, 3, 6, 1, 1, 1, 4]),
                 kv_str("tokenizer.chat_template", "{{ bos_token }}[INST] <<SYS>> content.strip()")]


def gguf_seeds():
    return [
        gguf([]),
        gguf([kv_str("general.architecture", "llama")], version=2),
        tiny_llama(BPE_TOKENIZER),
        tiny_llama(SPM_TOKENIZER, float64=True,
                   extra=[kv_str("llama.rope.scaling.type", "linear"),
                          kv_f32("llama.rope.scaling.factor", 2.0)]),
        gguf([kv_u32("general.alignment", 64), kv_str("general.architecture", "qwen2"),
              kv(b"general.tags", 9, struct.pack("<IQ", 7, 3) + b"\x00\x01\x00"),
              kv("general.i64", 11, struct.pack("<q", -5)),
              kv("general.u64s", 9, struct.pack("<IQ", 10, 2) + struct.pack("<QQ", 1, 2**63))],
             [("t", [64, 2], 8, 0)], alignment=64, data=b"\x00" * 136),
    ]


# --- tokenizer, pre-tokenizer, chat templates ---------------------------------------------------
TEXTS = [
    "Hello world! How are you doing today?",
    "def f(x):\n    return x ** 2  # squares\n\n\tprint(f(12345678))",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "Caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600\U0001F44D\U0001F3FD \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "   leading and trailing   \n\n\n  ",
    "I'm you're it's we'll they'd I've DON'T",
    "1234567890 3.14159 1,000,000 \u0661\u0662\u0663",
    "<|endoftext|><file_sep><repo_name>x</s><s>[INST]",
    "\u00a0\u2003\u3000 \u200b zero\u200dwidth",
]


def tokenizer_seeds():
    seeds = [bytes([i % 5]) + t.encode() for i, t in enumerate(TEXTS)]
    seeds.append(b"\x00\xff\xfe\xc3\x28\xe2\x82\xf0\x9f\x98")
    seeds.append(b"\x02\x10\x80\x40\x30" + TEXTS[2].encode())
    seeds.append(b"\x03\x05" + TEXTS[0].encode())
    seeds.append(b"\x04" + struct.pack("<8h", 1, 2, 100, 9000, 30000, -5, -3000, 4000))
    return seeds


def pretokenizer_seeds():
    return [bytes([i % 5]) + t.encode() for i, t in enumerate(TEXTS * 2)][:12]


def chat_template_seeds():
    msgs = [
        "system\x1fYou are terse.\x1euser\x1fHi <|im_end|> there\x1eassistant\x1fHello\x1euser\x1fBye",
        "Hi\x1eHello\x1eHow are you?",
        "user\x1f  padded  \x1eassistant\x1f\n\t \x1e<|im_start|>\x1fodd role",
        "system\x1f[INST] <<SYS>> </s><s>\x1euser\x1f<|eot_id|><|start_header_id|>",
    ]
    seeds = []
    for kind in range(9):
        seeds.append(bytes([kind | (16 if kind % 2 else 0) | (32 if kind == 0 else 0)]) +
                     msgs[kind % len(msgs)].encode())
    return seeds



# A GET /v1/kv/metadata body as kv_metadata_json writes it (compact, fields in its order): the
# layout's last block ends exactly at region_bytes, base_address is above int64's range.
KV_METADATA = ('{"engine_id":"prefill-7f3a","transport":"ucx","worker_address":"AAECA/7/gIE=",'
               '"rkey":"cmtleS1ieXRlcw==","base_address":18446603336221200384,'
               '"region_bytes":327680,"layout":{"num_layers":2,"num_kv_heads":4,"head_dim":64,'
               '"block_size":16,"num_blocks":10,"dtype":"f16","block_bytes":8192,'
               '"kv_stride":81920,"layer_stride":163840},"compatibility_hash":"' + "a" * 64 + '"}')
# vLLM's toy proxy sends the prefill request's params with every unset field null.
VLLM_NULLS = ('{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null, '
              '"remote_block_ids": null, "remote_host": null, "remote_port": null}')
DECODE_PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "eng-1",
                 "remote_block_ids": [3, 0, 7], "remote_request_id": "req-9",
                 "remote_host": "10.0.0.2", "remote_port": 8001, "remote_num_tokens": 40,
                 "first_token_id": 1234, "tp_size": 1}


def disagg_codec_seeds():
    base64 = ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYmFy", "AAECA/7/gIE=", "Zh==", "Zm9=", "Zg=", "Z===",
              "Zm9v\n", "Zm-_"]
    params = [VLLM_NULLS, "{}", j(DECODE_PARAMS), j(dict(DECODE_PARAMS, first_token_id=None)),
              '{"do_remote_prefill": true, "tp_size": 4, "remote_dp_size": {"x": [1]}, '
              '"foo": null}',
              '{"remote_port": 65536}', '{"first_token_id": -1}',
              '{"remote_block_ids": [2147483648]}',
              '{"remote_block_ids": [1.0, "2"], "remote_num_tokens": 18446744073709551615}', "null",
              '{"remote_block_ids": [3, 4], "remote_sliding_block_ids": [[-1, 7], [-1, 9]]}',
              '{"remote_sliding_block_ids": [[-2], [1]]}', '{"remote_sliding_block_ids": [[]]}']
    metadata = [KV_METADATA,
                KV_METADATA.replace('"region_bytes":327680', '"region_bytes":327679'),
                KV_METADATA.replace('"layer_stride":163840', '"layer_stride":18446744073709551615'),
                KV_METADATA.replace('"rkey":"cmtleS1ieXRlcw=="', '"rkey":"cmtleS1ieXRlcx=="'),
                KV_METADATA.replace('"num_layers":2', '"num_layers":0'),
                KV_METADATA.replace('"engine_id":"prefill-7f3a",', '')]
    prefill = [j({"id": "cmpl-1", "object": "text_completion",
                  "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                  "kv_transfer_params": DECODE_PARAMS}),
               j({"choices": [{"kv_transfer_params": {"bogus": 1}}],
                  "kv_transfer_params": dict(DECODE_PARAMS, first_token_id=None)}),
               j({"kv_transfer_params": dict(DECODE_PARAMS, do_remote_prefill=False)}),
               '{"kv_transfer_params": null}', "<html>"]
    return ([b"\x00" + s.encode() for s in base64] + [b"\x01" + s.encode() for s in params] +
            [b"\x02" + s.encode() for s in metadata] + [b"\x03" + s.encode() for s in prefill])

def form(parts, boundary="abc", close="--\r\n"):
    """A multipart/form-data body as httpx writes it: each part's header lines, an empty line,
    its body, then CRLF and the next delimiter."""
    return "".join(f"--{boundary}\r\n{part}\r\n" for part in parts) + f"--{boundary}{close}"


def multipart_seeds():
    # Input: a byte choosing the Content-Type (0: boundary=abc, 1: "a b:c", 2: --x, 3: -,
    # 4: no boundary, 5: not multipart), then the body.
    purpose = 'Content-Disposition: form-data; name="purpose"\r\n\r\nbatch'
    jsonl = "\r\n".join(j(item) for item in batch_items()[:2]) + "\r\n--abd\r\n--ab\r\n"
    file = ('Content-Disposition: form-data; name="file"; filename="batch.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n" + jsonl)
    unicode_file = ('content-disposition: form-data; name="file"; filename="a\\\\b.txt"; '
                    "filename*=UTF-8''%E2%82%AC%20rates.jsonl\r\nContent-Type: application/jsonl"
                    "\r\n\r\n{}")
    seeds = [
        "\x00" + form([purpose, file]),
        "\x01preamble\r\n" + form([purpose, file], "a b:c", "-- \r\nepilogue"),
        "\x02" + form([unicode_file, 'Content-Disposition: form-data; name=x\r\n\r\n'], "--x"),
        "\x03" + form(["Content-Disposition: form-data; name=\"e\"\r\n"], "-", "--"),
        "\x00--abc\r\n" + purpose,
        "\x00" + form(["Content-Type: text/plain\r\n\r\nno disposition"]),
        "\x00" + form(['Content-Disposition: form-data; name="a"\nX-Bare-LF: 1\r\n\r\n1']),
        "\x00" + form([purpose] * 5),
        "\x04" + form([purpose]),
        "\x05" + form([purpose]),
    ]
    return seeds

# --- dictionaries (libFuzzer -dict: one quoted token per line) ----------------------------------
JSON_TOKENS = ['{', '}', '[', ']', ':', ',', '"', '\\', '\\u', '\\ud800', '\\u0000', 'true',
               'false', 'null', '-0', '1e309', '-1', '18446744073709551616', '0.5', ' ']
OPENAI_KEYS = ["model", "messages", "role", "content", "type", "text", "system", "user",
               "assistant", "prompt", "max_tokens", "max_completion_tokens", "temperature",
               "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
               "repetition_penalty", "seed", "stop", "stop_token_ids", "logprobs", "top_logprobs",
               "logit_bias", "min_tokens", "n", "stream", "stream_options", "include_usage",
               "user", "priority", "ignore_eos", "include_stop_str_in_output", "smollm2",
               "critical", "low", "normal", "high"]
BATCH_KEYS = ["custom_id", "method", "url", "body", "requests", "POST", "/v1/chat/completions",
              "/v1/completions"]
WS_KEYS = ["chat", "cancel", "id"]
ADMIN_KEYS = ["cmd", "stats", "watch", "interval_ms", "requests", "cancel", "drain", "log_level",
              "level", "flush_prefix_cache", "token", "s3cret", "trace", "debug", "info", "warn",
              "warning", "error", "err", "critical", "off", "\n"]
HTTP_TOKENS = ["GET ", "POST ", "PUT ", "DELETE ", "OPTIONS ", " HTTP/1.1\r\n", " HTTP/1.0\r\n",
               "\r\n", "\r\n\r\n", "Content-Length: ", "Transfer-Encoding: chunked\r\n",
               "Connection: close\r\n", "Connection: keep-alive\r\n", "Connection: Upgrade\r\n",
               "Upgrade: websocket\r\n", "Content-Type: application/json\r\n",
               "Content-Type: application/jsonl\r\n", "Authorization: Bearer ", "Expect: 100-continue",
               "0\r\n\r\n", "/health", "/v1/models", "/v1/models/", "/v1/chat/completions",
               "/v1/completions", "/v1/batch", "/tokenize", "/detokenize", "/metrics",
               "/v1/chat/ws", "/index.html", "?", "tokens", "add_special_tokens"]
GGUF_TOKENS = ["GGUF", "general.architecture", "general.alignment", "general.name", "llama",
               "qwen2", "mistral", "gpt2", "tokenizer.ggml.model", "tokenizer.ggml.pre",
               "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
               "tokenizer.ggml.scores", "tokenizer.ggml.bos_token_id",
               "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
               "tokenizer.chat_template", "llama.context_length", "llama.embedding_length",
               "llama.block_count", "llama.feed_forward_length", "llama.attention.head_count",
               "llama.attention.head_count_kv", "llama.rope.freq_base", "llama.vocab_size",
               "llama.rope.scaling.type", "llama.rope.scaling.factor", "llama.attention.key_length",
               "llama.rope.dimension_count", "token_embd.weight", "output.weight", "blk.0.",
               b"\x00\x00\x00\x00\x00\x00\x00\x80", b"\xff\xff\xff\xff\xff\xff\xff\xff",
               b"\x0c\x00\x00\x00", b"\x09\x00\x00\x00\x08\x00\x00\x00"]
DISAGG_KEYS = ["kv_transfer_params", "do_remote_decode", "do_remote_prefill", "remote_engine_id",
               "remote_block_ids", "remote_sliding_block_ids", "remote_request_id", "remote_host", "remote_port",
               "remote_num_tokens", "first_token_id", "tp_size", "engine_id", "transport",
               "worker_address", "rkey", "base_address", "region_bytes", "layout", "num_layers",
               "num_kv_heads", "head_dim", "block_size", "num_blocks", "dtype", "block_bytes",
               "kv_stride", "layer_stride", "compatibility_hash", "ucx", "f16", "=", "==",
               "2147483647", "2147483648", "65535", "65536", "9223372036854775807",
               "9223372036854775808", "18446744073709551615"]
MULTIPART_TOKENS = ["\r\n", "\r\n\r\n", "--", "--abc", "\r\n--abc", "--abc--", "--a b:c",
                    "----x", "Content-Disposition: ", "form-data", "; name=", "; filename=",
                    "; filename*=", "UTF-8''", "ISO-8859-1'en'", "%E2%82%AC", "%", "\"", "\\",
                    "Content-Type: ", "application/octet-stream", "Content-Transfer-Encoding: ",
                    "binary", "base64", "purpose", "file", "batch.jsonl", " ", "\t"]
TEXT_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>",
               "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "[INST]", "[/INST]",
               "<<SYS>>", "<</SYS>>", "</s>", "<s>", "\x1e", "\x1f", "system", "user", "assistant",
               " ", "  ", "\n", "\t", "'s", "'ll", "123", "\u00e9", "\u200b", "\U0001F600",
               "\ufffd", "\u00a0", "\u3000", b"\xff", b"\xc3"]


def write_dict(name, tokens):
    out = ROOT.parent / "dict"
    out.mkdir(exist_ok=True)
    lines = []
    for t in tokens:
        data = t.encode() if isinstance(t, str) else t
        lines.append('"' + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}"
                                   for b in data) + '"')
    (out / f"{name}.dict").write_text("\n".join(lines) + "\n")


def main():
    write_dict("json_input", JSON_TOKENS)
    write_dict("openai_request", JSON_TOKENS + OPENAI_KEYS)
    write_dict("batch_codec", JSON_TOKENS + OPENAI_KEYS + BATCH_KEYS)
    write_dict("ws_chat", JSON_TOKENS + OPENAI_KEYS + WS_KEYS)
    write_dict("admin_protocol", JSON_TOKENS + ADMIN_KEYS)
    write_dict("http_request", HTTP_TOKENS + JSON_TOKENS + OPENAI_KEYS + BATCH_KEYS)
    write_dict("gguf", GGUF_TOKENS + TEXT_TOKENS[:14])
    write_dict("tokenizer", TEXT_TOKENS)
    write_dict("pretokenizer", TEXT_TOKENS[14:])
    write_dict("chat_template", TEXT_TOKENS)
    write_dict("disagg_codec", JSON_TOKENS + DISAGG_KEYS)
    write_dict("multipart", MULTIPART_TOKENS)
    write("json_input", json_input_seeds())
    write("openai_request", openai_request_seeds())
    write("batch_codec", batch_codec_seeds())
    write("ws_chat", ws_chat_seeds())
    write("admin_protocol", admin_seeds())
    write("http_request", http_seeds())
    write("gguf", gguf_seeds())
    write("tokenizer", tokenizer_seeds())
    write("pretokenizer", pretokenizer_seeds())
    write("chat_template", chat_template_seeds())
    write("disagg_codec", disagg_codec_seeds())
    write("multipart", multipart_seeds())


if __name__ == "__main__":
    main()
