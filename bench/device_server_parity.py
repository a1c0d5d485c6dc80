#!/usr/bin/env python3
"""Greedy parity of a running troupe server with llama.cpp's reference outputs.

Sends every prompt of tests/reference/smollm2_greedy.json (15 chat, 5 raw, as token ids) to
/v1/completions at once (greedy, 64 tokens, ignore_eos, token ids back through vLLM's
return_tokens_as_token_ids), so the server batches them through its real step loop, and compares
each answer's ids with llama.cpp's. A prompt that diverges is explained when the token the server
chose is within `--tie` logits of llama.cpp's choice in llama.cpp's own top-5 at that step (a
near-tie that float noise can flip); otherwise it is a real mismatch. Standard library only: the
GPU machine has no project virtualenv.

  bench/device_server_parity.py --url http://127.0.0.1:18080 [--tie 0.25] [--json OUT]
Exit status: 0 when every prompt is identical or diverges only at a near-tie, else 1.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "tests", "reference", "smollm2_greedy.json")


def complete(url, prompt_ids, max_tokens):
    body = json.dumps({"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "logprobs": 1,
                       "return_tokens_as_token_ids": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.load(response)
    tokens = answer["choices"][0]["logprobs"]["tokens"]
    return [int(t.split(":", 1)[1]) for t in tokens]


def classify(reference, got, tie):
    """(verdict, step, margin): identical, near-tie at step with margin, or mismatch."""
    want = reference["generated_ids"]
    for step, (w, g) in enumerate(zip(want, got)):
        if w == g:
            continue
        top = dict((token_id, logit) for token_id, logit in reference["top"][step])
        if g in top:
            margin = top[w] - top[g]
            return ("near-tie" if margin <= tie else "mismatch"), step, margin
        return "mismatch", step, None
    if len(got) < len(want):
        return "short", len(got), None
    return "identical", None, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:18080")
    parser.add_argument("--tie", type=float, default=0.25,
                        help="largest llama.cpp logit margin a divergence may have to count as a near-tie")
    parser.add_argument("--json", help="write the per-prompt results here")
    args = parser.parse_args()
    with open(REFERENCE) as f:
        reference = json.load(f)
    prompts = reference["prompts"]
    n = reference["n_generated"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(lambda p: complete(args.url, p["prompt_ids"], n), prompts))
    rows, counts = [], {"identical": 0, "near-tie": 0, "mismatch": 0, "short": 0}
    for i, (p, got) in enumerate(zip(prompts, answers)):
        verdict, step, margin = classify(p, got, args.tie)
        counts[verdict] += 1
        rows.append({"prompt": i, "kind": p["kind"], "verdict": verdict, "step": step, "margin": margin})
        detail = "" if step is None else f" at step {step}" + ("" if margin is None else f" (llama.cpp margin {margin:.3f})")
        print(f"  prompt {i:2d} {p['kind']:4s} {verdict}{detail}")
    summary = (f"{counts['identical']}/{len(prompts)} identical, {counts['near-tie']} near-ties, "
               f"{counts['mismatch']} mismatches, {counts['short']} short")
    print("server greedy parity:", summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "prompts": rows}, f, indent=1)
    return 0 if counts["mismatch"] == 0 and counts["short"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
