# CPU backend throughput (prompt processing and batched decode); prints numbers.
troupe_add_bench(NAME cpu_forward_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_forward_bench.cpp
  LIBS troupe_gpu)
