"""The block hashes a router computes from a prompt's tokens, written the way vLLM computes them
with `--prefix-caching-hash-algo sha256_cbor` (vllm/v1/core/kv_cache_utils.py) and llm-d's
KV-cache indexer with `hashAlgorithm: sha256_cbor`: an independent reference for troupe's
events (troupe computes them in C++, actors/kv_cache/kv_block_hash.cpp)."""
import hashlib

import cbor2


def sha256_cbor(value) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def root_digest(seed: str) -> bytes:
    """vLLM's NONE_HASH with PYTHONHASHSEED=seed."""
    return sha256_cbor(seed)


def block_digest(parent: bytes, tokens) -> bytes:
    return sha256_cbor((parent, tuple(tokens), None))


def engine_key(digest: bytes) -> int:
    """What vLLM publishes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) and llm-d indexes."""
    return int.from_bytes(digest, "big") & ((1 << 64) - 1)


def prompt_keys(tokens, block_size: int, seed: str):
    """The keys of every full block of `tokens`, as a router computes them for a request."""
    keys, parent = [], root_digest(seed)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_digest(parent, tokens[start:start + block_size])
        keys.append(engine_key(parent))
    return keys
