# Tiled prefill attention kernels (gpu/cpu/attention_tiled*): the AVX-512 panel scores and tile
# softmax against their scalar twins bit for bit; the bf16 tiles against their scalar twin and,
# within tolerance, the exact path (and the real model's logits).
# The real model's 1,536-token prompt through both paths is SLOW: 11 s in Release, almost four
# minutes under ASan on a CPU with AVX512-BF16 (skipped on the others); the kernels' own tests
# keep the bf16 tiles under the sanitizer.
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS cpu_attention_tiled_test)
troupe_add_test(NAME cpu_attention_tiled_bf16_test SOURCES cpu_attention_tiled_bf16_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu" SLOW AttentionTiledBf16.RealModelLongPromptKeepsTheNextToken)
