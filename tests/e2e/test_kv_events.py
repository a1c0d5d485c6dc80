"""KV-cache events as llm-d's KV-cache indexer consumes them (issue 20): a real ZeroMQ subscriber
mirrors the server's prefix cache from BlockStored / BlockRemoved / AllBlocksCleared, checks
every block hash the way a router recomputes it from the tokens (kv_hash_reference.py, vLLM's
sha256_cbor), sees the mirror agree with the server's cache, and fetches missed batches from the
replay socket. A second subscriber that never reads must not slow anyone down."""
import json

import msgpack
import pytest
import requests
import zmq

from conftest import free_port
from kv_hash_reference import block_digest, engine_key, prompt_keys, root_digest
from test_admin import admin_cli, start_with_admin

SEED = "troupe-e2e"
TOPIC = "kv@e2e-pod@SmolLM2-135M-Instruct"
BLOCK_SIZE = 16
NUM_BLOCKS = 48  # small, so that a few prompts evict


class Mirror:
    """A router's view of one pod's cache, built only from the events (as llm-d's index is)."""

    def __init__(self):
        self.digests = {}  # key -> full digest, recomputed from the event's tokens
        self.cleared = 0
        self.removed = 0

    def apply(self, event):
        kind = event["type"]
        if kind == "BlockStored":
            assert event["block_size"] == BLOCK_SIZE
            assert event["medium"] in ("CPU", "GPU")
            assert event["lora_id"] is None
            hashes, tokens = event["block_hashes"], event["token_ids"]
            assert len(tokens) == len(hashes) * BLOCK_SIZE
            parent_key = event["parent_block_hash"]
            parent = root_digest(SEED) if parent_key is None else self.digests[parent_key]
            for i, key in enumerate(hashes):
                parent = block_digest(parent, tokens[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
                assert engine_key(parent) == key, "the router's hash of these tokens differs"
                self.digests[key] = parent
        elif kind == "BlockRemoved":
            for key in event["block_hashes"]:
                assert key in self.digests, "removed a block that was never stored"
                del self.digests[key]
                self.removed += 1
        else:
            assert kind == "AllBlocksCleared"
            self.digests.clear()
            self.cleared += 1


class Subscriber:
    def __init__(self, endpoint, replay_endpoint, bind=False):
        """`bind`: the SUB binds `endpoint` and the server connects to it, as llm-d's indexer
        does. A bound SUB sends its subscription to a newly connected server only when this
        thread next polls it; the server drops every batch until then."""
        self.context = zmq.Context()
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        self.sub.setsockopt(zmq.LINGER, 0)
        if bind:
            self.sub.bind(endpoint)
        else:
            self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.received = {}  # seq -> payload bytes
        self.mirror = Mirror()

    def poll(self, timeout_ms):
        """One message, applied to the mirror; None when nothing came in time."""
        if not self.sub.poll(timeout_ms):
            return None
        topic, seq_bytes, payload = self.sub.recv_multipart()
        assert topic == TOPIC.encode()
        seq = int.from_bytes(seq_bytes, "big")
        assert seq not in self.received
        self.received[seq] = payload
        ts, events, dp_rank = msgpack.unpackb(payload)
        assert isinstance(ts, float) and ts > 1.7e9 and dp_rank == 0
        for event in events:
            self.mirror.apply(event)
        return events

    def drain_until(self, predicate, timeout_ms=30000):
        waited = 0
        while waited < timeout_ms:
            events = self.poll(200)
            waited += 200
            if events is not None and predicate(events):
                return events
        raise AssertionError("no matching KV event arrived")

    def replay(self, start_seq):
        dealer = self.context.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
        out = {}
        while True:
            assert dealer.poll(10000), "the replay socket did not answer"
            empty, seq_bytes, payload = dealer.recv_multipart()
            assert empty == b""
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq == -1:
                assert payload == b""
                dealer.close(0)
                return out
            out[seq] = payload

    def close(self):
        self.sub.close(0)
        self.context.term()


def metric(server, name):
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def tokenize(server, text):
    r = requests.post(server.base_url + "/tokenize", json={"prompt": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def complete(server, prompt, max_tokens=1):
    r = requests.post(server.base_url + "/v1/completions",
                      json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                      timeout=120)
    assert r.status_code == 200, r.text


def has(kind):
    return lambda events: any(e["type"] == kind for e in events)


@pytest.fixture
def kv_server(start_server, tmp_path):
    port, replay_port = free_port(), free_port()
    config = {"scheduler": {"num_blocks": NUM_BLOCKS, "block_size": BLOCK_SIZE},
              "kv_events": {"enabled": True, "endpoint": f"tcp://*:{port}",
                            "replay_endpoint": f"tcp://127.0.0.1:{replay_port}",
                            "topic": "placeholder", "hash_seed": SEED}}
    path = tmp_path / "kv.json"
    path.write_text(json.dumps(config))
    # The topic comes from the flag, as a Deployment passes kv@$(POD_IP)@model.
    server = start_with_admin(start_server, tmp_path / "admin.sock", "--config", str(path),
                              "--kv-events-topic", TOPIC)
    server.admin_socket = tmp_path / "admin.sock"
    server.kv_endpoint = f"tcp://127.0.0.1:{port}"
    server.replay_endpoint = f"tcp://127.0.0.1:{replay_port}"
    return server


def subscribe(server):
    """A subscriber whose subscription is known to be live: a flush of the (empty) cache says
    AllBlocksCleared, and the flush is repeated until one arrives (ZeroMQ's slow joiner)."""
    subscriber = Subscriber(server.kv_endpoint, server.replay_endpoint)
    for _ in range(100):
        assert admin_cli(server.admin_socket, "flush-prefix-cache").returncode == 0
        events = subscriber.poll(300)
        while events is not None and not has("AllBlocksCleared")(events):
            events = subscriber.poll(300)
        if events is not None:
            return subscriber
    raise AssertionError("the subscription never became live")


@pytest.fixture
def connecting_kv_server(start_server, tmp_path):
    """A server whose PUB connects to the indexer (a host, no wildcard), which binds."""
    port, replay_port = free_port(), free_port()
    config = {"kv_events": {"enabled": True, "endpoint": f"tcp://127.0.0.1:{port}",
                            "replay_endpoint": f"tcp://127.0.0.1:{replay_port}",
                            "topic": TOPIC, "hash_seed": SEED}}
    path = tmp_path / "kv.json"
    path.write_text(json.dumps(config))
    server = start_with_admin(start_server, tmp_path / "admin.sock", "--config", str(path))
    server.admin_socket = tmp_path / "admin.sock"
    server.kv_endpoint = f"tcp://127.0.0.1:{port}"
    server.replay_endpoint = f"tcp://127.0.0.1:{replay_port}"
    return server


def flush_until_received(server, subscriber, after_seq):
    """Flushes the cache (each flush is one AllBlocksCleared batch) until a batch numbered after
    `after_seq` arrives live."""
    for _ in range(100):
        assert admin_cli(server.admin_socket, "flush-prefix-cache").returncode == 0
        while subscriber.poll(300) is not None:
            if max(subscriber.received) > after_seq:
                return max(subscriber.received)
    raise AssertionError(f"no batch after {after_seq} arrived")


def test_an_indexer_that_binds_late_or_restarts_gets_events_and_replays_the_gap(
        connecting_kv_server):
    server = connecting_kv_server
    # The server has been up a while with nothing at its endpoint: its connects were refused.
    indexer = Subscriber(server.kv_endpoint, server.replay_endpoint, bind=True)
    try:
        last_before = flush_until_received(server, indexer, -1)
    finally:
        indexer.close()
    # While the indexer restarts, two batches go out that nobody receives live.
    for _ in range(2):
        assert admin_cli(server.admin_socket, "flush-prefix-cache").returncode == 0
    restarted = Subscriber(server.kv_endpoint, server.replay_endpoint, bind=True)
    try:
        live = flush_until_received(server, restarted, last_before + 2)
        gap = restarted.replay(last_before + 1)
        assert all(seq in gap for seq in range(last_before + 1, live + 1)), sorted(gap)
        for seq, payload in restarted.received.items():
            assert gap[seq] == payload
        assert msgpack.unpackb(gap[last_before + 1])[1][0]["type"] == "AllBlocksCleared"
    finally:
        restarted.close()


def test_events_mirror_the_prefix_cache_with_router_hashes(kv_server):
    idle = zmq.Context().socket(zmq.SUB)  # subscribes and never reads
    idle.setsockopt(zmq.RCVHWM, 1)
    idle.setsockopt(zmq.SUBSCRIBE, b"")
    idle.connect(kv_server.kv_endpoint)
    subscriber = subscribe(kv_server)
    first_seq = max(subscriber.received)
    try:
        system = "You are a careful assistant who answers questions about ships. " * 3
        prompts = [system + f"Question {i}: how many masts did ship number {i} have?"
                   for i in range(3)]
        for prompt in prompts:
            tokens = tokenize(kv_server, prompt)
            assert len(tokens) >= 2 * BLOCK_SIZE
            complete(kv_server, prompt)
            keys = prompt_keys(tokens, BLOCK_SIZE, SEED)
            # The prompt's full blocks are what a router computes
            # for this prompt; each must be stored, with exactly that hash.
            expected = keys[:len(tokens) // BLOCK_SIZE]
            subscriber.drain_until(lambda _: all(k in subscriber.mirror.digests for k in expected))
        # The shared system prompt was stored once: later prompts reused its blocks.
        shared = prompt_keys(tokenize(kv_server, system), BLOCK_SIZE, SEED)
        assert all(k in subscriber.mirror.digests for k in shared[:-1])

        # Long distinct prompts overflow the 48-block pool: cached blocks are evicted.
        for i in range(4):
            complete(kv_server, f"Story {i}: " + " ".join(f"word{i}x{j}" for j in range(120)))
            subscriber.drain_until(has("BlockStored"))
        assert subscriber.mirror.removed > 0
        # Idle, every cached block is unreferenced: the mirror is exactly the server's cache
        # (once the last tick's batch is in).
        for _ in range(150):
            if len(subscriber.mirror.digests) == metric(kv_server, "troupe:kv_blocks_cached"):
                break
            subscriber.poll(200)
        assert len(subscriber.mirror.digests) == metric(kv_server, "troupe:kv_blocks_cached")
        assert subscriber.mirror.digests

        # Replay returns every batch from a sequence number on, in order, byte for byte what
        # was published.
        since_subscribed = subscriber.replay(first_seq)
        assert sorted(since_subscribed) == list(range(first_seq, max(since_subscribed) + 1))
        # A subscriber that missed everything catches up from sequence 0: a fresh mirror fed
        # only from the replay ends where the live one is.
        everything = subscriber.replay(0)
        newest = max(everything)
        assert sorted(everything) == list(range(newest + 1))
        while max(subscriber.received) < newest:
            assert subscriber.poll(10000) is not None
        for seq, payload in subscriber.received.items():
            assert everything[seq] == payload
        late = Mirror()
        for seq in sorted(everything):
            for event in msgpack.unpackb(everything[seq])[1]:
                late.apply(event)
        assert late.digests == subscriber.mirror.digests

        # A flush empties the cache: AllBlocksCleared.
        assert admin_cli(kv_server.admin_socket, "flush-prefix-cache").returncode == 0
        subscriber.drain_until(has("AllBlocksCleared"))
        assert not subscriber.mirror.digests
        assert metric(kv_server, "troupe:kv_blocks_cached") == 0
        # Nothing was dropped on the way, though one subscriber never read.
        assert metric(kv_server, "troupe:kv_events_dropped_total") == 0
        assert metric(kv_server, "troupe:kv_events_published_total") > 0
    finally:
        subscriber.close()
        idle.close(0)
