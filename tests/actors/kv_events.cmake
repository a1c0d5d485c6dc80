# KV-cache events for prefix-aware routers (issue 20): the router's block hash (vectors from
# Python's cbor2 + hashlib, as vLLM computes them), the events the KV manager collects and the
# kv-cache actor forwards, their msgpack bytes (from Python's msgpack), and the ZeroMQ
# publisher with a real subscriber and replay client.
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors"
  TESTS kv_block_hash_test kv_events_test kv_event_codec_test)
troupe_add_test(NAME kv_event_publisher_test SOURCES kv_event_publisher_test.cpp
  LIBS troupe_actors PkgConfig::ZMQ LABELS "unit;actors")
