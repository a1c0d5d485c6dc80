# The web chat page, embedded into the binary at configure time.
set(_chat_html "${CMAKE_CURRENT_LIST_DIR}/web/chat.html")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_chat_html}")
file(READ "${_chat_html}" TROUPE_CHAT_HTML)
configure_file("${CMAKE_CURRENT_LIST_DIR}/web/chat_page.cpp.in"
  "${PROJECT_BINARY_DIR}/generated/net/chat_page.cpp" @ONLY)
# The dashboard (GET /dashboard), embedded the same way.
set(_dashboard_html "${CMAKE_CURRENT_LIST_DIR}/web/dashboard.html")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_dashboard_html}")
file(READ "${_dashboard_html}" TROUPE_DASHBOARD_HTML)
configure_file("${CMAKE_CURRENT_LIST_DIR}/web/dashboard_page.cpp.in"
  "${PROJECT_BINARY_DIR}/generated/net/dashboard_page.cpp" @ONLY)
target_sources(troupe_net PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/web_page.cpp"
  "${PROJECT_BINARY_DIR}/generated/net/chat_page.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/dashboard_routes.cpp"
  "${PROJECT_BINARY_DIR}/generated/net/dashboard_page.cpp")
