troupe_add_test(NAME app_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_test.cpp ${CMAKE_CURRENT_LIST_DIR}/cli_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/file_limit_test.cpp
  LIBS troupe_app
  LABELS "unit;app")
