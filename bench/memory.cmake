# The memory suite's GPU twin: device copy and in-place update bandwidth (./hg gpu-check).
if(HG_ENABLE_CUDA)
  add_executable(hg-bench-memory-cuda "${CMAKE_CURRENT_SOURCE_DIR}/memory_cuda_bench.cu")
  hg_internal_target(hg-bench-memory-cuda CUDA)
  target_link_libraries(hg-bench-memory-cuda PRIVATE benchmark::benchmark)
  add_dependencies(hg-cuda-all hg-bench-memory-cuda)
endif()
