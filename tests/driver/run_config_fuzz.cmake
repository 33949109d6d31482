# Seeds a corpus with the named experiments (examples/experiments/*.json) and one --set input,
# then runs the configuration fuzzer for SECONDS seconds with a fixed seed. A crash, a
# sanitizer report, an exception other than config_error or an input taking longer than
# 10 s (-timeout: a hang) fails the test.
file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}")
file(GLOB _seeds "${EXPERIMENTS}/*.json")
foreach(_f IN LISTS _seeds)
  get_filename_component(_n "${_f}" NAME)
  configure_file("${_f}" "${CORPUS}/${_n}" COPYONLY)
endforeach()
file(READ "${EXPERIMENTS}/demo.json" _demo)
file(WRITE "${CORPUS}/set-override" "@methods[0].label=BSP\n${_demo}")
execute_process(COMMAND "${FUZZER}" -max_total_time=${SECONDS} -seed=1 -max_len=8192 -timeout=10
                        -rss_limit_mb=2048 -print_final_stats=1 "${CORPUS}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuration fuzzer failed (exit ${rc}): see the report above")
endif()
