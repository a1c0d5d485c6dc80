# WebSocket chat: the protocol (Beast-free) and the Beast session.
target_sources(troupe_net PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/ws_chat.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/ws_session.cpp")
