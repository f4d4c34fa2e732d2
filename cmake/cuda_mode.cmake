# QKV_CUDA's value as one of AUTO, ON or OFF: in any case, and CMake's other
# words for true and false (1, YES, TRUE, Y; 0, NO, FALSE, N) mean ON and OFF
# (-DQKV_CUDA=on once fell through to AUTO). Anything else is a one-line
# error, not a guess. tests/cuda_mode_test.cmake checks every row.
function(qkv_cuda_mode value out)
  string(TOUPPER "${value}" mode)
  if(mode MATCHES "^(ON|1|YES|TRUE|Y)$")
    set(mode ON)
  elseif(mode MATCHES "^(OFF|0|NO|FALSE|N)$")
    set(mode OFF)
  elseif(NOT mode STREQUAL "AUTO")
    message(FATAL_ERROR "QKV_CUDA='${value}' is not AUTO, ON or OFF")
  endif()
  set(${out} ${mode} PARENT_SCOPE)
endfunction()
