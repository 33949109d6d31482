# Seeds a corpus with a valid IDX images file and a labels file, then runs the fuzzer for
# SECONDS seconds with a fixed seed. Any crash or sanitizer report fails the test.
file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}")
# images: magic 00 00 08 03, dims 2 x 2 x 2, then 8 pixels
execute_process(COMMAND printf "\\000\\000\\010\\003\\000\\000\\000\\002\\000\\000\\000\\002\\000\\000\\000\\002\\001\\002\\003\\004\\005\\006\\007\\010"
                OUTPUT_FILE "${CORPUS}/images")
# labels: magic 00 00 08 01, dim 3, then 3 labels
execute_process(COMMAND printf "\\000\\000\\010\\001\\000\\000\\000\\003\\001\\002\\011"
                OUTPUT_FILE "${CORPUS}/labels")
execute_process(COMMAND "${FUZZER}" -max_total_time=${SECONDS} -seed=1 -max_len=4096
                        -print_final_stats=1 "${CORPUS}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "IDX fuzzer failed (exit ${rc}): see the crash report above")
endif()
