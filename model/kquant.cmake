# Block codecs beyond the plain Q4/Q8 types: K-quant super-blocks (Q4_K, Q5_K, Q6_K) and the
# 5-bit blocks (Q5_0, Q5_1): layouts, dequantizers, simple quantizers.
target_sources(troupe_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/kquant.cpp
                                    ${CMAKE_CURRENT_LIST_DIR}/quant_q5.cpp)
