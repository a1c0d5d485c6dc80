# Tiled prefill attention kernels (gpu/cpu/attention_tiled*): the AVX-512 panel scores and tile
# softmax against their scalar twins bit for bit; the bf16 tiles against their scalar twin and,
# within tolerance, the exact path (and the real model's logits).
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS cpu_attention_tiled_test
                 cpu_attention_tiled_bf16_test)
