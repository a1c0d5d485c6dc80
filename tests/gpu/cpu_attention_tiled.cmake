# Tiled prefill attention kernels (gpu/cpu/attention_tiled*): the AVX-512 panel scores and tile
# softmax against their scalar twins bit for bit.
troupe_add_tests(LIBS troupe_gpu LABELS "unit;gpu" TESTS cpu_attention_tiled_test)
