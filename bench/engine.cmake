troupe_add_bench(NAME engine_overhead_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_overhead_bench.cpp
  LIBS troupe_actors)
