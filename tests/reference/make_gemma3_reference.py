#!/usr/bin/env python3
"""Produce troupe's llama.cpp reference data for Gemma 3 270M (Q4_K_M, scripts/fetch_model
gemma3-270m).

Run by hand (CI never does) with llama-cpp-python's Python package on the path and the project's
reference build of llama.cpp as its library (bench/build_peer.sh builds it from the same sdist):

  PYTHONPATH=build-peer-src/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build-peer-parity/bin \\
      python tests/reference/make_gemma3_reference.py [MODEL.gguf]

llama.cpp runs with weight repacking off (llama_model_params.use_extra_bufts = false, what
llama-server's --no-repack sets) and flash attention off: its x86 build then multiplies every
K-quant weight with ggml_vec_dot_q4_K_q8_K / _q6_K_q8_K, the order troupe reproduces
(gpu/cpu/matmul_q8k.hpp); the repacked Q4_K (q4_K_8x8) sums in another order. It writes, next
to this script:

  gemma3_tokenize.json  a corpus of byte strings with llama.cpp's token ids, special-token parsing
                        on and off (add_bos=False), and the detokenization of the special-off ids.
  gemma3_greedy.json    22 prompts: prompt ids (BOS first), 48 greedily generated ids (argmax of
                        the raw logits of the last position, no stop on end-of-generation ids)
                        and the top-5 (id, logit) of every step. 15 chat prompts in Gemma's format
                        (llama.cpp's built-in LLM_CHAT_TEMPLATE_GEMMA rendering: the GGUF file
                        carries no template), 5 raw completions, and two prompts longer than the
                        512-token sliding window (one raw, one chat).
"""
import json
import os
import sys

import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_reference  # noqa: E402  (the shared corpus and greedy loop)

DEFAULT_MODEL = os.path.join(HERE, "..", "..", "models", "gemma-3-270m-q4_k_m.gguf")
N_GEN = 48


def gemma_chat(messages, add_generation_prompt=True):
    """llama.cpp's LLM_CHAT_TEMPLATE_GEMMA (src/llama-chat.cpp): system texts trimmed and joined,
    then opening the next non-model turn with a blank line; 'assistant' is 'model'; contents
    trimmed. BOS is not part of the text (the tokenizer adds it)."""
    out, system = [], ""
    for m in messages:
        if m["role"] == "system":
            system += m["content"].strip()
            continue
        role = "model" if m["role"] == "assistant" else m["role"]
        out.append("<start_of_turn>" + role + "\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(m["content"].strip() + "<end_of_turn>\n")
    if add_generation_prompt:
        out.append("<start_of_turn>model\n")
    return "".join(out)


def corpus():
    extra = [
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn>",
        "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_image>",
        "<end_of_image>", "text<end_of_turn>more", "<start_of_turn", "start_of_turn>",
        "<START_OF_TURN>", "\n\n\n\n\n", "          ten spaces", "\t\t\t\ttabs", "▁already▁marked",
        "  leading two", "trailing two  ", "ﬁ", "Ｈｅｌｌｏ", "1234567890123", "3.141592653589793",
        "<0x41>", "<0xFF>", "[multimodal]", "<unused0>", "<unused99>",
    ]
    return make_reference.corpus() + [x.encode("utf-8") for x in extra]


def tokenize_corpus(llm):
    entries = []
    for b in corpus():
        on = llm.tokenize(b, add_bos=False, special=True)
        off = llm.tokenize(b, add_bos=False, special=False)
        entries.append({
            "text": b.decode("utf-8", errors="replace"),
            "hex": b.hex(),
            "special": on,
            "plain": off,
            "plain_detok_hex": llm.detokenize(off).hex(),
        })
    return entries


LONG_TEXT = (
    "The history of the city begins with a small settlement on the river, where traders met to "
    "exchange salt, grain and cloth. Over the centuries the settlement grew into a market town, "
    "then into a walled city with a cathedral, a university and a busy port. Each generation "
    "added something: bridges, libraries, hospitals, canals and wide avenues lined with trees. "
)


def greedy_prompts():
    """SmolLM2's 15 chat prompts (make_reference.py), five raw completions, and two prompts past
    the 512-token window of the sliding layers."""
    prompts = [p for p in make_reference.greedy_prompts() if p["kind"] == "chat"]
    for r in ["The capital of France is", "Once upon a time, there was a little",
              "def fibonacci(n):\n", "The three laws of thermodynamics are", "1, 2, 3, 4, 5,"]:
        prompts.append({"kind": "raw", "text": r})
    # Past the 512-token window of the sliding layers.
    prompts.append({"kind": "raw", "text": LONG_TEXT * 11 + "In one sentence, the city is"})
    prompts.append({"kind": "chat", "messages": [
        {"role": "user", "content": LONG_TEXT * 10 + "\nSummarize this text in one sentence."}]})
    return prompts


def greedy(llm, top_n=5):
    results = []
    for p in greedy_prompts():
        if p["kind"] == "chat":
            p["text"] = gemma_chat(p["messages"])
        ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=True, special=p["kind"] == "chat")
        gen, tops = make_reference.greedy_run(llm, ids, N_GEN, top_n)
        entry = dict(p)
        entry["prompt_ids"] = ids
        entry["generated_ids"] = gen
        entry["generated_text"] = llm.detokenize(gen).decode("utf-8", errors="replace")
        entry["top"] = tops
        results.append(entry)
        print(len(ids), repr(entry["generated_text"][:70]), file=sys.stderr)
    return results


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    make_reference.no_repack()
    llm = Llama(model_path=model, n_ctx=2048, n_batch=512, n_threads=2, seed=0, verbose=False,
                flash_attn=False)
    vocab = llm._model.vocab
    eog = [i for i in range(llm.n_vocab()) if llama_lib.llama_vocab_is_eog(vocab, i)]
    info = {
        "model": os.path.basename(model),
        "llama_cpp_python": "0.3.36 (sdist, vendored llama.cpp; library from build-peer-parity)",
        "llama_cpp_system_info": llama_lib.llama_print_system_info().decode(),
        "n_vocab": llm.n_vocab(),
        "bos": llm.token_bos(),
        "eos": llm.token_eos(),
        "eog_ids": eog,
        "repack": False,
        "flash_attn": False,
    }
    tok = {"info": info, "add_bos": False, "entries": tokenize_corpus(llm)}
    with open(os.path.join(HERE, "gemma3_tokenize.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    print("tokenize entries:", len(tok["entries"]), file=sys.stderr)
    g = {"info": dict(info, n_ctx=2048, n_batch=512, n_threads=2,
                      method="llama.eval + argmax of raw logits",
                      note="all steps are argmax; generation does not stop at end-of-generation ids"),
         "n_generated": N_GEN, "top_n": 5, "prompts": greedy(llm)}
    with open(os.path.join(HERE, "gemma3_greedy.json"), "w") as f:
        json.dump(g, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
