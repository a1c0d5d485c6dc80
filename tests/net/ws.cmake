# WebSocket chat protocol (net/ws_chat.cpp), driven without a socket against the FakeEngine.
troupe_add_test(NAME ws_chat_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ws_chat_test.cpp
  LIBS troupe_net
  LABELS "unit;net")

# WebSocket sessions on server shutdown (close 1001, final frames first, 503 for late upgrades),
# over loopback sockets with a hand-rolled client against the FakeEngine.
troupe_add_test(NAME ws_shutdown_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ws_shutdown_test.cpp
  LIBS troupe_net
  LABELS "unit;net")
