# Scheduler policy cost per step: schedule() + on_step_complete() at 256 running sequences with
# ~2k-token contexts (target < 50 us: a rounding error next to a forward pass).
troupe_add_bench(NAME scheduler_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_bench.cpp
  LIBS troupe_actors)
