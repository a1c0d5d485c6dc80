troupe_add_test(NAME gguf_test SOURCES gguf_test.cpp model_info_test.cpp
  LIBS troupe_model LABELS "unit;model")
