# The admin socket (docs/design.md §4): protocol (pure), socket-file housekeeping, Asio listener.
target_sources(troupe_net PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/admin_protocol.cpp
  ${CMAKE_CURRENT_LIST_DIR}/admin_server.cpp
  ${CMAKE_CURRENT_LIST_DIR}/admin_socket_file.cpp
)
