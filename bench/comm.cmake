# The comm suite's MPI peers, built next to hg-bench-comm and run by bench/compare/comm_peers.sh
# under mpirun: raw MPI_Allreduce, heterograd's mpi transport timed the same way, and a
# send/recv ping-pong of both.
if(TARGET heterograd::mpi)
  foreach(_p raw_mpi_allreduce hg_mpi_allreduce hg_mpi_pingpong)
    string(REPLACE "_" "-" _t "hg-bench-comm-${_p}")
    add_executable(${_t} "${CMAKE_CURRENT_SOURCE_DIR}/compare/${_p}.cpp")
    hg_internal_target(${_t})
    target_compile_options(${_t} PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-march=${HG_BENCH_ARCH}>)
  endforeach()
endif()
