# The kernels suite's GPU twin (./hg gpu-check runs build/cuda/bench/hg-bench-*-cuda).
if(HG_ENABLE_CUDA AND NOT TARGET hg-bench-kernels-cuda)
  add_executable(hg-bench-kernels-cuda "${CMAKE_CURRENT_SOURCE_DIR}/kernels_cuda_bench.cu")
  hg_internal_target(hg-bench-kernels-cuda CUDA)
  target_link_libraries(hg-bench-kernels-cuda PRIVATE benchmark::benchmark)
  add_dependencies(hg-cuda-all hg-bench-kernels-cuda)
endif()
