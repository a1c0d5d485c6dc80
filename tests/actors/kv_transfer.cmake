# KV transfer over real UCX: two transports in one process and forked peer processes, each case
# under UCX_TLS=tcp and UCX_TLS=posix,cma,tcp (the test sets the variable itself; posix,cma
# alone cannot connect on UCX 1.13, which one more case checks).
troupe_add_tests(LIBS troupe_kv_transfer LABELS "unit;actors" TESTS kv_transfer_test)
# The kv-cache actor's transfer agent (handshake, pulls, leases) with a fake transport and a
# fake peer client.
troupe_add_tests(LIBS troupe_actors LABELS "unit;actors" TESTS kv_transfer_agent_test)
