# Train 12 steps in one process; train 7, save, and train the last 5 in a new
# process from the file alone: the two final checkpoints must be identical
# byte for byte (parameters, optimizer moments, step and generator state).
set(dir ${WORK_DIR})
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})
foreach(args "--steps;12;--save;${dir}/straight.safetensors"
             "--steps;7;--save;${dir}/first.safetensors"
             "--steps;12;--resume;${dir}/first.safetensors;--save;${dir}/resumed.safetensors")
  execute_process(COMMAND ${RESUME_CHECK} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resume_check ${args} failed: ${err}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${dir}/straight.safetensors ${dir}/resumed.safetensors
                RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "a run resumed in a new process differs from the uninterrupted run")
endif()
message(STATUS "resumed run is bit-identical to the uninterrupted one")
