# KV transfer over real UCX: two transports in one process and forked peer processes, each case
# under UCX_TLS=tcp and UCX_TLS=posix,cma,tcp (the test sets the variable itself; posix,cma
# alone cannot connect on UCX 1.13, which one more case checks).
troupe_add_test(NAME kv_transfer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_transfer_test.cpp
  LIBS troupe_kv_transfer
  LABELS "unit;actors")
# The kv-cache actor's transfer agent (handshake, pulls, leases) with a fake transport and a
# fake peer client.
troupe_add_test(NAME kv_transfer_agent_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_transfer_agent_test.cpp
  LIBS troupe_actors LABELS "unit;actors")
