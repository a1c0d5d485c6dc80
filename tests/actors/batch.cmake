# Durable batch (issue 40): the file store on a real SQLite database in a temporary directory.
troupe_add_tests(LIBS troupe_batch LABELS "unit;actors" TESTS file_store_test)
