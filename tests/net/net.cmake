troupe_add_test(NAME net_test
  SOURCES json_writer_test.cpp router_test.cpp http_server_test.cpp slow_client_test.cpp
    request_record_test.cpp accept_backoff_test.cpp http_framing_test.cpp access_policy_test.cpp
    http_auth_test.cpp rate_limits_test.cpp session_chaos_test.cpp
  LIBS troupe_net LABELS "unit;net")
troupe_add_test(NAME net_openai_test
  SOURCES openai_request_test.cpp openai_structured_output_test.cpp openai_codec_test.cpp
    openai_tools_test.cpp
    openai_routes_test.cpp
    openai_server_test.cpp
  LIBS troupe_net LABELS "unit;net")
# /v1/embeddings (issue 37): its codec, output shaping and route against a synchronous fake engine.
troupe_add_test(NAME net_openai_embeddings_test SOURCES openai_embeddings_test.cpp
  LIBS troupe_net LABELS "unit;net")
troupe_add_tests(LIBS troupe_api_keys LABELS "unit;net" TESTS api_keys_test)
troupe_add_test(NAME net_multipart_test SOURCES multipart_test.cpp LIBS troupe_net LABELS "unit;net")
