# The async suite's MPI round-trip program, run under mpirun -np 2 by
# bench/compare/async_peers.sh.
if(TARGET heterograd::mpi)
  add_executable(hg-bench-async-mpi-roundtrip "${CMAKE_CURRENT_SOURCE_DIR}/compare/async_mpi_roundtrip.cpp")
  hg_internal_target(hg-bench-async-mpi-roundtrip)
endif()
