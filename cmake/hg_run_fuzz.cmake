# Runs one libFuzzer target (hg_add_fuzz_test): a fresh corpus from the seed files given and
# the seeds the fuzzer writes itself (its LLVMFuzzerInitialize, when the environment variable
# SEED_ENV names the corpus), then SECONDS seconds of fuzzing from a fixed seed. A crash, a
# sanitizer report, more than 2 GiB of memory or one input taking over 10 s (a hang) fails it.
#   cmake -DNAME=... -DFUZZER=... -DCORPUS=... -DSECONDS=... -DMAX_LEN=...
#         [-DSEED_FILES=a;b] [-DSEED_ENV=VAR] [-DMIN_SEEDS=n] -P hg_run_fuzz.cmake
file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}")
foreach(_f IN LISTS SEED_FILES)
  get_filename_component(_n "${_f}" NAME)
  configure_file("${_f}" "${CORPUS}/${_n}" COPYONLY)
endforeach()
if(SEED_ENV)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env "${SEED_ENV}=${CORPUS}" "${FUZZER}" -runs=0 "${CORPUS}"
                  RESULT_VARIABLE _seed_rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT _seed_rc EQUAL 0)
    message(FATAL_ERROR "${NAME} fuzzer: writing its seeds failed (exit ${_seed_rc})")
  endif()
endif()
file(GLOB _seeds "${CORPUS}/*")
list(LENGTH _seeds _count)
if(MIN_SEEDS AND _count LESS MIN_SEEDS)
  message(FATAL_ERROR "${NAME} fuzzer: ${_count} seeds in ${CORPUS}, expected at least ${MIN_SEEDS}")
endif()
execute_process(COMMAND "${FUZZER}" -max_total_time=${SECONDS} -seed=1 -max_len=${MAX_LEN} -timeout=10
                        -rss_limit_mb=2048 -print_final_stats=1 "${CORPUS}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} fuzzer failed (exit ${rc}): see the report above")
endif()
