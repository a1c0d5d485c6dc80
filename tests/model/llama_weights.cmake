# LlamaWeights / LlamaConfig: optional tensors (rope_freqs.weight) from small GGUF files, the
# llama3 RoPE factor formula, dummy shapes.
troupe_add_test(NAME llama_weights_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_weights_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
# K-quant codecs (model/kquant.hpp): hand-built blocks, scale packing, quantizer round trip.
troupe_add_test(NAME kquant_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kquant_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
# Q5_0 / Q5_1 codecs (model/quant_q5.hpp): hand-built blocks (qh bit order), quantizer round trip.
troupe_add_test(NAME quant_q5_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/quant_q5_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
