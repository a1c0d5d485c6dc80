"""Seeded request workloads for serve_bench.py (no downloads).

Prompts are built from WORDS, 100 common English words that the default model's byte-level BPE
tokenizer (SmolLM2, GPT-2 style pre-tokenizer) encodes as exactly one token each, with or
without the leading space, and that never merge across the separating space. So a prompt of N
space-separated words is N prompt tokens on /v1/completions (SmolLM2 adds no BOS). serve_bench
checks this against the server's reported `usage.prompt_tokens`; on another tokenizer the
counts drift and the check says by how much.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education"
).split()


@dataclass
class Request:
    prompt: str              # text for /v1/completions; chat/ws send it as one user message
    prompt_len: int          # tokens by construction (completions, no template)
    max_tokens: int          # output length asked for (with ignore_eos: the length produced)
    cancel_after: Optional[int] = None  # disconnect after this many streamed chunks
    prefix_id: Optional[int] = None     # shared-prefix workload: which system prompt
    meta: dict = field(default_factory=dict)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def fixed(num: int, input_len: int, output_len: int, seed: int = 0) -> list[Request]:
    """Every request: `input_len` prompt tokens, `output_len` output tokens."""
    rng = random.Random(seed)
    return [Request(words(rng, input_len), input_len, output_len) for _ in range(num)]


def sharegpt_like(num: int, seed: int = 0, input_median: int = 160, input_sigma: float = 0.9,
                  output_median: int = 120, output_sigma: float = 0.8, max_input: int = 1024,
                  max_output: int = 512, min_len: int = 4) -> list[Request]:
    """A ShareGPT-shaped mix: lognormal input and output lengths (ShareGPT's prompt lengths are
    roughly lognormal with a median near 150-250 tokens and a long tail; outputs slightly
    shorter), clipped to [min_len, max_*]. Seeded, so both servers get the same list."""
    import math
    rng = random.Random(seed)
    out = []
    for _ in range(num):
        i = int(min(max_input, max(min_len, round(rng.lognormvariate(math.log(input_median),
                                                                     input_sigma)))))
        o = int(min(max_output, max(min_len, round(rng.lognormvariate(math.log(output_median),
                                                                      output_sigma)))))
        out.append(Request(words(rng, i), i, o))
    return out


def shared_prefix(num: int, num_prefixes: int = 2, prefix_len: int = 1024, suffix_len: int = 32,
                  output_len: int = 32, seed: int = 0) -> list[Request]:
    """K system prompts of `prefix_len` tokens; each request is one of them (round robin) plus
    its own `suffix_len`-token question. A prefix cache turns the shared part into a hit."""
    rng = random.Random(seed)
    prefixes = [words(rng, prefix_len) for _ in range(num_prefixes)]
    out = []
    for i in range(num):
        k = i % num_prefixes
        out.append(Request(prefixes[k] + " " + words(rng, suffix_len), prefix_len + suffix_len,
                           output_len, prefix_id=k))
    return out


def with_cancels(reqs: list[Request], fraction: float, seed: int = 0) -> list[Request]:
    """Burst/cancel: a `fraction` of the requests disconnect mid-stream, after a uniformly
    drawn number of chunks in [1, max_tokens // 2]."""
    rng = random.Random(seed + 7919)
    for r in reqs:
        if rng.random() < fraction:
            r.cancel_after = rng.randint(1, max(1, r.max_tokens // 2))
    return reqs
