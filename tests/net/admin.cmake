troupe_add_test(NAME admin_test SOURCES admin_protocol_test.cpp admin_server_test.cpp
  stats_schema_test.cpp dashboard_routes_test.cpp
  LIBS troupe_net LABELS "unit;net")
# `troupe admin` against a real AdminServer (links the app library for app/admin_command.cpp).
troupe_add_tests(LIBS troupe_app LABELS "unit;net;app" TESTS admin_cli_test)
