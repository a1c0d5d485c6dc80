troupe_add_test(NAME net_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/json_writer_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/router_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cpp
  LIBS troupe_net
  LABELS "unit;net")
