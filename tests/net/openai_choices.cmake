# `n` > 1 choices per request (net/openai_sink.cpp) through the Router, against the FakeEngine.
troupe_add_test(NAME net_openai_multi_test SOURCES openai_choices_test.cpp
  LIBS troupe_net LABELS "unit;net")
