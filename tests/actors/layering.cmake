# The actors' folders include one another in one direction only (a source scan, no actor code).
troupe_add_tests(LIBS troupe_options LABELS "unit;actors" TESTS layering_test)
