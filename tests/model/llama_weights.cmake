# llama_weights_test: LlamaWeights / LlamaConfig, optional tensors (rope_freqs.weight) from small
#   GGUF files, the llama3 RoPE factor formula, dummy shapes.
# kquant_test: K-quant codecs (model/kquant.hpp), hand-built blocks, scale packing, quantizer
#   round trip.
# quant_q5_test: Q5_0 / Q5_1 codecs (model/quant_q5.hpp), hand-built blocks (qh bit order),
#   quantizer round trip.
troupe_add_tests(LIBS troupe_model LABELS "unit;model"
  TESTS llama_weights_test kquant_test quant_q5_test)
