# The CUDA step backend (issue 8): one op per .cu/.cuh pair, the cuBLAS projections and the
# Backend implementation (host C++, no Boost/spdlog/fmt so it also builds with only CUDA and a
# C++ compiler: bench/cuda_standalone/).
target_sources(troupe_gpu_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/dequantize.cu
  ${CMAKE_CURRENT_LIST_DIR}/embedding.cu
  ${CMAKE_CURRENT_LIST_DIR}/kv_write.cu
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm.cu
  ${CMAKE_CURRENT_LIST_DIR}/rope.cu
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cu
  ${CMAKE_CURRENT_LIST_DIR}/silu_mul.cu
  ${CMAKE_CURRENT_LIST_DIR}/geglu_mul.cu
  ${CMAKE_CURRENT_LIST_DIR}/head_rmsnorm.cu
  ${CMAKE_CURRENT_LIST_DIR}/token_mask.cu
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kv_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kv_host_mirror.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_inputs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_forward.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_completion.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp
)
# The backend's host code includes model/ headers (C++20) and the CPU reference's validation.
target_link_libraries(troupe_gpu_cuda PUBLIC troupe_model Threads::Threads)
# GEGLU uploads the CPU twin's own GELU table (gpu/cpu/geglu.hpp, in troupe_gpu, which links this
# library): a cycle of two static libraries, which CMake links by naming them twice.
target_link_libraries(troupe_gpu_cuda PRIVATE troupe_gpu)
