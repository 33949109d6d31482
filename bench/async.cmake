# The async suite's MPI round-trip program, run under mpirun -np 2 by
# bench/compare/async_peers.sh.
if(TARGET heterograd::mpi)
  add_executable(hg-bench-async-mpi-roundtrip "${CMAKE_CURRENT_SOURCE_DIR}/compare/async_mpi_roundtrip.cpp")
  hg_internal_target(hg-bench-async-mpi-roundtrip)
endif()
# The algorithms on device buffers (issue 22): the async servers' and the round methods'
# steps on a GPU, captured against launched steps, local SGD over NCCL on every GPU
# (./hg gpu-check runs build/cuda/bench/hg-bench-*-cuda).
if(HG_ENABLE_CUDA AND NOT TARGET hg-bench-algorithms-cuda)
  add_executable(hg-bench-algorithms-cuda "${CMAKE_CURRENT_SOURCE_DIR}/algorithms_cuda_bench.cu")
  hg_internal_target(hg-bench-algorithms-cuda CUDA)
  target_link_libraries(hg-bench-algorithms-cuda PRIVATE benchmark::benchmark)
  if(TARGET heterograd::nccl)
    target_link_libraries(hg-bench-algorithms-cuda PRIVATE heterograd::nccl)
  endif()
  add_dependencies(hg-cuda-all hg-bench-algorithms-cuda)
endif()
