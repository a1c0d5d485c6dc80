# What KV events cost the step loop (issue 20): caching a sequence's full blocks with and without
# the router's block hash and event collection.
troupe_add_bench(NAME kv_events_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_events_bench.cpp
  LIBS troupe_actors)
