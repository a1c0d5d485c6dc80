# The q8_0 cache's decode attention per ISA, in one process (issue 38); prints numbers.
troupe_add_bench(NAME attention_q8_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/attention_q8_bench.cpp
  LIBS troupe_gpu)
