# The quantized matmul's products alone, per K and row count, per ISA (issue 42); prints numbers.
troupe_add_bench(NAME matmul_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_bench.cpp
  LIBS troupe_gpu)
