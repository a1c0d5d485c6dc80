# `troupe admin`: the admin socket's command-line client.
target_sources(troupe_app PRIVATE ${CMAKE_CURRENT_LIST_DIR}/admin_command.cpp)
