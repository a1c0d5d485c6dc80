# ws_chat_test: the WebSocket chat protocol (net/ws_chat.cpp), driven without a socket against
#   the FakeEngine.
# ws_shutdown_test: WebSocket sessions on server shutdown (close 1001, final frames first, 503
#   for late upgrades), over loopback sockets with a hand-rolled client against the FakeEngine.
troupe_add_tests(LIBS troupe_net LABELS "unit;net" TESTS ws_chat_test ws_shutdown_test)
