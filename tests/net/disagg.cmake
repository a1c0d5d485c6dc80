# Disaggregated prefill/decode (issue 17): the JSON codecs and the HTTP client to peer servers.
troupe_add_tests(LIBS troupe_net LABELS "unit;net" TESTS disagg_codec_test http_peer_client_test)
