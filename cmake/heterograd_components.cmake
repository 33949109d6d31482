# Optional component targets of heterograd, created when their dependency is found. Used by
# the build tree and by the installed package config alike. Each carries HG_HAS_<X>.
#   heterograd::openmp  OpenMP (Thrust's omp backend)          HG_HAS_OPENMP
#   heterograd::mpi     MPI (the mpi transport)                 HG_HAS_MPI
#   heterograd::cuda    CUDA runtime and cuBLAS                 HG_HAS_CUDA
#   heterograd::nccl    NCCL (the nccl transport)               HG_HAS_NCCL
#   heterograd::blas    CBLAS for the models' GEMM              HG_HAS_BLAS
#   heterograd::torch   LibTorch (heterograd/torch/), with HG_WITH_LIBTORCH or a `torch`
#                       target already found                    HG_HAS_TORCH
include_guard(GLOBAL)

if(NOT TARGET heterograd::openmp)
  find_package(OpenMP QUIET COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    add_library(heterograd::openmp INTERFACE IMPORTED GLOBAL)
    target_link_libraries(heterograd::openmp INTERFACE heterograd::heterograd OpenMP::OpenMP_CXX)
    target_compile_definitions(heterograd::openmp INTERFACE HG_HAS_OPENMP=1)
    # nvcc passes OpenMP to the host compiler only.
    target_compile_options(heterograd::openmp INTERFACE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fopenmp>)
  endif()
endif()

if(NOT TARGET heterograd::mpi AND (NOT DEFINED HG_ENABLE_MPI OR HG_ENABLE_MPI))
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    add_library(heterograd::mpi INTERFACE IMPORTED GLOBAL)
    target_link_libraries(heterograd::mpi INTERFACE heterograd::heterograd MPI::MPI_CXX)
    target_compile_definitions(heterograd::mpi INTERFACE HG_HAS_MPI=1)
  endif()
endif()

if(NOT TARGET heterograd::cuda)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    add_library(heterograd::cuda INTERFACE IMPORTED GLOBAL)
    target_link_libraries(heterograd::cuda INTERFACE heterograd::heterograd CUDA::cudart
                                                     CUDA::cublas)
    target_compile_definitions(heterograd::cuda INTERFACE HG_HAS_CUDA=1)
    target_compile_options(heterograd::cuda INTERFACE
      $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda --expt-relaxed-constexpr>)
  endif()
endif()

if(NOT TARGET heterograd::nccl AND TARGET heterograd::cuda)
  find_path(HG_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
            PATH_SUFFIXES include)
  find_library(HG_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME
               PATH_SUFFIXES lib lib64)
  if(HG_NCCL_INCLUDE_DIR AND HG_NCCL_LIBRARY)
    add_library(heterograd::nccl INTERFACE IMPORTED GLOBAL)
    target_include_directories(heterograd::nccl INTERFACE "${HG_NCCL_INCLUDE_DIR}")
    target_link_libraries(heterograd::nccl INTERFACE heterograd::cuda "${HG_NCCL_LIBRARY}")
    target_compile_definitions(heterograd::nccl INTERFACE HG_HAS_NCCL=1)
  endif()
endif()

# heterograd::blas  CBLAS (OpenBLAS preferred) for the reference models' GEMM   HG_HAS_BLAS
if(NOT TARGET heterograd::blas)
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS QUIET)
  if(NOT BLAS_FOUND)
    unset(BLA_VENDOR)
    find_package(BLAS QUIET)
  endif()
  find_path(HG_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu)
  if(BLAS_FOUND AND HG_CBLAS_INCLUDE_DIR)
    add_library(heterograd::blas INTERFACE IMPORTED GLOBAL)
    target_include_directories(heterograd::blas INTERFACE "${HG_CBLAS_INCLUDE_DIR}")
    target_link_libraries(heterograd::blas INTERFACE heterograd::heterograd BLAS::BLAS)
    target_compile_definitions(heterograd::blas INTERFACE HG_HAS_BLAS=1)
  endif()
endif()

# heterograd::torch  LibTorch for heterograd/torch/ (modules on flat buffers, the deep model
# presets)   HG_HAS_TORCH. Looked for only when asked (HG_WITH_LIBTORCH, or a consumer that found
# Torch itself): find_package(Torch) is slow and LibTorch's headers slower.
if(NOT TARGET heterograd::torch AND (HG_WITH_LIBTORCH OR TARGET torch))
  if(NOT TARGET torch)
    find_package(Torch REQUIRED CONFIG)
  endif()
  add_library(heterograd::torch INTERFACE IMPORTED GLOBAL)
  target_link_libraries(heterograd::torch INTERFACE heterograd::heterograd torch)
  target_compile_definitions(heterograd::torch INTERFACE HG_HAS_TORCH=1)
endif()
