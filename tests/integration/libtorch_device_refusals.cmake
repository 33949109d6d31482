# hg-libtorch-train's --device refusals (integration_libtorch_device_refusals): each run must
# fail before training, with a message naming the option and the rule.
function(expect_refusal code pattern)
  execute_process(COMMAND ${TRAIN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 60)
  if(NOT rc EQUAL code)
    message(FATAL_ERROR "'${ARGN}': exit ${rc}, expected ${code}\n${out}${err}")
  endif()
  string(FIND "${err}" "${pattern}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "'${ARGN}': expected the message '${pattern}', got:\n${out}${err}")
  endif()
endfunction()

expect_refusal(2 "unknown device tpu (cpu, cuda or auto)" --device tpu)
expect_refusal(2 "--device cuda trains with --mode adam; local-sgd runs on the CPU here" --device cuda --mode local-sgd)
expect_refusal(2 "--device cuda trains with --mode adam; omnilearn runs on the CPU here" --mode omnilearn --device cuda)
if(NOT CUDA_STEP)
  expect_refusal(1 "--device cuda: this build has no CUDA step (fused_adam_cuda.cu is built with -DHG_ENABLE_CUDA=ON" --device cuda)
endif()
