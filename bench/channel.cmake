# Channel throughput (1 and several producers) and cross-thread round-trip latency p50/p99.
troupe_add_bench(NAME channel_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/channel_bench.cpp
  LIBS troupe_runtime)
