# Model architecture config, weights view and dummy weights (llama family).
target_sources(troupe_model PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/llama_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dummy_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dequantized_weights.cpp
)
