#!/usr/bin/env python3
"""Produce troupe's llama.cpp reference data for prompt log-probabilities on
SmolLM2-135M-Instruct (Q4_1), the model of tests/reference/smollm2_greedy.json.

Run by hand (CI never does) with llama-cpp-python's Python package on the path and the project's
reference build of llama.cpp as its library (bench/build_peer.sh builds it from the same sdist):

  PYTHONPATH=build-peer-src/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build-peer-parity/bin \\
      python tests/reference/make_prompt_logprobs_reference.py [MODEL.gguf]

llama.cpp runs with n_ctx 2048, n_batch 512, logits for every position (logits_all), 2 threads,
flash attention off and weight repacking off. The prompts are the first 10 of make_reference.py
(ChatML ones rendered with SmolLM2's Jinja template, encoded with special-token parsing, no BOS,
as make_kv_q8_reference.py does) and one raw prompt of more than 600 tokens (varied paragraphs,
the whole text twice, so it crosses the 512-token batch boundary and its second half is
predictable). Each prompt is evaluated once from an empty context; for every prompt position
i >= 1 the script takes the float32 logits of position i-1 and records, computed in float64:

  logprob  log-softmax of prompt token i (rounded to 6 decimals)
  rank     1 + the number of vocabulary entries with a strictly higher logit than token i
  top      the 5 highest-logit (token id, logprob) at position i-1, highest first, ties by id

It writes smollm2_prompt_logprobs.json next to this script:
  {"info": {...}, "prompts": [{"kind", "text", "prompt_ids", "positions": [{"logprob", "rank",
   "top": [[id, lp], ...]}, ...]}]}   (positions[k] is for prompt token k+1)
"""
import json
import os
import sys

import numpy as np
import llama_cpp
import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_reference  # noqa: E402  (the prompts, the chat template, no_repack)

N_PROMPTS = 10
TOP_N = 5
N_CTX, N_BATCH = 2048, 512

LONG_PARTS = [
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the 117 steps "
    "out loud as his father had taught him. At the top he trimmed the wick, polished the great "
    "lens, and wrote the time, the wind, and the state of the sea in a leather-bound logbook.",
    "def merge_sorted(a, b):\n    i = j = 0\n    out = []\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n"
    "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n",
    "Recipe for a simple bread: mix 500 g of flour, 10 g of salt, 7 g of dried yeast and 350 ml "
    "of warm water. Knead for ten minutes, let it rise for an hour, shape the loaf, rise again "
    "for 45 minutes, then bake at 220 °C for about 30 minutes until it sounds hollow.",
    "Q: Why is the sky blue?\nA: Sunlight is scattered by the molecules of the air, and shorter "
    "(blue) wavelengths are scattered much more strongly than longer (red) ones, so blue light "
    "reaches our eyes from every direction of the sky.",
    "Meeting notes — 14 March: Priya will finish the budget draft by Friday; Tomás is reviewing "
    "the supplier contracts; the launch moves from 2 May to 16 May. Open questions: hosting "
    "costs, the translation of the user guide into Français and Deutsch, and the new logo.",
    "In the deep ocean, far below the reach of sunlight, animals make their own light. Lantern "
    "fish flash patterns along their sides, anglerfish dangle glowing lures, and some squid "
    "release clouds of luminous ink to confuse predators before darting away into the dark.",
    "| City | Country | Population |\n|------|---------|------------|\n| Tokyo | Japan | 37 "
    "million |\n| Delhi | India | 32 million |\n| Shanghai | China | 29 million |\n",
    "She opened the old letter carefully. \"Dear Margaret,\" it began, \"by the time you read "
    "this, the garden will have grown wild again. Plant the roses by the south wall, and do not "
    "forget to water the lemon tree; it has always been stubborn, just like you.\"",
]


def long_prompt_text():
    return "\n\n".join(LONG_PARTS * 2) + "\n"


def logprobs(llm, ids):
    """Evaluates ids from an empty context; one entry per prompt position i >= 1."""
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[:len(ids), :], dtype=np.float32)  # logits of every position
    out = []
    for i in range(1, len(ids)):
        logits = scores[i - 1]
        x = logits.astype(np.float64)
        m = x.max()
        lsm = x - (m + np.log(np.exp(x - m).sum()))
        tok = ids[i]
        rank = 1 + int((logits > logits[tok]).sum())
        order = np.argsort(-logits, kind="stable")[:TOP_N]
        out.append({"logprob": round(float(lsm[tok]), 6), "rank": rank,
                    "top": [[int(t), round(float(lsm[t]), 6)] for t in order]})
    return out


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else make_reference.DEFAULT_MODEL
    make_reference.no_repack()
    llm = Llama(model_path=model, n_ctx=N_CTX, n_batch=N_BATCH, logits_all=True, n_threads=2,
                seed=0, verbose=False, flash_attn=False)
    prompts = make_reference.greedy_prompts()[:N_PROMPTS]
    prompts.append({"kind": "raw_long", "text": long_prompt_text()})
    results = []
    for p in prompts:
        if p["kind"] == "chat":
            p["text"] = make_reference.chatml(llm, p["messages"], add_generation_prompt=True)
        ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=False, special=True)
        assert len(ids) < N_CTX
        pos = logprobs(llm, ids)
        results.append(dict(p, prompt_ids=ids, positions=pos))
        mean = sum(e["logprob"] for e in pos) / len(pos)
        print(f"{p['kind']:8s} {len(ids):4d} tokens  mean logprob {mean:8.4f}  "
              f"top-1 {sum(e['rank'] == 1 for e in pos)}/{len(pos)}", file=sys.stderr)
    assert len(results[-1]["prompt_ids"]) > 600, len(results[-1]["prompt_ids"])
    info = {
        "model": os.path.basename(model),
        "llama_cpp_python": getattr(llama_cpp, "__version__", None),
        "llama_cpp_system_info": llama_lib.llama_print_system_info().decode(),
        "n_vocab": llm.n_vocab(),
        "n_ctx": N_CTX, "n_batch": N_BATCH, "n_threads": 2,
        "flash_attn": False, "weight_repacking": False, "kv_cache": "f16",
        "method": "llama.eval of the whole prompt from an empty context with logits_all; for "
                  "prompt token i >= 1, from the float32 logits of position i-1, in float64: "
                  "logprob = log-softmax of token i, rank = 1 + #(logits strictly higher), top = "
                  f"{TOP_N} highest logits as [id, logprob] (stable sort, ties by id)",
        "positions": "positions[k] is for prompt token k+1 (there is none for token 0)",
        "rounding": "logprobs to 6 decimals",
        "prompts": f"the first {N_PROMPTS} prompts of make_reference.greedy_prompts() (ChatML, no "
                   "BOS, special-token parsing) and one raw prompt over 600 tokens (kind raw_long; "
                   "its text is the same paragraphs twice; the eval splits it at n_batch 512)",
    }
    data = {"info": info, "top_n": TOP_N, "prompts": results}
    path = os.path.join(HERE, "smollm2_prompt_logprobs.json")
    with open(path, "w") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
