# Long-context prefill on the CPU backend: 512 vs 4096-token prompts, per-token vs tiled
# attention; prints numbers.
troupe_add_bench(NAME prefill_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefill_bench.cpp
  LIBS troupe_gpu)
