troupe_add_test(NAME gguf_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_test.cpp ${CMAKE_CURRENT_LIST_DIR}/model_info_test.cpp
  LIBS troupe_model
  LABELS "unit;model")
