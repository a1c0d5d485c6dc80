# Batch-1 decode against the memory-bandwidth roofline (issue 21): read bandwidth with 1 and N
# threads, the bytes a decode step reads, and the measured batch-1 tok/s; prints numbers.
troupe_add_bench(NAME decode_roofline_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_roofline_bench.cpp
  LIBS troupe_gpu)
