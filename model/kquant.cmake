# K-quant super-block codecs (Q4_K, Q5_K, Q6_K): layouts, dequantizers, a simple quantizer.
target_sources(troupe_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/kquant.cpp)
