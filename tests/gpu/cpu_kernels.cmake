# CPU backend kernel tests: each optimized kernel against its scalar reference.
troupe_add_test(NAME cpu_matmul_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_matmul_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
troupe_add_test(NAME cpu_ops_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_ops_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
troupe_add_test(NAME cpu_attention_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_attention_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
troupe_add_test(NAME cpu_sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_sampler_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
# RoPE frequency factors (rope_freqs.weight): kernel against the formula, CPU backend end to end.
troupe_add_test(NAME cpu_rope_factors_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_rope_factors_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
# K-quant weights (Q4_K/Q5_K/Q6_K): kernels against the reference, batch invariance, dummy model.
troupe_add_test(NAME cpu_matmul_kquant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_matmul_kquant_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
# Q5_0 / Q5_1 weights: kernels against the reference, batch invariance, Q4_K_M-like fallbacks.
troupe_add_test(NAME cpu_matmul_q5_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_matmul_q5_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
# Constrained decoding: a grammar's token bitmask applied to a row of logits.
troupe_add_test(NAME cpu_token_mask_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_token_mask_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
