# Actor runtime: channel, parking spot, completion slot, executor threads, actor lifecycle.
# Message counts scale down under sanitizers (see kScaleDown in the sources); Release keeps
# >= 10^6 messages in the many-producer stress test. scripts/build tsan builds runtime_*test.
troupe_add_test(NAME runtime_channel_test SOURCES channel_test.cpp
  LIBS troupe_runtime LABELS "unit;actors;runtime")
troupe_add_test(NAME runtime_actor_test SOURCES actor_test.cpp
  LIBS troupe_runtime LABELS "unit;actors;runtime")
