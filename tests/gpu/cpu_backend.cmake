# CPU backend end to end (dummy weights; the real default model when present). The full-size
# llama-3.2-1b dummy (RoPE factors on) is ~1 GB of weights, ~3 s in Release.
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS cpu_backend_test)
# llama.cpp's greedy reference decodes 20 prompts: minutes under ASan (SLOW); that stage still
# runs the real model through the other RealModel cases.
troupe_add_test(NAME cpu_model_test SOURCES cpu_model_test.cpp LIBS troupe_gpu simdjson::simdjson
  LABELS "unit;gpu" SLOW RealModel.MatchesLlamaCppGreedyReference)
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS cpu_llama32_dummy_test)
# Issue 37: prompt logprobs and hidden rows (embeddings) on the real default model. The
# chunking-and-batch case runs the prompts five ways: 40 s under ASan (SLOW), whose stage keeps
# the other cases.
troupe_add_test(NAME cpu_prompt_outputs_test SOURCES cpu_prompt_outputs_test.cpp LIBS troupe_gpu
  LABELS "unit;gpu" SLOW PromptOutputs.ScoresAndHiddenRowsIgnoreChunkingAndTheBatch)
# A q8_0 KV cache against llama.cpp's (-ctk q8_0 -ctv q8_0 -fa on); the 64-token decode and the
# first step's logits are SLOW (43 s under ASan for the latter; the stage keeps the block count
# and the f16 comparison).
troupe_add_test(NAME cpu_kv_q8_model_test SOURCES cpu_kv_q8_model_test.cpp LIBS troupe_gpu
  simdjson::simdjson LABELS "unit;gpu" SLOW KvQ8Model.MatchesLlamaCppGreedyReference
  KvQ8Model.FirstStepLogitsEqualLlamaCpp)
# A debugging tool, not a test: dumps a reference prompt's forward-pass intermediates.
add_executable(parity_probe ${PROJECT_SOURCE_DIR}/tests/reference/parity_probe.cpp)
target_link_libraries(parity_probe PRIVATE troupe_options troupe_gpu simdjson::simdjson)
target_compile_definitions(parity_probe PRIVATE TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(parity_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# Which backend a model gets and the CUDA backend's proven weight types (no device needed); the
# FP8 E4M3 conversions that are the CUDA fp8 KV cache's CPU twins.
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS backend_factory_test dequantized_weights_test
  fp8_e4m3_test)
# Gemma 3 270M against llama.cpp (tests/reference/gemma3_*.json). SLOW (over a minute each under
# ASan): the 22-prompt greedy decode, the 789-token first step, the named-shape dummy; the ASan
# stage runs the short prompts' logits and the small-window dummy.
troupe_add_test(NAME cpu_gemma3_test SOURCES cpu_gemma3_test.cpp LIBS troupe_gpu simdjson::simdjson
  LABELS "unit;gpu" SLOW Gemma3.MatchesLlamaCppGreedyReference
  Gemma3.FirstStepLogitsPastTheWindowEqualLlamaCpp Gemma3Dummy.BatchingKeepsTheBitsAtTheNamedShape
  Gemma3.KvQ8FirstStepPastTheWindowEqualsLlamaCpp)
