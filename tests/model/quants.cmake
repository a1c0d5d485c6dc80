# The block formats (model/quants/): hand-built blocks with known values for each reference
# dequantizer, struct sizes against GGUF's, quantizer round trips, the dequantizer by type.
troupe_add_test(NAME quants_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/quants/q4_q8_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/quants/q5_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/quants/kquant_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/quants/dequantize_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
