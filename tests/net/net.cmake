troupe_add_test(NAME net_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/json_writer_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/router_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/slow_client_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/request_record_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/accept_backoff_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_framing_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/access_policy_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_auth_test.cpp
  LIBS troupe_net
  LABELS "unit;net")

troupe_add_test(NAME net_openai_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/openai_request_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/openai_codec_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/openai_routes_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/openai_server_test.cpp
  LIBS troupe_net
  LABELS "unit;net")

troupe_add_test(NAME api_keys_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_keys_test.cpp
  LIBS troupe_api_keys LABELS "unit;net")
