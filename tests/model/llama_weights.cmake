# llama_weights_test: LlamaWeights / LlamaConfig, optional tensors (rope_freqs.weight) from small
#   GGUF files, the llama3 RoPE factor formula, dummy shapes.
troupe_add_tests(LIBS troupe_model LABELS "unit;model" TESTS llama_weights_test)
