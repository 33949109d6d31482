# Helpers for heterograd's own tests, benchmarks and examples (not installed).
include_guard(GLOBAL)

string(TOUPPER "${HG_DEVICE_SYSTEM}" HG_DEVICE_SYSTEM)
if(NOT HG_DEVICE_SYSTEM MATCHES "^(CPP|OMP)$")
  message(FATAL_ERROR "HG_DEVICE_SYSTEM='${HG_DEVICE_SYSTEM}': must be CPP or OMP (CUDA targets "
                      "are added next to the CPU ones by HG_ENABLE_CUDA)")
endif()
if(HG_DEVICE_SYSTEM STREQUAL "OMP" AND NOT TARGET heterograd::openmp)
  message(FATAL_ERROR "HG_DEVICE_SYSTEM=OMP needs OpenMP, which was not found; install a "
                      "compiler with OpenMP or use the cpu-cpp preset")
endif()

add_custom_target(hg-cuda-all)

# Links the library and the build's backends into an internal target. CPU targets use the
# HG_DEVICE_SYSTEM backend; with CUDA, the target is compiled by nvcc for the cuda backend
# (the omp backend stays available beside it).
function(hg_internal_target tgt)
  cmake_parse_arguments(I "CUDA" "" "" ${ARGN})
  target_link_libraries(${tgt} PRIVATE heterograd::heterograd)
  if(HG_DEVICE_SYSTEM STREQUAL "OMP")
    target_link_libraries(${tgt} PRIVATE heterograd::openmp)
  endif()
  if(TARGET heterograd::mpi)
    target_link_libraries(${tgt} PRIVATE heterograd::mpi)
  endif()
  if(TARGET heterograd::blas)
    target_link_libraries(${tgt} PRIVATE heterograd::blas)
  endif()
  if(I_CUDA)
    target_link_libraries(${tgt} PRIVATE heterograd::cuda)
    set(system CUDA)
    set_target_properties(${tgt} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    # CMake 3.25 does not know nvcc 13's dialect flags and would compile as C++17.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
    endif()
  else()
    set(system ${HG_DEVICE_SYSTEM})
  endif()
  target_compile_definitions(${tgt} PRIVATE THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_${system}
                                            THRUST_HOST_SYSTEM=THRUST_HOST_SYSTEM_CPP)
  # Designated initializers of option structs leave fields at their defaults on purpose.
  target_compile_options(${tgt} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wno-missing-field-initializers>)
endfunction()

# Makes CUDA copies of C++ sources: a .cu wrapper per file that includes the original, so the
# same test source is compiled once per backend.
function(hg_cuda_wrappers out_var)
  set(wrappers)
  foreach(src IN LISTS ARGN)
    get_filename_component(abs "${src}" ABSOLUTE)
    get_filename_component(stem "${src}" NAME_WE)
    set(w "${CMAKE_CURRENT_BINARY_DIR}/cuda_wrappers/${stem}.cu")
    file(CONFIGURE OUTPUT "${w}" CONTENT "#include \"${abs}\"\n")
    list(APPEND wrappers "${w}")
  endforeach()
  set(${out_var} ${wrappers} PARENT_SCOPE)
endfunction()

# What every test registration below shares, after its cmake_parse_arguments(T ...): TIMEOUT's
# default (120 s), and the Boost.Test program <name> of T_SOURCES on hg_test_main and T_LIBS
# (further arguments, e.g. CUDA, go to hg_internal_target). A macro: T_TIMEOUT is the caller's.
macro(hg_test_program name)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  hg_internal_target(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE hg_test_main ${T_LIBS})
endmacro()

# hg_add_test(<name> SOURCES ... [LABELS ...] [TIMEOUT s] [LIBS ...] [CUDA])
# One Boost.Test executable; with CUDA and HG_ENABLE_CUDA, also <name>_cuda compiled by nvcc
# from the same sources and labelled 'cuda'.
function(hg_add_test name)
  cmake_parse_arguments(T "CUDA" "TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  hg_test_program(${name})
  add_test(NAME ${name} COMMAND ${name} --log_level=message --report_level=short)
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if(T_CUDA AND HG_ENABLE_CUDA)
    hg_cuda_wrappers(cu ${T_SOURCES})
    hg_add_cuda_test(${name}_cuda SOURCES ${cu} LIBS ${T_LIBS} TIMEOUT ${T_TIMEOUT})
    target_include_directories(${name}_cuda PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
endfunction()

# hg_add_cuda_test(<name> SOURCES ... [LIBS ...] [TIMEOUT s])
# A Boost.Test executable of CUDA sources only (no CPU twin), labelled 'cuda' (run by
# ./hg gpu-check) and built by hg-cuda-all; nothing without HG_ENABLE_CUDA.
function(hg_add_cuda_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT HG_ENABLE_CUDA)
    return()
  endif()
  hg_test_program(${name} CUDA)
  add_test(NAME ${name} COMMAND ${name} --log_level=message --report_level=short)
  set_tests_properties(${name} PROPERTIES LABELS "cuda" TIMEOUT ${T_TIMEOUT})
  add_dependencies(hg-cuda-all ${name})
endfunction()

# hg_add_fuzz_test(<name> SOURCES ... SECONDS s MAX_LEN n [INCLUDES dir...] [FLAGS ...]
#                  [DEPENDS file...] [SEED_FILES file...] [SEED_ENV var] [MIN_SEEDS n])
# A libFuzzer target built with clang (libFuzzer is clang's; ./hg deps installs clang and
# libclang-rt) under ASan + UBSan, and a CTest test <name> (labels unit, fuzz) that runs it for
# SECONDS seconds through hg_run_fuzz.cmake: seeds from SEED_FILES and, with SEED_ENV, the ones
# the fuzzer's LLVMFuzzerInitialize writes into the folder that variable names. FLAGS are link
# flags. Each source is compiled on its own (in parallel, through ccache when present) with a depfile, so a change to any header it includes rebuilds it; DEPENDS adds
# files no depfile names. Nothing is added without clang.
function(hg_add_fuzz_test name)
  cmake_parse_arguments(F "" "SECONDS;MAX_LEN;SEED_ENV;MIN_SEEDS" "SOURCES;INCLUDES;FLAGS;DEPENDS;SEED_FILES" ${ARGN})
  find_program(HG_CLANGXX NAMES clang++ clang++-14 clang++-15 clang++-16)
  if(NOT HG_CLANGXX)
    return()
  endif()
  set(exe "${CMAKE_CURRENT_BINARY_DIR}/${name}")
  set(flags -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  set(includes -I${PROJECT_SOURCE_DIR}/include -isystem ${HG_CCCL_INCLUDE_DIR})
  foreach(d IN LISTS F_INCLUDES)
    list(APPEND includes -I${d})
  endforeach()
  set(objects "")
  set(i 0)
  foreach(s IN LISTS F_SOURCES)
    get_filename_component(a "${s}" ABSOLUTE)
    get_filename_component(stem "${s}" NAME_WE)
    set(o "${CMAKE_CURRENT_BINARY_DIR}/${name}.dir/${i}_${stem}.o")
    add_custom_command(OUTPUT "${o}"
      COMMAND ${HG_CCACHE_LAUNCHER} "${HG_CLANGXX}" ${flags} ${includes} -MD -MF "${o}.d"
              -c "${a}" -o "${o}"
      DEPENDS "${a}" ${F_DEPENDS} DEPFILE "${o}.d"
      COMMENT "Compiling ${stem} of the ${name} fuzzer with clang"
      VERBATIM)
    list(APPEND objects "${o}")
    math(EXPR i "${i} + 1")
  endforeach()
  add_custom_command(OUTPUT "${exe}"
    COMMAND "${HG_CLANGXX}" ${flags} ${objects} ${F_FLAGS} -o "${exe}"
    DEPENDS ${objects}
    COMMENT "Linking the ${name} fuzzer with clang"
    VERBATIM)
  add_custom_target(hg-${name} ALL DEPENDS "${exe}")
  add_test(NAME ${name}
           COMMAND "${CMAKE_COMMAND}" -DNAME=${name} -DFUZZER=${exe} -DCORPUS=${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus
                   -DSECONDS=${F_SECONDS} -DMAX_LEN=${F_MAX_LEN} "-DSEED_FILES=${F_SEED_FILES}"
                   -DSEED_ENV=${F_SEED_ENV} -DMIN_SEEDS=${F_MIN_SEEDS}
                   -P "${PROJECT_SOURCE_DIR}/cmake/hg_run_fuzz.cmake")
  math(EXPR limit "${F_SECONDS} * 2 + 60")
  set_tests_properties(${name} PROPERTIES LABELS "unit;fuzz" TIMEOUT ${limit})
endfunction()

# hg_add_mpi_test(<name> SOURCES ... NP <n>... [TIMEOUT s] [LIBS ...])
# One Boost.Test executable run under mpirun for each process count in NP, as tests
# <name>_np<n> labelled 'mpi'. Sources include "hg_mpi.hpp" and declare
# `using mpi_test::mpi_session; BOOST_TEST_GLOBAL_FIXTURE(mpi_session);`. Nothing is added without MPI.
function(hg_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;NP;LIBS" ${ARGN})
  if(NOT TARGET heterograd::mpi OR NOT MPIEXEC_EXECUTABLE)
    return()
  endif()
  hg_test_program(${name})
  # OpenMPI refuses root unless told (CI runs as root); --oversubscribe lets more ranks than
  # cores share the machine.
  set(env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  foreach(np IN LISTS T_NP)
    add_test(NAME ${name}_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS}
                     --log_level=message --report_level=short)
    set_tests_properties(${name}_np${np} PROPERTIES LABELS "mpi" TIMEOUT ${T_TIMEOUT}
                         ENVIRONMENT "${env}")
  endforeach()
endfunction()
