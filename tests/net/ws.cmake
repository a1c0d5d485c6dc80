# WebSocket chat protocol (net/ws_chat.cpp), driven without a socket against the FakeEngine.
troupe_add_test(NAME ws_chat_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ws_chat_test.cpp
  LIBS troupe_net
  LABELS "unit;net")
