troupe_add_test(NAME stop_matcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stop_matcher_test.cpp ${CMAKE_CURRENT_LIST_DIR}/kv_flush_test.cpp
  LIBS troupe_actors
  LABELS "unit;actors")
# In-process end to end on the real default model (skips when the model file is absent).
troupe_add_test(NAME engine_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
  LIBS troupe_actors
  LABELS "unit;actors;engine")
troupe_add_test(NAME engine_batch_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_batch_test.cpp
  LIBS troupe_actors
  LABELS "actors;engine;slow")
# The kv-cache actor alone: loans, flushes during a loan, stats.
troupe_add_test(NAME kv_cache_actor_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_cache_actor_test.cpp
  LIBS troupe_actors
  LABELS "unit;actors")
# Issue 13: over-long prompts refused by their bytes, tokenizing stopped at the context.
troupe_add_test(NAME prompt_builder_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/prompt_builder_test.cpp
  LIBS troupe_actors
  LABELS "unit;actors")
# Issue 18: the pure output side of ingress on hand-made scheduler events.
troupe_add_test(NAME output_processor_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/output_processor_test.cpp
  LIBS troupe_actors
  LABELS "unit;actors")
