# The async suite's MPI round-trip program, run under mpirun -np 2 by
# bench/compare/async_peers.sh. Built once the transport layer (issue 4) is in the tree.
if(TARGET heterograd::mpi AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/../include/heterograd/comm/mpi.hpp")
  add_executable(hg-bench-async-mpi-roundtrip "${CMAKE_CURRENT_SOURCE_DIR}/compare/async_mpi_roundtrip.cpp")
  hg_internal_target(hg-bench-async-mpi-roundtrip)
endif()
