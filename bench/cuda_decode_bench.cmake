# CUDA backend decode/prefill benchmark (issue 8): a plain program (no Google Benchmark), run on
# the device machine by bench/device_check.sh; prints "no CUDA device" elsewhere.
if(TROUPE_HAVE_CUDA)
  add_executable(cuda_decode_bench ${CMAKE_CURRENT_LIST_DIR}/cuda_decode_bench.cpp)
  target_link_libraries(cuda_decode_bench PRIVATE troupe_options troupe_gpu)
  target_compile_definitions(cuda_decode_bench PRIVATE TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
