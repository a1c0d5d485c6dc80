# Speculative decoding with n-gram drafts (issue 21).
#   ngram_proposer_test: prompt lookup alone.
#   scheduler_speculative_test: the policy with the fake model (verify spans, KV rollback and
#     block release, prefix cache, stops inside an accepted run, preemption, budgets, the
#     adaptive rule).
#   speculative_model_test: the policy on the real CPU backend: greedy with drafts equals
#     llama.cpp's reference and decoding without them; seeded sampling unchanged by drafts.
#     Each decodes the 20 reference prompts several times: minutes under ASan (SLOW), whose
#     stage runs the same engine path in engine_speculative_test.
troupe_add_test(NAME speculative_model_test SOURCES speculative_model_test.cpp
  LIBS troupe_actors simdjson::simdjson LABELS "unit;actors;engine" SLOW SpeculativeModel.*)
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors"
  TESTS ngram_proposer_test scheduler_speculative_test)
#   engine_speculative_test: the whole engine with drafts on and off (text, stop strings,
#     max_tokens, n > 1 seeded choices, counters).
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors;engine" TESTS engine_speculative_test)
