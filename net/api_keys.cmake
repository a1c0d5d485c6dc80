# API keys (issue 16): SHA-256 and a constant-time compare from OpenSSL's libcrypto.
find_package(OpenSSL REQUIRED)
add_library(troupe_api_keys STATIC ${CMAKE_CURRENT_LIST_DIR}/api_keys.cpp)
target_link_libraries(troupe_api_keys PUBLIC troupe_options fmt::fmt OpenSSL::Crypto)
target_link_libraries(troupe_net PUBLIC troupe_api_keys)
# Which surfaces need a key (the HTTP server applies it after each request header).
target_sources(troupe_net PRIVATE ${CMAKE_CURRENT_LIST_DIR}/access_policy.cpp)
