# CPU backend end to end (dummy weights; the real default model when present).
troupe_add_test(NAME cpu_backend_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_backend_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
troupe_add_test(NAME cpu_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_model_test.cpp
  LIBS troupe_gpu simdjson::simdjson LABELS "unit;gpu")
# The full-size llama-3.2-1b dummy (RoPE factors on): ~1 GB of weights, ~3 s in Release.
troupe_add_test(NAME cpu_llama32_dummy_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_llama32_dummy_test.cpp
  LIBS troupe_gpu LABELS "unit;gpu")
