troupe_add_test(NAME stop_matcher_test SOURCES stop_matcher_test.cpp kv_flush_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
# In-process end to end on the real default model (skips when the model file is absent).
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors;engine" TESTS engine_test)
troupe_add_tests(LIBS troupe_actors LABELS "actors;engine;slow" TESTS engine_batch_test)
# Structured output (issue 19) on the real model: JSON schema, regex, choice, n > 1, ignore_eos.
# The 16 + 16 batch and the preemption case decode hundreds of steps: minutes under ASan (SLOW),
# whose stage keeps the other constrained cases.
troupe_add_test(NAME engine_structured_output_test SOURCES engine_structured_output_test.cpp
  LIBS troupe_actors simdjson::simdjson LABELS "unit;actors;engine"
  SLOW EngineStructuredOutput.SixteenConstrainedAndSixteenPlainInOneBatch
       EngineStructuredOutput.PreemptedConstrainedSequencesGiveTheirSoloOutput)
# Tool calling (issue 19) on the real model: required / named / auto calls parse and match. The
# required/named and auto cases decode many calls: 55 s and 88 s under ASan (SLOW), whose stage
# keeps the engine's tool path through the bad-input case.
troupe_add_test(NAME engine_tool_calls_test SOURCES engine_tool_calls_test.cpp
  LIBS troupe_actors simdjson::simdjson LABELS "unit;actors;engine"
  SLOW EngineToolCalls.AutoGivesTextOrWellFormedCalls
       EngineToolCalls.RequiredAndNamedGiveParseableCallsMatchingTheSchema)
# The scheduler actor's matchers (StructuredOutput) on hand-built batches; needs xgrammar.
if(TARGET troupe_grammar)
  troupe_add_tests(LIBS troupe_actors LABELS "unit;actors" TESTS structured_output_test)
endif()
# kv_cache_actor_test: the kv-cache actor alone (loans, flushes during a loan, stats).
# prompt_builder_test: issue 13, over-long prompts refused by their bytes, tokenizing stopped at
# the context.
# output_processor_test: issue 18, the pure output side of ingress on hand-made scheduler events.
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors"
  TESTS kv_cache_actor_test prompt_builder_test output_processor_test)
