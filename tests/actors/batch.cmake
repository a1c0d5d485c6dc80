# Durable batch (issue 40): the file store, the batch store and its journals on a real SQLite
# database in a temporary directory, the feeding policy, and the batch actor with a fake runner.
troupe_add_tests(LIBS troupe_batch LABELS "unit;actors"
  TESTS file_store_test batch_store_test batch_planner_test batch_actor_test)
