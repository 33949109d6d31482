# Optional component targets of heterograd, created when their dependency is found. Used by
# the build tree and by the installed package config alike. Each carries HG_HAS_<X>.
#   heterograd::openmp  OpenMP (Thrust's omp backend)          HG_HAS_OPENMP
#   heterograd::mpi     MPI (the mpi transport)                 HG_HAS_MPI
#   heterograd::gloo    Gloo with TCP (the gloo transport)      HG_HAS_GLOO
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

# Gloo (Debian: libgloo-dev) with its TCP transport; HG_GLOO_HAS_REDIS when its build has the
# Redis store (GLOO_USE_REDIS in gloo/config.h) and hiredis.h, which its header includes, is
# there (Debian: libhiredis-dev, not a dependency of libgloo-dev).
if(NOT TARGET heterograd::gloo AND (NOT DEFINED HG_ENABLE_GLOO OR HG_ENABLE_GLOO))
  find_path(HG_GLOO_INCLUDE_DIR gloo/config.h)
  find_library(HG_GLOO_LIBRARY gloo)
  if(HG_GLOO_INCLUDE_DIR AND HG_GLOO_LIBRARY)
    file(STRINGS "${HG_GLOO_INCLUDE_DIR}/gloo/config.h" hg_gloo_tcp
         REGEX "define GLOO_HAVE_TRANSPORT_TCP 1")
    file(STRINGS "${HG_GLOO_INCLUDE_DIR}/gloo/config.h" hg_gloo_redis
         REGEX "define GLOO_USE_REDIS 1")
    find_package(Threads QUIET)
    if(hg_gloo_tcp AND Threads_FOUND)
      add_library(heterograd::gloo INTERFACE IMPORTED GLOBAL)
      target_include_directories(heterograd::gloo INTERFACE "${HG_GLOO_INCLUDE_DIR}")
      target_link_libraries(heterograd::gloo INTERFACE heterograd::heterograd
                                                       "${HG_GLOO_LIBRARY}" Threads::Threads)
      target_compile_definitions(heterograd::gloo INTERFACE HG_HAS_GLOO=1)
      find_path(HG_HIREDIS_INCLUDE_DIR hiredis.h PATH_SUFFIXES hiredis)
      if(hg_gloo_redis AND HG_HIREDIS_INCLUDE_DIR)
        target_include_directories(heterograd::gloo INTERFACE "${HG_HIREDIS_INCLUDE_DIR}")
        target_compile_definitions(heterograd::gloo INTERFACE HG_GLOO_HAS_REDIS=1)
      endif()
    endif()
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
