# LlamaWeights / LlamaConfig: optional tensors (rope_freqs.weight) from small GGUF files, the
# llama3 RoPE factor formula, dummy shapes.
troupe_add_test(NAME llama_weights_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_weights_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
