# The UCX KV transport alone: a 1k-token prompt's KV pulled from a forked prefill engine.
troupe_add_bench(NAME kv_transfer_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_transfer_bench.cpp
  LIBS troupe_kv_transfer)
