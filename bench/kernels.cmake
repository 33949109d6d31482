# The kernels suite's extras.
# - hg-kernels-capi: a C interface to the kernels that bench/compare/torch_optim.py loads with
#   ctypes, to time PyTorch and heterograd side by side in one process.
# - hg-bench-kernels-cuda: the suite's GPU twin (./hg gpu-check runs build/cuda/bench/
#   hg-bench-*-cuda).
if(NOT TARGET hg-kernels-capi AND TARGET heterograd::openmp)
  add_library(hg-kernels-capi SHARED "${CMAKE_CURRENT_SOURCE_DIR}/kernels_capi.cpp")
  hg_internal_target(hg-kernels-capi)
  target_link_libraries(hg-kernels-capi PRIVATE heterograd::openmp)
  target_compile_options(hg-kernels-capi PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-march=${HG_BENCH_ARCH}>)
endif()
if(HG_ENABLE_CUDA AND NOT TARGET hg-bench-kernels-cuda)
  add_executable(hg-bench-kernels-cuda "${CMAKE_CURRENT_SOURCE_DIR}/kernels_cuda_bench.cu")
  hg_internal_target(hg-bench-kernels-cuda CUDA)
  target_link_libraries(hg-bench-kernels-cuda PRIVATE benchmark::benchmark)
  add_dependencies(hg-cuda-all hg-bench-kernels-cuda)
endif()
