# Disaggregated prefill/decode (issue 17): the JSON codecs and the HTTP client to peer servers.
troupe_add_test(NAME disagg_codec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/disagg_codec_test.cpp
  LIBS troupe_net LABELS "unit;net")
troupe_add_test(NAME peer_client_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/peer_client_test.cpp
  LIBS troupe_net LABELS "unit;net")
