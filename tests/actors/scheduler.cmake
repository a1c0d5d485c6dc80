# Scheduler policy, KV block pool and radix prefix cache (issue 3): pure synchronous classes,
# tested directly. The simulation test scales its step count with TROUPE_SIM_STEPS.
troupe_add_test(NAME block_pool_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/block_pool_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME prefix_cache_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_cache_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME scheduler_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME scheduler_simulation_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_simulation_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
# Issue 13: fair share across clients and the step-time budget.
troupe_add_test(NAME waiting_queue_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/waiting_queue_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME step_cost_model_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_cost_model_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME scheduler_fairness_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_fairness_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
troupe_add_test(NAME scheduler_time_budget_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_time_budget_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
# Issue 17: disaggregated prefill/decode across servers, the policy's side.
troupe_add_test(NAME scheduler_remote_kv_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_remote_kv_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
