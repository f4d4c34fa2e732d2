# Writes a sample file and a trained GPT checkpoint with resume_check, then
# reads both with tests/check_safetensors.py (json + struct only).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
foreach(args "--sample;${WORK_DIR}/sample.safetensors" "--steps;3;--save;${WORK_DIR}/gpt.safetensors")
  execute_process(COMMAND ${RESUME_CHECK} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resume_check ${args} failed: ${err}")
  endif()
endforeach()
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${WORK_DIR}/sample.safetensors ${WORK_DIR}/gpt.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_safetensors.py failed:\n${out}${err}")
endif()
message(STATUS "${out}")
