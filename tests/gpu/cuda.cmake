# CUDA backend tests (issue 8): each op against the CPU implementation, and the backend end to
# end against the CPU backend. They GTEST_SKIP without a device, so CI without a GPU passes and
# says why; bench/device_check.sh runs them on the device machine.
if(TROUPE_HAVE_CUDA)
  troupe_add_test(NAME cuda_backend_test SOURCES cuda_ops_test.cpp cuda_backend_test.cpp
    cuda_token_mask_test.cpp cuda_weights_test.cpp cuda_parity_test.cpp cuda_gemma3_test.cpp
    LIBS troupe_gpu LABELS "gpu;cuda")
endif()
