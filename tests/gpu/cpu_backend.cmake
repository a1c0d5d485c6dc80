# CPU backend end to end (dummy weights; the real default model when present).
troupe_add_test(NAME cpu_backend_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_backend_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
troupe_add_test(NAME cpu_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_model_test.cpp
  LIBS troupe_gpu simdjson::simdjson LABELS "unit;gpu")
# The full-size llama-3.2-1b dummy (RoPE factors on): ~1 GB of weights, ~3 s in Release.
troupe_add_test(NAME cpu_llama32_dummy_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_llama32_dummy_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
# A debugging tool, not a test: dumps a reference prompt's forward-pass intermediates.
add_executable(parity_probe ${PROJECT_SOURCE_DIR}/tests/reference/parity_probe.cpp)
target_link_libraries(parity_probe PRIVATE troupe_options troupe_gpu simdjson::simdjson)
target_compile_definitions(parity_probe PRIVATE TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(parity_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
