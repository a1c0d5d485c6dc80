# The block formats (model/quants/): one file pair per family (Q4_0/Q4_1/Q8_0, Q5_0/Q5_1,
# K-quants) with the block structs, reference dequantizers and simple quantizers, and the
# dequantizer by type. No FMA contraction: the reference dequantizers must give the same bits as
# ggml's and as the CUDA dequantizer, which spell every product and sum out.
set(_quant_sources
  ${CMAKE_CURRENT_LIST_DIR}/quants/dequantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quants/kquant.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quants/q4_q8.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quants/q5.cpp
)
target_sources(troupe_model PRIVATE ${_quant_sources})
set_source_files_properties(${_quant_sources} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
