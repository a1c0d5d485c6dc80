troupe_add_test(NAME app_test SOURCES config_test.cpp cli_test.cpp credential_reload_test.cpp
  file_limit_test.cpp settings_test.cpp
  LIBS troupe_app LABELS "unit;app")
