# `n` > 1 choices per request (net/openai_sink.cpp) through the Router, against the
# FakeEngine.
troupe_add_test(NAME net_openai_multi_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/openai_choices_test.cpp
  LIBS troupe_net
  LABELS "unit;net")
