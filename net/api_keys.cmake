# API keys (issue 16): SHA-256 and a constant-time compare from OpenSSL's libcrypto.
find_package(OpenSSL REQUIRED)
add_library(troupe_api_keys STATIC ${CMAKE_CURRENT_LIST_DIR}/api_keys.cpp)
target_link_libraries(troupe_api_keys PUBLIC troupe_options fmt::fmt OpenSSL::Crypto)
target_link_libraries(troupe_net PUBLIC troupe_api_keys)
