#!/usr/bin/env python3
"""Produce troupe's llama.cpp reference data for a q8_0 KV cache (cache.kv_dtype q8_0) on
SmolLM2-135M-Instruct (Q4_1), the model of tests/reference/smollm2_greedy.json.

Run by hand (CI never does) with llama-cpp-python's Python package on the path and the project's
reference build of llama.cpp as its library (bench/build_peer.sh builds it from the same sdist):

  PYTHONPATH=build-peer-src/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build-peer-parity/bin \\
      python tests/reference/make_kv_q8_reference.py [MODEL.gguf]

llama.cpp runs as `-ctk q8_0 -ctv q8_0 -fa on` (a quantized V cache needs its flash attention),
weight repacking off, on the 20 prompts of make_reference.py, twice: with the q8_0 cache, and
with the f16 cache and flash attention off (how smollm2_greedy.json was made), so the file says
where llama.cpp's own two runs part. It writes smollm2_kv_q8_greedy.json next to this script:
the prompts' ids, 64 greedy ids and the top-5 (id, logit) of every step with the q8_0 cache, and
for each prompt the first step where the f16 run's token differs (null: all 64 equal). With
models/gemma-3-270m-q4_k_m.gguf present it also writes gemma3_kv_q8_first_step.json: Gemma 3's
first-step top-8 logits with the q8_0 cache for three prompts of gemma3_greedy.json.
"""
import json
import os
import sys

import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_reference  # noqa: E402  (the prompts and the greedy loop)

GGML_TYPE_Q8_0 = 8
N_GEN = 64


def run(model, q8_kv):
    kv = dict(flash_attn=True, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0) if q8_kv else {}
    llm = Llama(model_path=model, n_ctx=2048, n_batch=512, logits_all=False, n_threads=2,
                seed=0, verbose=False, **kv)
    prompts = make_reference.greedy_prompts()
    out = []
    for p in prompts:
        if p["kind"] == "chat":
            p["text"] = make_reference.chatml(llm, p["messages"], add_generation_prompt=True)
        ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=False, special=True)
        gen, tops = make_reference.greedy_run(llm, ids, N_GEN, 5)
        entry = dict(p, prompt_ids=ids, generated_ids=gen, top=tops)
        entry["generated_text"] = llm.detokenize(gen).decode("utf-8", errors="replace")
        out.append(entry)
        print(("q8_0 " if q8_kv else "f16  ") + repr(entry["generated_text"][:60]), file=sys.stderr)
    return out


def gemma3_first_steps(path):
    """Gemma 3 270M with the q8_0 cache: the first step's top-8 logits of three prompts of
    gemma3_greedy.json (a chat, a 6-token raw prompt, the 789-token one past the 512-token
    window), written to gemma3_kv_q8_first_step.json."""
    import numpy as np
    ref = json.load(open(os.path.join(HERE, "gemma3_greedy.json")))
    llm = Llama(model_path=path, n_ctx=2048, n_batch=512, n_threads=2, seed=0, verbose=False,
                flash_attn=True, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0)
    out = []
    for i in (0, 15, 20):
        ids = ref["prompts"][i]["prompt_ids"]
        llm.reset()
        llm.eval(ids)
        ptr = llama_lib.llama_get_logits_ith(llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32)
        order = np.argsort(-logits, kind="stable")[:8]
        out.append({"index": i, "prompt_ids": ids,
                    "top": [[int(t), round(float(logits[t]), 4)] for t in order]})
    with open(os.path.join(HERE, "gemma3_kv_q8_first_step.json"), "w") as f:
        json.dump({"info": {"model": os.path.basename(path), "kv_cache": "q8_0 K and V, flash "
                            "attention on", "method": "llama.eval, weight repacking off"},
                   "prompts": out}, f, separators=(",", ":"))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else make_reference.DEFAULT_MODEL
    make_reference.no_repack()
    gemma = os.path.join(HERE, "..", "..", "models", "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(gemma):
        gemma3_first_steps(gemma)
    q8 = run(model, q8_kv=True)
    f16 = run(model, q8_kv=False)
    for a, b in zip(q8, f16):
        assert a["prompt_ids"] == b["prompt_ids"]
        diff = [k for k, (x, y) in enumerate(zip(a["generated_ids"], b["generated_ids"])) if x != y]
        a["f16_first_difference"] = diff[0] if diff else None
    info = {
        "model": os.path.basename(model),
        "llama_cpp_system_info": llama_lib.llama_print_system_info().decode(),
        "n_ctx": 2048, "n_threads": 2, "kv_cache": "q8_0 K and V, flash attention on",
        "method": "llama.eval + argmax of raw logits; weight repacking off",
    }
    g = {"info": info, "n_generated": N_GEN, "top_n": 5, "prompts": q8}
    with open(os.path.join(HERE, "smollm2_kv_q8_greedy.json"), "w") as f:
        json.dump(g, f, ensure_ascii=False, separators=(",", ":"))
    same = sum(1 for a in q8 if a["f16_first_difference"] is None)
    print(f"{same} of {len(q8)} prompts: the f16 and q8_0 caches give the same 64 tokens",
          file=sys.stderr)


if __name__ == "__main__":
    main()
