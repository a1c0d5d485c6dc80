# CPU backend kernel tests: each optimized kernel against its scalar reference.
#   cpu_rope_factors_test: RoPE frequency factors (rope_freqs.weight), kernel against the
#     formula, CPU backend end to end.
#   cpu_matmul_kquant_test: K-quant weights (Q4_K/Q5_K/Q6_K), kernels against the reference,
#     batch invariance, dummy model.
#   cpu_matmul_q5_test: Q5_0 / Q5_1 weights, kernels against the reference, batch invariance,
#     Q4_K_M-like fallbacks.
#   cpu_token_mask_test: constrained decoding, a grammar's token bitmask applied to a row of
#     logits.
#   cpu_attention_q8_test: the q8_0 KV cache's kernels (attention_q8.hpp) and the Hadamard
#     rotation (hadamard.hpp), scalar twins against AVX2 and against their definitions.
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu"
  TESTS cpu_matmul_test cpu_ops_test cpu_sampler_test cpu_rope_factors_test
        cpu_matmul_kquant_test cpu_matmul_q5_test cpu_token_mask_test cpu_geglu_test
        cpu_matmul_q8k_test cpu_attention_q8_test)
# Attention kernels against their scalar twins; the tiles 5,000 keys deep are SLOW (half a
# minute under ASan for the scalar references; the rest of the test takes another 100 s there).
troupe_add_test(NAME cpu_attention_test SOURCES cpu_attention_test.cpp LIBS troupe_gpu
  LABELS "unit;gpu" SLOW AttentionTiled.MatchesPerTokenChunkOrderBitExactDeepInTheContext)
# libm's expf in AVX2 and AVX-512 lanes against libm itself: the whole softmax domain is SLOW
# (~1e9 libm calls, both forms compared with each).
troupe_add_test(NAME cpu_libm_expf_test SOURCES cpu_libm_expf_test.cpp LIBS troupe_gpu
  LABELS "unit;gpu" SLOW LibmExpf.EqualsExpfOnEveryFloatOfTheSoftmaxDomain)
