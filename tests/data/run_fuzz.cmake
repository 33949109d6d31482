# Seeds a corpus (the fuzzer writes it: plain and gzipped IDX images and labels, alone and as
# load_idx_pair inputs, see idx_fuzz.cpp), then runs the fuzzer for SECONDS seconds with a
# fixed seed. Any crash, sanitizer report or hang (-timeout: one input past 10 s) fails the test.
file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "HG_IDX_FUZZ_SEEDS=${CORPUS}"
                        "${FUZZER}" -runs=0 "${CORPUS}"
                RESULT_VARIABLE seed_rc)
file(GLOB _seeds "${CORPUS}/*")
list(LENGTH _seeds _n)
if(NOT seed_rc EQUAL 0 OR _n LESS 7)
  message(FATAL_ERROR "IDX fuzzer: writing the seed corpus failed (exit ${seed_rc}, ${_n} seeds)")
endif()
execute_process(COMMAND "${FUZZER}" -max_total_time=${SECONDS} -seed=1 -max_len=4096 -timeout=10
                        -rss_limit_mb=2048 -print_final_stats=1 "${CORPUS}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "IDX fuzzer failed (exit ${rc}): see the crash report above")
endif()
