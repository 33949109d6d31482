# Locates CCCL (Thrust, CUB, libcu++) in the CUDA toolkit and defines the imported target
# heterograd::cccl. Shared by the build tree and the installed package config.
# Search order: HG_CCCL_INCLUDE_DIR, CUDA_HOME / CUDA_PATH, the directory of nvcc on PATH,
# /usr/local/cuda. CUDA 13 keeps CCCL under include/cccl; older toolkits under include/.
if(TARGET heterograd::cccl)
  return()
endif()
set(_hg_cuda_roots)
foreach(_v CUDA_HOME CUDA_PATH CUDAToolkit_ROOT)
  if(DEFINED ENV{${_v}})
    list(APPEND _hg_cuda_roots "$ENV{${_v}}")
  endif()
endforeach()
find_program(_hg_nvcc nvcc)
if(_hg_nvcc)
  get_filename_component(_hg_nvcc_real "${_hg_nvcc}" REALPATH)
  get_filename_component(_hg_nvcc_bin "${_hg_nvcc_real}" DIRECTORY)
  get_filename_component(_hg_nvcc_root "${_hg_nvcc_bin}" DIRECTORY)
  list(APPEND _hg_cuda_roots "${_hg_nvcc_root}")
endif()
list(APPEND _hg_cuda_roots /usr/local/cuda)
set(_hg_hints)
foreach(_r IN LISTS _hg_cuda_roots)
  list(APPEND _hg_hints "${_r}/include/cccl" "${_r}/include" "${_r}/targets/x86_64-linux/include/cccl")
endforeach()
find_path(HG_CCCL_INCLUDE_DIR NAMES thrust/version.h cub/version.cuh HINTS ${_hg_hints}
  DOC "Directory holding thrust/ and cub/ (CCCL from the CUDA toolkit)")
if(NOT HG_CCCL_INCLUDE_DIR)
  message(FATAL_ERROR
    "heterograd: CCCL (Thrust/CUB) not found. Install the CUDA toolkit (it ships CCCL) and "
    "put nvcc on PATH or set CUDA_HOME, or set HG_CCCL_INCLUDE_DIR to the folder holding "
    "thrust/version.h.")
endif()
add_library(heterograd::cccl INTERFACE IMPORTED)
set_target_properties(heterograd::cccl PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${HG_CCCL_INCLUDE_DIR}"
  INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${HG_CCCL_INCLUDE_DIR}")
