# The models suite's LibTorch presets (models_torch.cpp) when the torch component is built, and
# their MPI figure (compare/hg_torch_local_sgd_mpi.cpp, run by compare/models_peers.sh under
# mpirun) when MPI is too.
if(TARGET heterograd::torch)
  target_sources(hg-bench-models PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/models_torch.cpp")
  target_link_libraries(hg-bench-models PRIVATE heterograd::torch)
  if(TARGET heterograd::mpi AND NOT TARGET hg-bench-models-torch-mpi)
    # Built by ./hg bench only (EXCLUDE_FROM_ALL): one more LibTorch translation unit in CI's build.
    add_executable(hg-bench-models-torch-mpi EXCLUDE_FROM_ALL "${CMAKE_CURRENT_SOURCE_DIR}/compare/hg_torch_local_sgd_mpi.cpp")
    hg_internal_target(hg-bench-models-torch-mpi)
    target_link_libraries(hg-bench-models-torch-mpi PRIVATE heterograd::torch heterograd::mpi)
    target_compile_options(hg-bench-models-torch-mpi PRIVATE
      $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-march=${HG_BENCH_ARCH}>)
  endif()
endif()
