troupe_add_test(NAME admin_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/admin_protocol_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/admin_server_test.cpp
  LIBS troupe_net
  LABELS "unit;net")

# `troupe admin` against a real AdminServer (links the app library for app/admin_command.cpp).
troupe_add_test(NAME admin_cli_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admin_cli_test.cpp
  LIBS troupe_app
  LABELS "unit;net;app")
