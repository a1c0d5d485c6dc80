# Speculative decoding with n-gram drafts (issue 21): repeating vs free-chat workloads, 1 and 16
# streams, drafts off vs on.
troupe_add_bench(NAME speculative_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/speculative_bench.cpp
  LIBS troupe_actors)
