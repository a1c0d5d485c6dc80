# Scheduler policy, KV block pool and radix prefix cache (issue 3): pure synchronous classes,
# tested directly. The simulation test scales its step count with TROUPE_SIM_STEPS.
# waiting_queue_test ... scheduler_time_budget_test: issue 13, fair share across clients and the
# step-time budget. scheduler_remote_kv_test: issue 17, disaggregated prefill/decode across
# servers, the policy's side. scheduler_kv_groups_test, kv_window_pages_test: issue 36,
# sliding-window KV groups and their pages in the prefix cache; scheduler_remote_kv_groups_test:
# both, P/D with KV groups.
# kv_capacity_test: issue 38, the KV cache's size in tokens and conversations.
# step_account_test: issue 42, the step loop's account of its wall time.
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors"
  TESTS block_pool_test prefix_cache_test scheduler_test scheduler_simulation_test
        waiting_queue_test step_cost_model_test scheduler_fairness_test
        scheduler_time_budget_test scheduler_remote_kv_test scheduler_kv_groups_test
        kv_capacity_test scheduler_prompt_outputs_test step_account_test kv_window_pages_test
        scheduler_remote_kv_groups_test)
